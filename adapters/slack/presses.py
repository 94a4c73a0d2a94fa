"""Slack's button presses (``block_actions``): resolved in the core, acked, then answered.

A press is acked at once (Slack wants its 2xx within 3 seconds) after the core resolved
it (local and quick: :func:`bridge.presses.press_plan` says what the press changes); the
answer on Slack, the pressed message edited and/or an ephemeral word to the presser, goes
on in a tracked task that the adapter's stop waits for briefly.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import aiohttp
from slack_sdk.errors import SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bridge.model import Outgoing, ReplyTarget
from bridge.ports import AdapterContext, DeliveryError
from bridge.presses import NOT_ALLOWED_TEXT, PRESS_FAILED_TEXT, MessageChange, press_plan

from .access import PLATFORM, Access, count
from .content import obj
from .surface import SlackSurface

log = logging.getLogger(__name__)
STOP_GRACE_S = 1  # the core allows adapters 2 s to stop


@dataclass(frozen=True)
class PressAnswer:
    """How a button press is answered on Slack, after the ack: the pressed message edited
    to how the press left it, and/or a word to the presser only (an ephemeral message)."""

    target: ReplyTarget  # the pressed message's workspace (its chat.update budget)
    ref: str | None = None  # the pressed message, when it is to be edited
    resolved: Outgoing | None = None  # what it then shows: no buttons left in it
    stale: bool = False  # its run is over: an edit of it already coming is newer
    ephemeral: dict[str, Any] | None = None  # chat.postEphemeral's arguments


class Presses:
    """Block actions to the core and their answers on Slack (the tasks that answer them)."""

    def __init__(
        self, ctx: AdapterContext, access: Access, surface: SlackSurface, client: AsyncWebClient
    ) -> None:
        self.ctx = ctx
        self.access = access
        self.surface = surface
        self.client = client
        self._tasks: set[asyncio.Task[None]] = set()  # answers to button presses

    async def on_action(self, ack: Any, body: dict[str, Any]) -> None:
        """Resolve the press in the core (local and quick), ack, then answer on Slack."""
        try:
            answer = await self.press(body)
        finally:
            await ack()
        if answer is not None:
            task = asyncio.create_task(self.answer(answer), name="slack-press")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def press(self, body: dict[str, Any]) -> PressAnswer | None:
        """The press in the core; returns how to answer it on Slack. The pressed message is
        edited to the core's ``resolved`` (no buttons in it) when the press answered it, and
        also when the press found it expired (the Stop of a run that is over, a prompt
        nobody can answer now): else it keeps its buttons, and "working", forever. As on
        Telegram, an expired one is touched only if the button is of the gateway's own."""
        user_info = obj(body.get("user"))
        user = str(user_info.get("id") or "")
        actions = body.get("actions") or []
        value = actions[0].get("value") if actions and isinstance(actions[0], dict) else None
        container, message = obj(body.get("container")), obj(body.get("message"))
        channel = str(container.get("channel_id") or obj(body.get("channel")).get("id") or "")
        message_ts = container.get("message_ts") or message.get("ts")
        thread_ts = container.get("thread_ts") or message.get("thread_ts")
        team = str(obj(body.get("team")).get("id") or user_info.get("team_id") or "")
        # the presser's own workspace for the allowlist (Slack Connect: not the app's)
        user_team = str(user_info.get("team_id") or team)
        if not user or not channel or not isinstance(value, str) or not value:
            log.info("slack: ignored a block action without user, channel or value")
            return None
        target = ReplyTarget(surface=PLATFORM, thread_key=f"slack:{team}:{channel}", context={})
        if not self.access.allowed(user_team, channel, user):
            # told, as on Telegram: a button that silently does nothing reads as broken
            log.info("slack: refused a press by %s in %s (not allowed)", user, channel)
            count(self.ctx.metrics, "denied")
            return PressAnswer(
                target, ephemeral=_ephemeral(channel, user, NOT_ALLOWED_TEXT, thread_ts)
            )
        try:
            result = await self.ctx.gateway.press(
                value, user, is_operator=self.access.is_operator(user), actor_name=f"<@{user}>"
            )
        except Exception:  # a store that cannot write (a full disk), a bug: said, as on Telegram
            log.exception("slack: a press by %s in %s failed", user, channel)
            failed = _ephemeral(channel, user, PRESS_FAILED_TEXT, thread_ts)
            return PressAnswer(target, ephemeral=failed)
        plan = press_plan(value, result)
        stale = plan.change is MessageChange.SETTLE
        ref = resolved = None
        # a message is edited with its new text or not at all (chat.update wants one), so a
        # plan to drop its buttons only leaves it be
        if plan.change in (MessageChange.EDIT, MessageChange.SETTLE) and message_ts:
            ref, resolved = f"{channel}:{message_ts}", plan.resolved
        ephemeral: dict[str, Any] | None = None
        if plan.text and not (plan.edited and ref is not None):  # an edit says it all
            ephemeral = _ephemeral(channel, user, plan.text, thread_ts)
        if ref is None and ephemeral is None:
            return None
        return PressAnswer(target, ref, resolved, stale, ephemeral)

    async def answer(self, answer: PressAnswer) -> None:
        """Edit the pressed message, then tell the presser; neither failing stops the other."""
        if answer.ref is not None and answer.resolved is not None:
            # through the surface: a 429 holds the edit and sends it when Slack reopens,
            # so the pressed message does not keep its buttons
            settle = self.surface.settle if answer.stale else self.surface.edit
            await self._answer_call(
                "chat.update", settle(answer.target, answer.ref, answer.resolved)
            )
        if answer.ephemeral is not None:
            await self._answer_call(
                "chat.postEphemeral", self.client.chat_postEphemeral(**answer.ephemeral)
            )

    async def _answer_call(self, method: str, call: Awaitable[Any]) -> None:
        """One Slack call of a press's answer: a failure is logged, never raised (nothing
        waits for this task but shutdown); a held edit goes out once Slack allows."""
        try:
            await call
        except DeliveryError as exc:
            if exc.retry_after:
                log.info("slack: the answer to a button press waits for Slack: %s", exc)
            else:
                log.warning("slack: could not answer a button press (%s): %s", method, exc)
        except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("slack: could not answer a button press (%s): %s", method, exc)

    async def drain(self) -> None:
        """Let the answers under way finish briefly, then cancel what is left."""
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=STOP_GRACE_S)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _ephemeral(channel: str, user: str, text: str, thread_ts: Any) -> dict[str, Any]:
    """chat.postEphemeral's arguments: ``text`` to ``user`` only, in the pressed thread."""
    args: dict[str, Any] = {"channel": channel, "user": user, "text": text}
    if thread_ts:
        args["thread_ts"] = str(thread_ts)
    return args
