"""A turn: from a message taken off its conversation's queue to its answer.

The refusals come first (a chat gone, the day's budget spent, too many new conversations),
then a run slot (fair between people and teams, :mod:`bridge.engine.scheduler`), the home
(made on first use), the message's files saved into it, and the run (:mod:`.run`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace

from provisioning.errors import ProvisioningError
from provisioning.homes import Home

from ..files import save_attachment
from ..model import Attachment, InboxState, thread_group
from ..ports import DeliveryError, FileTooLarge, ResolvesFiles, Surface
from ..runner import RunResult
from ..store import MessageRecord, StoreError, utc_midnight
from . import prompts as P
from .reporter import ProgressReporter
from .run import Running, gateway_failure, not_run
from .scheduler import Lease, Wait
from .state import (
    CLOSED_BUBBLES_KEPT,
    DAY_S,
    DOWNLOAD_TRIES,
    DOWNLOAD_WAIT_MAX_S,
    ActiveRun,
    ConversationSlot,
    run_person,
)
from .texts import left_out_text, waiting_text

log = logging.getLogger(__name__)


class Turns(Running):
    """A turn's refusals, run slot, home, attachments and run."""

    async def _acquire_slot(self, slot: ConversationSlot, msg: MessageRecord) -> Lease | None:
        """A run slot for ``msg`` within the gateway's, its person's and its team's caps
        (``limits.max_concurrent_runs``, ``max_runs_per_user``, ``max_runs_per_team``);
        None once the gateway is stopping. Told why it waits, once per burst."""

        async def tell(why: Wait) -> None:
            if not slot.told:
                slot.told = True
                await self._notice(msg, f"waiting:{msg.id}", waiting_text(why))

        return await self._runs.acquire(run_person(msg), thread_group(msg.thread_key), tell)

    async def _turn(self, slot: ConversationSlot, msg: MessageRecord) -> None:
        if await self._refused(msg):
            return
        await self._leftovers_killed.wait()  # what the accounts ran before the start is gone
        if slot.last is not None:  # the previous run's leftovers are gone before this one
            last, slot.last = slot.last, None  # (waited for without holding a run slot)
            await last.settled()
        lease = await self._acquire_slot(slot, msg)
        if lease is None:  # it waited while the gateway began to stop: the next start runs it
            return
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.metrics.runs_in_flight.dec()
                self._runs.release(lease)

        self.metrics.runs_in_flight.inc()
        try:
            if self.stopping:  # the gateway began to stop as the slot came: the next start runs it
                return
            # checked again with the run slot held: while this message waited for it, a run
            # that ended may have taken the day's spend over the cap (its cost is recorded
            # before its slot is given back), or its chat was found to take no more messages
            if await self._refused(msg, release):
                return
            ran = await self._run_turn(slot, msg, lease)
            if ran is None:
                return
            try:
                # the outcome (its cost) is recorded before the run slot is given back, then
                # the answer is sent with the slot free for the next run
                records = await self._record(*ran)
                release()
                if records is not None:
                    await self._answer(*ran, records)
            finally:
                if not ran[0].summary_shown:  # its bubble (if any) still reads "working":
                    self._closed_bubbles.pop(ran[0].stop_token, None)  # a Stop settles it
        finally:
            release()

    async def _refused(self, msg: MessageRecord, release: Callable[[], None] | None = None) -> bool:
        """Close ``msg`` without a run when its chat takes no more messages (known since it
        was queued: a message from the chat would have made it reachable again), or answer
        it with the daily cap's refusal when no new run may start today; whether it was.
        ``release``: the run slot held, given back before the answer is sent."""
        why = self.deliverer.gone(msg.conversation_id)
        over = None if why is not None else await self._over_budget()
        too_many = None if why or over else await self._too_many_new(msg)
        if why is None and over is None and too_many is None:
            return False
        if release is not None:
            release()
        if why is not None:
            await self._close_unreachable(msg, why)
            return True
        if too_many is not None:
            await self._finish_message(msg, InboxState.FAILED, "new-limit", too_many)
            return True
        await self._finish_message(
            msg,
            InboxState.FAILED,
            "budget",
            f"💸 Today's spending limit for this gateway is reached ({over}); new messages "
            "run again after midnight UTC.",
        )
        return True

    async def _too_many_new(self, msg: MessageRecord) -> str | None:
        """Why ``msg`` may not start a new conversation (each one is an account, kept for
        good), or None: its sender, or its team or chat, started the most allowed in the
        last 24 hours (``accounts.new_per_user_per_day``, ``new_per_team_per_day``)."""
        cfg = self.settings.accounts
        if msg.conversation_id in self._homes or not (
            cfg.new_per_user_per_day or cfg.new_per_team_per_day
        ):
            return None
        group = thread_group(msg.thread_key)
        ran, mine, team = await self.store.conversations_started(
            msg.conversation_id, msg.sender_id, group, time.time() - DAY_S
        )
        if ran:
            return None
        if cfg.new_per_user_per_day and mine >= cfg.new_per_user_per_day:
            who = f"You have started {mine} new conversations"
        elif cfg.new_per_team_per_day and team >= cfg.new_per_team_per_day:
            who = f"This team or chat has started {team} new conversations"
        else:
            return None
        log.warning(
            "new conversation %s refused: %s started %d, %s %d in 24 h",
            msg.thread_key,
            msg.sender_id,
            mine,
            group,
            team,
        )
        return (
            f"🚫 {who} in the last 24 hours, the most this gateway allows; this one was not "
            "started. Continue one of your conversations, or ask an operator to raise the "
            "limit (accounts.new_per_user_per_day, new_per_team_per_day)."
        )

    async def _over_budget(self) -> str | None:
        """Why no new run may start today (the daily cap), or None."""
        cap = self.settings.limits.daily_cost_usd
        if cap is None:
            return None
        spent, unpriced = await self.store.cost_since(utc_midnight())
        if spent >= cap:
            return f"${spent:.2f} spent of ${cap:.2f}"
        if unpriced:
            return f"{unpriced} run(s) today had no price, so the spend is unknown"
        return None

    async def _run_turn(
        self, slot: ConversationSlot, msg: MessageRecord, lease: Lease | None = None
    ) -> tuple[ActiveRun, RunResult] | None:
        """Start and run one message; its run and result, or None when it had begun before.

        ``limits.max_concurrent_runs`` counts runs: the caller records the outcome with the
        run slot held (the next run's cap check counts its cost) and sends the answer after
        giving the slot back. ``lease``: that slot, parked while a prompt of the run waits
        for its person (:meth:`_park`).
        """
        run_record = await self.store.begin_run(msg.id, msg.sender_id, parts=msg.merged)
        if run_record is None:  # no longer accepted: started or answered already
            return None
        epoch = run_record.epoch
        run = ActiveRun(message=msg, run_id=run_record.id, target=self._target(msg), lease=lease)
        run.stopped_by, slot.stop_next = slot.stop_next, None  # a /stop before it started
        slot.next = None
        slot.active = run
        self._stop_tokens[run.stop_token] = run
        try:
            try:
                home = await self._ensure_home(msg)
                paths = await self._attachments(home, msg)
            except (ProvisioningError, OSError, DeliveryError) as exc:
                log.error("cannot prepare the home of %s: %s", msg.thread_key, exc)
                return run, not_run("provisioning", str(exc))
            surface = self.surfaces.get(msg.platform)
            if surface is not None:
                run.reporter = ProgressReporter(
                    surface,
                    run.target,
                    run.progress,
                    self.settings.progress,
                    run_id=run.run_id,
                    requester=msg.sender_id,
                    stop_token=f"{run.stop_token}{P.SEP}{P.STOP}",
                )
                run.reporter.start()
            return run, await self._execute(run, home, epoch, paths)
        except Exception as exc:  # recorded as started, so it is answered: a failed run
            log.exception("the run of message %d of %s failed", msg.id, msg.thread_key)
            if run.handle is not None:  # what it started is ended, and gone before the next run
                slot.last = run.handle
                with contextlib.suppress(Exception):
                    await run.handle.stop("failed")
            return run, gateway_failure(exc, started=run.handle is not None)
        finally:
            run.done.set()
            if run.reporter is not None:
                await run.reporter.finish()
            slot.active = None
            self._stop_tokens.pop(run.stop_token, None)
            if run.reporter is not None and run.reporter.bubble_ref is not None:
                self._closed_bubbles[run.stop_token] = None
                while len(self._closed_bubbles) > CLOSED_BUBBLES_KEPT:
                    self._closed_bubbles.popitem(last=False)

    async def _attachments(self, home: Home, msg: MessageRecord) -> list[str]:
        if not msg.attachments:
            return []
        surface = self.surfaces.get(msg.platform)
        cap = self.settings.limits.max_attachment_bytes
        files = [Attachment.from_dict(raw) for raw in msg.attachments]
        paths: list[str] = []
        left_out: list[tuple[Attachment, DeliveryError]] = []
        for index, att in enumerate(list(files)):
            try:
                if att.size is not None and att.size > cap:
                    raise FileTooLarge(att.name, cap, att.size)
                if surface is None:
                    raise DeliveryError(f"no surface {msg.platform} to download {att.name} from")
                att, data = await self._download(surface, att, cap)
            except DeliveryError as exc:
                # one of several files (an album, say: a phone's video is often over the
                # Bot API's 20 MB; or a file deleted since it was shared): the run gets those
                # that came, the person hears which did not and why
                if len(files) == 1 or self.stopping:
                    raise
                left_out.append((att, exc))
                continue
            saved = await asyncio.to_thread(save_attachment, home, msg.id, att.name, data)
            paths.append(saved)
            files[index] = replace(att, local_path=saved)  # where it is (the web page links it)
        if paths:
            await self._note_saved(msg, files)
        if left_out:
            if not paths:
                raise left_out[0][1]  # nothing came: refused, as one file that cannot come is
            await self._notice(msg, f"left-out:{msg.id}", left_out_text(left_out))
        return paths

    async def _note_saved(self, msg: MessageRecord, files: list[Attachment]) -> None:
        """Record where the message's files were saved (best effort: the run goes on
        without it; only the web chat's page, which links them, misses it)."""
        try:
            await self.store.saved_attachments(msg.id, [a.as_dict() for a in files])
        except StoreError as exc:
            log.warning("cannot record where the files of message %d went: %s", msg.id, exc)

    async def _download(
        self, surface: Surface, att: Attachment, cap: int
    ) -> tuple[Attachment, bytes]:
        """One attached file, completed by a surface that sends some without their name
        (the name it is saved under), and its bytes; a refusal that is not permanent (flood
        control, a 5xx, a lost connection) is waited out and tried again (bounded) before
        the turn gives up."""
        for attempt in range(1, DOWNLOAD_TRIES + 1):
            try:
                if isinstance(surface, ResolvesFiles):
                    att = await surface.resolve(att)
                    if att.size is not None and att.size > cap:
                        raise FileTooLarge(att.name, cap, att.size)
                return att, await surface.download(att, cap)
            except DeliveryError as exc:
                if exc.permanent or attempt == DOWNLOAD_TRIES or self.stopping:
                    raise
                wait = min(exc.retry_after or 2.0 ** (attempt - 1), DOWNLOAD_WAIT_MAX_S)
                log.info("downloading %s failed (%s); again in %.0fs", att.name, exc, wait)
                await asyncio.sleep(wait)  # the platform's pace or a backoff, bounded
        raise AssertionError("unreachable")  # the last try returned or raised
