"""The engine's answers to commands (``/status``, ``/stop``, ``/new``, ``/help``).

Commands are answered at once, never queued behind a run (the language itself, what a
command is and its forms, is :mod:`bridge.engine.commands`).
"""

from __future__ import annotations

import functools
import logging

from ..model import InboxState, Outgoing, ReplyKind
from ..store import MessageRecord, NewReply, utc_midnight
from .answers import Answers
from .commands import Command, ParsedCommand, help_text
from .progress import cost_text
from .state import ConversationSlot
from .texts import FILES_WITH_COMMAND_TEXT

log = logging.getLogger(__name__)


class Commanding(Answers):
    """Answering a parsed command at once, beside any run."""

    async def _command(self, msg: MessageRecord, parsed: ParsedCommand) -> None:
        try:
            await self._run_command(msg, parsed)
        finally:
            self._forget_if_idle(msg.conversation_id)

    async def _run_command(self, msg: MessageRecord, parsed: ParsedCommand) -> None:
        slot = self._slot(msg.conversation_id)
        command = parsed.command
        if command in (Command.HELP, Command.START):
            surface = self.surfaces.get(msg.platform)
            text = help_text(surface.capabilities.command_sigil if surface else "/")
        elif command is Command.NEW:
            # the epoch was bumped as /new was accepted (what came after it is of the fresh
            # conversation); the answer marks it done, so a replay answers it once
            running = slot.active is not None

            def answer(epoch: int) -> NewReply:
                text = (
                    f"🆕 Started a fresh conversation (#{epoch}): the agent won't remember "
                    "earlier messages. Files in this conversation's home stay."
                )
                if running:
                    text += " The run in progress finishes in the old conversation."
                key = f"command-{command.value}:{msg.id}"
                return self._reply(msg, key, Outgoing(ReplyKind.NOTICE, text))

            write = functools.partial(self.store.start_new_epoch, msg.id, answer)
            await self._deliver_written(write, f"the answer to message {msg.id}")
            return
        elif command is Command.STATUS:
            status = await self._retry.run(
                functools.partial(self._status_text, msg, slot), f"the status for {msg.id}"
            )
            if status is None:  # stopping: the next start answers it
                return
            text = status
        else:
            text = await self._stop_command(msg, slot)
        if msg.attachments:  # a file captioned with a command: said, not silently dropped
            text += f"\n\n{FILES_WITH_COMMAND_TEXT}"
        await self._finish_message(msg, InboxState.DONE, f"command-{command.value}", text)

    async def _status_text(self, msg: MessageRecord, slot: ConversationSlot) -> str:
        lines = []
        if slot.active is not None:
            who = slot.active.message.sender_name or slot.active.message.sender_id
            lines.append(f"**Running** (for {who}): {slot.active.progress.line()}")
        elif slot.next is not None:  # off the queue, its run not started yet
            caps = self._runs
            lines.append(
                "**Starting**: the next message waits for a run slot (the gateway runs at "
                f"most {caps.total} at once, {caps.per_user} per person and {caps.per_team} "
                "per team or chat) or for its parts."
            )
        else:
            lines.append("**Idle**: nothing is running in this conversation.")
        starting = 1 if slot.active is None and slot.next is not None else 0
        lines.append(f"Waiting: {slot.queue.waiting + starting} message(s).")
        conv = await self.store.conversation(msg.conversation_id)
        if conv is not None:
            lines.append(f"Conversation #{conv.epoch}.")
        runs = [r for r in await self.store.runs(msg.conversation_id, limit=5) if r.outcome]
        if runs and runs[0].outcome is not None:
            o = runs[0].outcome
            result = "ok" if o.ok else (o.envelope_code or "failed")
            lines.append(
                f"Last run: {result}, {o.total_tokens:,} tokens, "
                f"{cost_text(o.cost_usd, o.cost_known)}, {o.duration_ms / 1000:.1f}s."
            )
        cap = self.settings.limits.daily_cost_usd
        if cap is not None:
            spent, unpriced = await self.store.cost_since(utc_midnight())
            lines.append(f"Spend today: ${spent:.2f} of ${cap:.2f} ({unpriced} unpriced run(s)).")
        parked = self._runs.parked
        waiting = f" ({parked} of them waiting for a person's answer)" if parked else ""
        lines.append(f"Runs in flight across the gateway: {self._runs.held}{waiting}.")
        return "\n".join(lines)

    async def _stop_command(self, msg: MessageRecord, slot: ConversationSlot) -> str:
        run = slot.active
        starting = slot.next if run is None else run.message
        if starting is None:
            return "Nothing is running in this conversation."
        if msg.sender_id != starting.sender_id and not msg.is_operator:
            who = starting.sender_name or starting.sender_id
            return f"Only {who} (who started this run) or an operator can stop it."
        if run is None:  # about to start (waiting for a run slot): stopped as it starts
            slot.stop_next = msg.sender_name or msg.sender_id
            return "⏹️ Stopped: the run that was about to start stops as it starts."
        await self._stop_run(run, msg.sender_name or msg.sender_id)
        return "⏹️ Stopped."
