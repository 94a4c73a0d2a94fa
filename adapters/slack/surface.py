"""Replies to Slack through the real ``AsyncWebClient``: messages, edits, buttons, files.

Answers go out as ``markdown_text`` (Slack renders standard Markdown there; see
:mod:`.text`); prompts and the progress bubble as Block Kit (:mod:`.blocks`). Every
``chat.postMessage`` carries its reply key in the message metadata, so after an unclear
failure the thread is searched for it before the message is sent again: never a blind
duplicate (:mod:`.lookup`, also the core's :class:`~bridge.ports.ConfirmsDelivery` hook).
Slack limits each Web API method per app per workspace (team), so the surface paces calls
per workspace too (:mod:`.ratelimit`); edits the budget refuses are held and sent later
(:mod:`.edits`). Files people share are fetched by :mod:`.downloads`. This module is the
surface the core replies through, composed of those parts: posts, uploads, the status
indicator.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bridge.markdown import code_span
from bridge.model import Attachment, Outgoing, ReplyKind, ReplyTarget
from bridge.ports import Capabilities, DeliveryError

from .blocks import blocks_for
from .downloads import SlackDownloads
from .edits import MAX_EDIT_STATE, Edits
from .errors import CALL_ERRORS, slack_error, unclear
from .lookup import METADATA_EVENT, ReplyLookup
from .ratelimit import RateLimits
from .targets import team_of, where
from .text import _markdown, _mrkdwn

log = logging.getLogger(__name__)

TOP_LEVEL_POSTS_KEPT = 10_000  # the newest top-level posts (a DM's) remembered as the bot's


def _refused_upload_text(name: str, size: int, exc: Exception) -> str:
    """The note that stands for an artifact Slack would not take: the file, and why."""
    response = exc.response if isinstance(exc, SlackApiError) else None
    code = str(response.get("error") or "") if response is not None else ""
    needed = str(response.get("needed") or "") if response is not None else ""
    why = code or str(exc)
    if needed:
        why += f": the Slack app needs the {code_span(needed)} scope (reinstall it with it)"
    return (
        f"The agent made {code_span(name)} ({size:,} bytes), but Slack refused the upload "
        f"({why}). The file is kept in this conversation's home."
    )


class SlackSurface:
    name = "slack"
    capabilities = Capabilities(
        edit=True,
        buttons=True,
        upload=True,
        typing=True,
        max_length=12_000,
        edit_interval_s=3.0,  # chat.update is ~50 a minute per workspace (Tier 3)
        confirm_delivery=True,
        command_sigil="!",  # Slack keeps "/" for its slash commands (the adapter maps "!")
    )

    def __init__(
        self,
        client: AsyncWebClient,
        bot_token: str,
        *,
        api_url: str,
        max_file_bytes: int,
    ) -> None:
        self.client = client
        limits = RateLimits(budgets_kept=MAX_EDIT_STATE)
        self._limits = limits
        self._lookup = ReplyLookup(client, limits)
        self._edits = Edits(client, limits)
        self._downloads = SlackDownloads(
            client, bot_token, api_url=api_url, max_file_bytes=max_file_bytes
        )
        self._no_status: set[str] = set()  # channels where assistant status is unavailable
        # "channel:ts" of the newest posts made outside any thread (a DM conversation's): a
        # reply in a thread under one is the DM's conversation (see :meth:`posted_top_level`)
        self._top_level: OrderedDict[str, None] = OrderedDict()

    async def close(self) -> None:
        """Let held edits go out for a while (summaries among them), then stop sending."""
        await self._edits.close()
        await self._downloads.close()

    # -- messages -----------------------------------------------------------------------------

    async def send(self, target: ReplyTarget, message: Outgoing, *, reply_key: str) -> str:
        channel, thread_ts = where(target)
        if self._lookup.in_doubt(reply_key):  # raises when it cannot tell: no blind resend
            found = await self._lookup.find(team_of(target), channel, thread_ts, reply_key)
            if found is not None:
                return found
        kwargs: dict[str, Any] = {
            "channel": channel,
            "metadata": {"event_type": METADATA_EVENT, "event_payload": {"reply_key": reply_key}},
        }
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
        if message.choices or message.kind is ReplyKind.PROMPT:
            kwargs["blocks"] = blocks_for(message)
            kwargs["text"] = _mrkdwn(message.text or " ")
        else:
            kwargs["markdown_text"] = _markdown(message.text or " ")
        team = team_of(target)
        self._limits.gate("chat.postMessage", team)
        sent_at = time.time()
        try:
            response = await self.client.chat_postMessage(**kwargs)
        except CALL_ERRORS as exc:
            self._limits.note("chat.postMessage", team, exc)
            if unclear(exc):
                self._lookup.post_unclear(reply_key, channel, thread_ts, sent_at)
            raise slack_error(exc, "chat.postMessage") from exc
        self._lookup.posted(reply_key)
        ref = f"{channel}:{response['ts']}"
        if not thread_ts:
            self._top_level[ref] = None
            while len(self._top_level) > TOP_LEVEL_POSTS_KEPT:
                self._top_level.popitem(last=False)
        return ref

    def posted_top_level(self, channel: str, ts: str) -> bool:
        """Did this surface post ``channel``/``ts`` outside any thread (recently, since the
        start)? For a thread reply whose event does not say who wrote its root."""
        return f"{channel}:{ts}" in self._top_level

    async def find_sent(self, target: ReplyTarget, reply_key: str) -> str | None:
        """The core's question before a resend: did the message with ``reply_key`` land?
        Whoever asks decides what to do when it cannot be told (the core's last try sends
        anyway), so :meth:`send` does not search again by itself and refuse to post."""
        channel, thread_ts = where(target)
        self._lookup.forget_post(reply_key)
        return await self._lookup.find(team_of(target), channel, thread_ts, reply_key)

    async def edit(self, target: ReplyTarget, ref: str, message: Outgoing) -> None:
        """Edit now, or hold the edit for the workspace's flusher (see :meth:`.Edits.edit`)."""
        await self._edits.edit(team_of(target), ref, message)

    async def settle(self, target: ReplyTarget, ref: str, message: Outgoing) -> None:
        """Edit a message a button press found stale, unless a newer edit of it is coming
        (see :meth:`.Edits.settle`)."""
        await self._edits.settle(team_of(target), ref, message)

    async def upload(
        self,
        target: ReplyTarget,
        name: str,
        data: bytes,
        media_type: str | None,
        *,
        reply_key: str,
    ) -> str:
        """Upload an artifact into the thread. One Slack refuses for good (no ``files:write``,
        uploads turned off, a file type the workspace bars) is replaced by a note in the
        thread naming the file and Slack's reason, under the same reply key: else the
        answer points at a file the person never gets, and only the log says why."""
        channel, thread_ts = where(target)
        kwargs: dict[str, Any] = {"channel": channel, "filename": name, "title": name}
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
        team = team_of(target)
        self._limits.gate("files.completeUploadExternal", team)
        sent_at = time.time()
        try:
            response = await self.client.files_upload_v2(content=data, **kwargs)
        except CALL_ERRORS as exc:
            self._limits.note("files.completeUploadExternal", team, exc)
            if unclear(exc):  # it may be in the thread: find_sent looks before a resend
                self._lookup.upload_unclear(reply_key, name, len(data), sent_at)
            error = slack_error(exc, "files_upload_v2")
            if not error.permanent:
                raise error from exc
            log.warning("slack: upload of %s refused (%s); posting a note instead", name, error)
            note = Outgoing(ReplyKind.NOTICE, _refused_upload_text(name, len(data), exc))
            return await self.send(target, note, reply_key=reply_key)
        self._lookup.uploaded(reply_key)
        files = response.get("files") or [{}]
        return f"{channel}:{files[0].get('id') or reply_key}"

    async def typing(self, target: ReplyTarget) -> None:
        """The assistant thread status where the app has it; silently nothing elsewhere."""
        try:
            channel, thread_ts = where(target)
        except DeliveryError:
            return
        if not thread_ts or channel in self._no_status:
            return
        try:
            await self.client.assistant_threads_setStatus(
                channel_id=channel, thread_ts=thread_ts, status="is working…"
            )
        except SlackApiError as exc:
            code = str(exc.response.get("error") or "") if exc.response is not None else ""
            if code != "ratelimited":
                self._no_status.add(channel)  # not an assistant thread / no scope: stop asking
        except CALL_ERRORS:
            return

    # -- files --------------------------------------------------------------------------------

    def _may_send_token(self, url: str) -> bool:
        """Whether the bot token may go to ``url`` (see :meth:`.SlackDownloads.may_send_token`)."""
        return self._downloads.may_send_token(url)

    async def resolve(self, attachment: Attachment) -> Attachment:
        """A file sent as ``check_file_info`` (its id only) completed from files.info."""
        return await self._downloads.resolve(attachment)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The file's bytes, at most ``max_bytes`` (and the surface's own limit)."""
        return await self._downloads.download(attachment, max_bytes)
