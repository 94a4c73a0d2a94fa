"""One run: started, followed, and its outcome and replies recorded in one transaction.

The runner backend starts the run as the conversation's account; its events become
progress and prompts; its result (an answer, a failure, a stop, a limit hit) becomes the
replies, written with the run's outcome in one store transaction before any is delivered.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from dataclasses import replace

from provisioning.errors import UnsafePathError
from provisioning.homes import Home
from provisioning.sandbox import DEFAULT_ENV_ALLOWLIST, run_identity

from ..errors import RunnerError
from ..files import check_in_home
from ..logs import mask
from ..markdown import closed, split_markdown
from ..model import InboxState, Outgoing, ReplyKind
from ..runner import RunRequest, RunResult
from ..runner.base import PROMPT_EVENTS
from ..store import NewReply, ReplyRecord, RunOutcome, StoreError
from . import prompts as P
from .command_answers import Commanding
from .progress import summary
from .state import ActiveRun, conversation_name
from .texts import SHUTDOWN_TEXT, failure_text

log = logging.getLogger(__name__)


# an answer this short is split on the loop: it fits one part, and the check took ~3 us
# where a hand-off to a thread took ~100 (a long one needing a split takes ~1 ms and more)
INLINE_SPLIT_CHARS = 2000
# the outcomes /metrics counts runs by: the runner contract's failure codes and the
# gateway's own; any other code a runner prints is counted as "other" (the log and the
# stored outcome keep it)
RUN_OUTCOMES = frozenset(
    {
        "ok",
        "failed",
        "empty_response",
        "no_answer",
        "content_filtered",
        "interrupted",
        "timeout",
        "no_envelope",
        "bad_envelope",
        "answer_refused",
        "provisioning",
        "runner_missing",
        "gateway_error",
    }
)


def gateway_failure(exc: Exception, *, started: bool) -> RunResult:
    """A run the gateway itself failed (out of file descriptors, a bug): an answer, not silence."""
    doing = "follow" if started else "start"
    reason = str(exc) or type(exc).__name__
    error = f"the gateway could not {doing} the run: {reason}"
    if not started:
        return not_run("gateway_error", error)
    return RunResult(ok=False, code="gateway_error", error=error)


def not_run(code: str, error: str) -> RunResult:
    """A failure before any runner started: it cost nothing, and says so (a cost left
    unknown would count as an unpriced run against ``limits.daily_cost_usd`` and close the
    gateway to everyone for the rest of the day)."""
    return RunResult(ok=False, code=code, error=error, cost_usd=0.0, cost_known=True)


class Running(Commanding):
    """Executing a run and recording what came of it."""

    async def _execute(
        self, run: ActiveRun, home: Home, epoch: int, attachments: list[str]
    ) -> RunResult:
        cfg = self.settings.runner
        msg = run.message
        identity = run_identity(
            home,
            surface=msg.platform,
            allowlist=(*DEFAULT_ENV_ALLOWLIST, *cfg.env_passthrough),
            extra_env=cfg.extra_env,
            limits=self._run_limits,
        )
        run.limits = identity.limits
        prompt = msg.text
        if attachments and self.backend.runs_in_workspace:
            # named from the run's working directory (the workspace), not by paths of the
            # root: an agent quotes what it was told to the person
            workspace = home.path / "workspace"
            attachments = [os.path.relpath(p, workspace) for p in attachments]
            prompt += "\n\nAttached files (paths relative to the working directory):\n"
            prompt += "\n".join(f"- {p}" for p in attachments)
        elif attachments:
            prompt += "\n\nAttached files:\n" + "\n".join(f"- {p}" for p in attachments)
        request = RunRequest(
            home=home,
            identity=identity,
            conversation=conversation_name(msg.thread_key, epoch),
            prompt=prompt,
            agent=cfg.agent,
            approval_policy=cfg.approval_policy,
            timeout_s=cfg.timeout_s,
            events=tuple(cfg.events),
            attachments=tuple(attachments),
            kill_tag=self._kill_tag(msg.id),
        )
        if run.stopped_by is not None:  # a /stop came before it began: nothing is started
            return replace(not_run("interrupted", "stopped before it started"), stopped=True)
        try:
            run.handle = await self.backend.start(request)
        except RunnerError as exc:
            return not_run("runner_missing", str(exc))
        if run.shutdown:
            await run.handle.stop("shutdown")
        elif run.stopped_by is not None:  # /stop or Stop came while the run was starting
            await run.handle.stop("stopped")
        async for event in run.handle.events():
            run.progress.update(event)
            if event.type in PROMPT_EVENTS:
                try:
                    await self._on_prompt(run, event.type, event.data)
                except Exception:  # _on_prompt declines what it could not show; this is a bug
                    log.exception("a prompt of %s could not be handled", msg.thread_key)
        result = await run.handle.wait()
        self._slot(msg.conversation_id).last = run.handle
        if run.prompts:
            try:
                await self.store.expire_prompts(run.run_id)
            except StoreError as exc:  # the next start expires what is left
                log.warning("prompts of run %d not expired: %s", run.run_id, exc)
            for rec in list(run.prompts.values()):  # their buttons go: nobody can answer now
                await self._settle_prompt_message(
                    run, rec, P.expired_text(rec, self._prompt_room(run.message.platform))
                )
        return result

    async def _record(self, run: ActiveRun, result: RunResult) -> list[ReplyRecord] | None:
        """Record a run's outcome and replies (its cost counts from now); what to deliver,
        or None when the gateway stopped first."""
        msg = run.message
        outcome = RunOutcome(
            ok=result.ok,
            exit_code=result.exit_code,
            envelope_code=result.code,
            # stored, and shown by homes show and the ops pages: a provider's error may
            # quote its key (runner.extra_env)
            error=mask(result.error) if result.error else result.error,
            cost_usd=result.cost_usd,
            cost_known=result.cost_known,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
            total_tokens=result.total_tokens,
            duration_ms=result.duration_ms,
            tool_count=len(result.tool_calls) or sum(run.progress.tools.values()),
            # a person's Stop, which the operators' views show as such (not as a failure);
            # a run that answered all the same (it finished as the stop came) is just ok
            stopped_by=None if result.ok else run.stopped_text(),
        )
        label = "ok" if result.ok else (result.code or "failed")
        # Stopped by the gateway's shutdown: "send it again", unless the run answered all
        # the same (it finished as the stop came): that answer is kept and delivered, now or
        # at the next start; the runner has it in its history already.
        interrupted = run.shutdown and not result.ok
        log.info(  # one structured line per turn (JSON keys in the service's log)
            "turn %s: %s in %.1fs",
            msg.thread_key,
            "interrupted" if interrupted else label,
            result.duration_ms / 1000,
            extra={
                "event": "turn",
                "thread_key": msg.thread_key,
                "platform": msg.platform,
                "run_id": run.run_id,
                "outcome": "interrupted" if interrupted else label,
                "duration_ms": result.duration_ms,
                "exit_code": result.exit_code,
                "cost_usd": result.cost_usd if result.cost_known else None,
                "total_tokens": result.total_tokens,
                "stopped_by": run.stopped_by,
            },
        )
        line = summary(result, run.progress)
        bubble = run.reporter is not None and run.reporter.bubble_ref is not None
        replies: list[NewReply] = []
        state = InboxState.DONE if result.ok else InboxState.FAILED
        surface = self.surfaces.get(msg.platform)
        limit = surface.capabilities.max_length if surface else 4000
        if interrupted:
            state = InboxState.INTERRUPTED
            replies.append(
                self._reply(msg, f"interrupted:{msg.id}", Outgoing(ReplyKind.NOTICE, SHUTDOWN_TEXT))
            )
        elif result.ok:
            body = result.answer
            asked = result.flags.get("unasked_question")
            if isinstance(asked, str) and asked.strip():
                # the released CLI cannot ask the person: its ask tool gave the agent ""
                question = " ".join(asked.split())
                question = question if len(question) <= 500 else f"{question[:499]}…"
                body = (
                    f"{closed(body)}\n\n❓ The agent wanted to ask “{question}” but this Jazz "
                    "CLI cannot ask in the chat, so it went on without an answer. You can "
                    "reply with your answer in a new message."
                )
            if not bubble:
                body = f"{closed(body)}\n\n_{line}_"
            # off the loop: a long answer takes a while to parse and split (a short one is
            # split in less time than a hand-off to a thread takes)
            unit = surface.capabilities.length_unit if surface else "characters"
            if len(body) <= INLINE_SPLIT_CHARS:
                parts = split_markdown(body, limit - 16, unit)
            else:
                parts = await asyncio.to_thread(split_markdown, body, limit - 16, unit)
            for i, part in enumerate(parts):
                out = Outgoing(ReplyKind.ANSWER, part, continues=i > 0)
                replies.append(self._reply(msg, f"answer:{msg.id}:{i}", out))
            home = self._home_path(msg.conversation_id)
            for i, art in enumerate(result.artifacts):
                path = art.get("path")
                if not isinstance(path, str) or not path or home is None:
                    continue
                name = os.path.basename(path)
                try:
                    inside = await asyncio.to_thread(check_in_home, home, path)
                except (UnsafePathError, OSError) as exc:
                    # the log names the runner's path; the chat, the file relative to the home
                    log.warning("artifact %s of %s refused: %s", path, msg.thread_key, exc)
                    out = Outgoing(ReplyKind.NOTICE, f"Artifact `{name}` not sent: {exc}")
                else:  # kept relative to the home: the web chat shows it
                    out = Outgoing(
                        ReplyKind.ARTIFACT, name, file_path=inside, media_type=art.get("mediaType")
                    )
                replies.append(self._reply(msg, f"artifact:{msg.id}:{i}", out))
        else:
            text = failure_text(result, run.stopped_by, run.limits, self._run_limits)
            if not bubble:
                text += f"\n\n_{line}_"
            replies.append(self._reply(msg, f"error:{msg.id}", Outgoing(ReplyKind.ERROR, text)))
        records = await self._finish_run(run, outcome, state, replies)
        if records is None:
            return None  # stopping with the outcome unrecorded: the restart says "interrupted"
        # counted once recorded: a run in the metrics has its outcome and replies stored
        # a fixed set: the code is the runner's word, and every new value would be a new
        # time series kept for ever
        self.metrics.runs.labels(label if label in RUN_OUTCOMES else "other").inc()
        self.metrics.run_duration.observe(result.duration_ms / 1000)
        return records

    async def _answer(self, run: ActiveRun, result: RunResult, records: list[ReplyRecord]) -> None:
        """Close a recorded run's bubble with its summary, then deliver its replies."""
        line = summary(result, run.progress)
        if run.reporter is not None:
            run.summary_shown = await run.reporter.close(line)
        if not run.summary_shown:  # before the answer goes: a Stop pressed from now settles it
            self._closed_bubbles.pop(run.stop_token, None)
        await self.deliverer.deliver(records)

    async def _finish_run(
        self, run: ActiveRun, outcome: RunOutcome, state: InboxState, replies: list[NewReply]
    ) -> list[ReplyRecord] | None:
        """Record a run's outcome and replies; on a store failure (a full disk) try again.

        The message was acknowledged, so its answer must not be lost: the write is retried
        with a growing pause until it lands. Only when the gateway stops first is it left
        unrecorded; the message is still "running" in the store then, and the next start
        answers it with "interrupted, send again".
        """
        record = functools.partial(self.store.finish_run, run.run_id, outcome, state, replies)
        return await self._retry.run(record, f"run {run.run_id} of {run.message.thread_key}")
