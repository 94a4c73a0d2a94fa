"""Replies to Slack through the real ``AsyncWebClient``: messages, edits, buttons, files.

Answers go out as ``markdown_text`` (Slack renders standard Markdown there); prompts and the
progress bubble as Block Kit (a ``markdown`` block plus buttons whose ``value`` is the
core's opaque token). Every ``chat.postMessage`` carries its reply key in the message
metadata, so after an unclear failure (the connection dropped, Slack answered 5xx) the
thread is searched for it before the message is sent again: never a blind duplicate. Slack
may still be carrying out a request the client gave up on (its timeout, ``api_timeout_s``,
fired while Slack was slow): a search made then, a second later, does not find the reply
yet, and a resend would post it twice once the first request lands. So after an unclear
failure "not there" is believed only ``IN_FLIGHT_GRACE_S`` after it: a search before that
that finds nothing waits until then (asyncio, bounded) and searches again. The
same search is the core's :class:`~bridge.ports.ConfirmsDelivery` hook (``find_sent``), so
a reply found undelivered after a crash is looked up before it is sent again. A file has no
metadata: an upload whose answer was lost is looked for by its name and size among the
files posted since; after a crash it is uploaded again (at least once).

Slack limits each Web API method per app per workspace (team), so the surface paces calls
per workspace too. A 429 closes that method in that workspace for its ``Retry-After``:
calls meanwhile are not made (a :class:`DeliveryError` carrying the time left, which the
core's delivery waits out). chat.update also has a budget per workspace (Tier 3, about 50
a minute): each run's bubble is paced on its own (``edit_interval_s``), but a few long runs
at once in one workspace would together go over, and draw 429s. An edit the budget (or a
429) refuses is held: the newest one per message is sent once the workspace's budget
allows, so a bubble still shows its latest state, and ends on the run's summary. An edit
that takes a message's buttons away settles it (a summary, an answered prompt): it goes
before every held progress refresh of its workspace, which a newer one replaces anyway.
Workspaces never wait for each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pyromark
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bridge.markdown import PARSE_OPTIONS, code_span
from bridge.model import Attachment, Outgoing, ReplyKind, ReplyTarget
from bridge.ports import Capabilities, ChatGone, DeliveryError, FileTooLarge

log = logging.getLogger(__name__)

METADATA_EVENT = "jazz_bridge_reply"
MARKDOWN_BLOCK_MAX = 11_000  # Slack: 12,000 characters across a message's markdown blocks
MARKDOWN_TEXT_MAX = 12_000  # Slack: chat.postMessage's markdown_text, 12,000 characters
BUTTON_LABEL_MAX = 75
BUTTONS_PER_ACTIONS = 25
DOWNLOAD_CHUNK = 64 * 1024
MAX_EDIT_STATE = 2000  # messages whose edit order is tracked; idle ones are forgotten past this
LOOKUP_PAGES = 10  # conversations.replies/history pages searched for a reply key
CLOCK_SKEW_S = 60.0  # an upload in doubt is looked for among files posted since (this much)
# after an unclear failure (no answer in api_timeout_s, a dropped connection, a 5xx), how
# long Slack may still be carrying the request out: a search sooner that finds nothing is
# made again then, before the reply is sent again
IN_FLIGHT_GRACE_S = 10.0
TOP_LEVEL_POSTS_KEPT = 10_000  # the newest top-level posts (a DM's) remembered as the bot's
CHAT_UPDATE_PER_MINUTE = 50  # Slack Tier 3, per workspace: no minute holds more edits
CHAT_UPDATE_BURST = 5  # of those, how many one workspace may make at once after a quiet spell
CLOSE_FLUSH_S = 5.0  # held edits still being sent when the surface closes get this long
# an edit that settles a message (a summary, an answered prompt) and failed without a
# refusal (a 5xx, a dropped connection) is tried again this many times, the first after
# EDIT_RETRY_S, doubling: an edit sets the same content however often it lands
EDIT_RETRIES = 4
EDIT_RETRY_S = 1.0
# Slack's refusals (HTTP 200, ok: false) that may pass if tried again; every other code is
# a refusal for good (channel_not_found, restricted_action_read_only_channel, token_expired,
# cannot_reply_to_message, ...): retried, a reply would hold its thread's later replies for
# the deliverer's whole patience (an hour) for nothing
# the channel takes no more of the bot's posts: archived, deleted, or the bot removed from it
GONE_ERRORS = frozenset({"channel_not_found", "is_archived", "not_in_channel"})
TRANSIENT_ERRORS = frozenset(
    {
        "internal_error",
        "fatal_error",
        "service_unavailable",
        "request_timeout",
        "ratelimited",
        "accesslimited",
    }
)
# of those, the ones after which the call may have been carried out all the same (Slack:
# "some aspect of the operation succeeded"): looked for before it is made again
MAYBE_DONE_ERRORS = frozenset({"internal_error", "fatal_error"})


def retry_after_of(exc: Exception) -> float | None:
    """Seconds Slack asked to wait (a 429), else None."""
    if not isinstance(exc, SlackApiError) or exc.response is None:
        return None
    response = exc.response
    if getattr(response, "status_code", 0) != 429 and response.get("error") != "ratelimited":
        return None
    headers = getattr(response, "headers", {}) or {}
    raw = headers.get("Retry-After") or headers.get("retry-after") or "1"
    if isinstance(raw, list):  # slack_sdk keeps aiohttp's multi-valued headers as lists
        raw = raw[0] if raw else "1"
    try:
        return max(float(raw), 1.0)
    except ValueError:
        return 1.0


def slack_error(exc: Exception, what: str) -> DeliveryError:
    """Map a slack_sdk / transport error to the core's :class:`DeliveryError`."""
    if isinstance(exc, SlackApiError):
        response = exc.response
        code = str(response.get("error") or "") if response is not None else ""
        status = getattr(response, "status_code", 0)
        retry_after = retry_after_of(exc)
        if retry_after is not None:
            return DeliveryError(f"{what}: rate limited", retry_after=retry_after)
        if code in GONE_ERRORS:
            return ChatGone(f"{what}: {code}")
        return DeliveryError(
            f"{what}: {code or f'HTTP {status}'}",
            # a 5xx (or a transient code) may pass; a 4xx, or any other code, will not
            permanent=status < 500 and code not in TRANSIENT_ERRORS,
        )
    return DeliveryError(f"{what}: {type(exc).__name__}: {exc}")


def _unclear(exc: Exception) -> bool:
    """Did the request maybe reach Slack and post anyway (so a resend could duplicate)? A
    5xx, no answer, or Slack's own word for it: ``internal_error`` and ``fatal_error``
    (HTTP 200) say "some aspect of the operation" may have succeeded."""
    if isinstance(exc, SlackApiError):
        code = str(exc.response.get("error") or "") if exc.response is not None else ""
        return getattr(exc.response, "status_code", 0) >= 500 or code in MAYBE_DONE_ERRORS
    return True


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


def _slack_time(ts: object) -> float:
    """A message ts ("1764670300.000100") as seconds since the epoch; 0 when it is not one."""
    try:
        return float(str(ts))
    except ValueError:
        return 0.0


def _plain(text: str, limit: int = 3000) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# <!channel>, <!here>, <!everyone>, <!group>, <!subteam^…>: each notifies many people
_SPECIAL_MENTION = re.compile(r"<(?=!(?:channel|here|everyone|group|subteam\^))", re.IGNORECASE)
_SPECIAL_BANG = re.compile(r"<!(?=(?:channel|here|everyone|group|subteam\^))", re.IGNORECASE)
_JOINED = "<\u200d"  # a zero-width joiner between < and !: reads the same, adds a character
_CLICK = "<\u01c3"  # ! as U+01C3, drawn the same: adds nothing where a joiner won't fit
_ENTITY_TAIL = re.compile(r"&[a-z]{0,3}$")
# Slack's own markup, kept in a mrkdwn text as written: a user or channel mention, a link
_SLACK_TOKEN = re.compile(
    r"<(?:@[UW][A-Z0-9]+|#C[A-Z0-9]+|(?:https?://|mailto:)[^\s<>|]+)(?:\|[^<>\n]*)?>"
)
_LINK_URL = re.compile(r"(?:https?://|mailto:)[^\s<>|]+")


@dataclass
class _Parsed:
    """Where an answer's code and Markdown links are (UTF-8 byte ranges)."""

    code: list[tuple[int, int]]
    links: list[tuple[int, int, str]]  # a link's range and its mrkdwn form


def _parse(text: str) -> _Parsed:
    """The code spans and blocks of ``text`` (shown literally: nothing in them is
    markup), read with the options every surface's Markdown is split with, and its
    Markdown links and images written as mrkdwn links (``<url|label>``,
    or ``label (url)`` for what is not a web address)."""
    parsed = _Parsed([], [])
    open_links: list[tuple[int, int, str, list[str]]] = []  # an image can be in a link
    for payload, where in pyromark.events_with_range(text, options=PARSE_OPTIONS):
        event: Any = payload  # pyromark's union of TypedDicts, read as the dicts they are
        if not isinstance(event, dict):
            continue
        start, end = where["start"], where["end"]
        opened, closed = event.get("Start"), event.get("End")
        if "Code" in event or (isinstance(opened, dict) and "CodeBlock" in opened):
            parsed.code.append((start, end))
        if isinstance(opened, dict) and ("Link" in opened or "Image" in opened):
            data: Any = opened.get("Link") or opened.get("Image")
            if data.get("link_type") in ("Autolink", "Email"):
                continue  # <https://…> is a mrkdwn link as it is
            open_links.append((start, end, str(data.get("dest_url", "")), []))
        elif closed in ("Link", "Image") and open_links:
            start, end, url, label = open_links.pop()
            if not open_links:  # the outermost: its text has the inner ones' text
                parsed.links.append((start, end, _mrkdwn_link(url, "".join(label))))
        piece = event.get("Text", event.get("Code"))
        if isinstance(piece, str):
            for link in open_links:
                link[3].append(piece)
    return parsed


def _escape(text: str) -> str:
    """``&``, ``<`` and ``>`` as HTML entities, as Slack's formatting reference asks of
    text not meant as its markup."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _mrkdwn_link(url: str, label: str) -> str:
    label = " ".join(label.split())
    if _LINK_URL.fullmatch(url):
        link = _escape(url)  # Slack writes & in a link's URL as &amp; too
        return f"<{link}|{_escape(label)}>" if label and label != url else f"<{link}>"
    return _escape(f"{label} ({url})" if label and url else label or url)


def _mrkdwn(text: str, limit: int = 3000) -> str:
    """Agent text for a mrkdwn ``text`` field (the notification's text when the message
    has blocks): readable there, and notifying no channel. A Markdown link becomes a
    mrkdwn link (``<https://x|label>``); Slack's own user and channel mentions and links
    are kept; everything else has ``&``, ``<`` and ``>`` escaped as Slack's formatting
    reference asks, so none of it is read as a mention or link (``<!channel>`` would
    notify the whole channel), code included; clipped without cutting an entity or a
    link in half."""
    raw = text.encode()
    parsed = _parse(text)
    pieces: list[tuple[str, bool]] = []  # (text, whether it is cut only as a whole)
    at = 0
    regions: list[tuple[int, int, str | None]] = [(a, b, None) for a, b in parsed.code]
    regions = sorted([*regions, *parsed.links], key=lambda r: (r[0], r[1]))
    for start, end, form in [*regions, (len(raw), len(raw), None)]:
        if start < at:
            continue  # code inside a link's text: the link is written whole
        plain = raw[at:start].decode()
        last = 0
        for token in _SLACK_TOKEN.finditer(plain):
            pieces.append((_escape(plain[last : token.start()]), False))
            pieces.append((token.group(0), True))
            last = token.end()
        pieces.append((_escape(plain[last:]), False))
        if form is None:
            pieces.append((_escape(raw[start:end].decode()), False))
        else:
            pieces.append((form, True))
        at = end
    out: list[str] = []
    room = limit
    if sum(len(p) for p, _ in pieces) > limit:
        room = limit - 1  # for the "…"
    for piece, whole in pieces:
        if len(piece) <= room:
            out.append(piece)
            room -= len(piece)
            continue
        if not whole:
            out.append(_ENTITY_TAIL.sub("", piece[:room]))
        out.append("…")
        break
    return "".join(out)


def _markdown(text: str, limit: int = MARKDOWN_TEXT_MAX) -> str:
    """Agent text for ``markdown_text`` or a markdown block, at most ``limit`` characters.
    Slack does not document how these treat ``<!channel>`` and the like, nor any escape for
    them (HTML entities would show as typed), so a zero-width joiner (U+200D) goes between
    ``<`` and ``!`` where one would form: the text reads the same and notifies nobody. Not
    in code, which Slack shows as written (nothing in it notifies): there the joiner would
    only corrupt what is copied. A text with so many of them that the joiners would take it
    over ``limit`` (a part cut to the limit full of ``<!here>``, which Slack would refuse)
    gets U+01C3 (LATIN LETTER RETROFLEX CLICK, drawn as ``!``) for each ``!`` instead,
    which adds nothing; a text longer than ``limit`` on its own is clipped first."""
    text = _plain(text, limit)
    if not _SPECIAL_MENTION.search(text):
        return text
    raw = text.encode()
    outside: list[str] = []  # the text between code spans and blocks, then the code itself
    code: list[str] = []
    at = 0
    # parsed with each mention's "<" as a plain letter (the same byte offsets): CommonMark
    # reads a line that starts with "<!here>" as raw HTML, which Slack does not render, so
    # the code on that line would not be found as code and would get joiners
    code_ranges = _parse(_SPECIAL_MENTION.sub("x", text)).code
    for start, end in [*sorted(code_ranges), (len(raw), len(raw))]:
        if start < at:
            continue
        outside.append(raw[at:start].decode())
        code.append(raw[start:end].decode())
        at = end
    found = sum(len(_SPECIAL_MENTION.findall(piece)) for piece in outside)
    if len(text) + found <= limit:
        defused = [_SPECIAL_MENTION.sub(_JOINED, piece) for piece in outside]
    else:
        defused = [_SPECIAL_BANG.sub(_CLICK, piece) for piece in outside]
    return "".join(piece for pair in zip(defused, code, strict=True) for piece in pair)


def blocks_for(message: Outgoing) -> list[dict[str, Any]]:
    """A markdown block with the text, then the choices as buttons (if any)."""
    text = message.text or " "
    # clipped before defusing (in _markdown): a cut that drops a code span's closing
    # backticks turns what was code into text, to be defused
    blocks: list[dict[str, Any]] = [
        {"type": "markdown", "text": _markdown(text, MARKDOWN_BLOCK_MAX)}
    ]
    buttons: list[dict[str, Any]] = []
    for i, choice in enumerate(message.choices):
        button: dict[str, Any] = {
            "type": "button",
            "action_id": f"jb_choice_{i}",
            "text": {"type": "plain_text", "text": _plain(choice.label, BUTTON_LABEL_MAX)},
            "value": choice.token,
        }
        if choice.style in ("primary", "danger"):
            button["style"] = choice.style
        buttons.append(button)
    for start in range(0, len(buttons), BUTTONS_PER_ACTIONS):
        blocks.append(
            {
                "type": "actions",
                "block_id": f"jb_choices_{start // BUTTONS_PER_ACTIONS}",
                "elements": buttons[start : start + BUTTONS_PER_ACTIONS],
            }
        )
    return blocks


def split_ref(ref: str) -> tuple[str, str]:
    channel, _, ts = ref.partition(":")
    if not channel or not ts:
        raise DeliveryError(f"not a Slack message reference: {ref!r}", permanent=True)
    return channel, ts


def team_of(target: ReplyTarget) -> str:
    """The workspace a reply goes to (Slack's rate limits are per workspace): the team the
    message came from, else the one in the thread key (``slack:<team>:<channel>...``)."""
    team = target.context.get("team")
    if isinstance(team, str) and team:
        return team
    platform, _, rest = target.thread_key.partition(":")
    return rest.partition(":")[0] if platform == "slack" else ""


def settles(message: Outgoing) -> bool:
    """Is this edit a message's last word? One that leaves no buttons settles it (a run's
    summary, an answered prompt); one with buttons is a live bubble's progress refresh,
    which a newer one replaces."""
    return not message.choices


class EditBudget:
    """One workspace's chat.update calls: a token bucket holding up to ``burst`` calls,
    refilled so that no minute holds more than ``per_minute`` of them, the burst included."""

    def __init__(self, per_minute: int, burst: int) -> None:
        self.burst = float(max(1, min(burst, per_minute - 1)))
        self.rate = (per_minute - self.burst) / 60.0  # calls a second
        self.tokens = self.burst
        self.at = time.monotonic()

    def wait(self, now: float) -> float:
        """Seconds until a call may be made: 0 now."""
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        return 0.0 if self.tokens >= 1.0 else (1.0 - self.tokens) / self.rate

    def take(self) -> None:
        self.tokens -= 1.0

    def full(self, now: float) -> bool:
        self.wait(now)
        return self.tokens >= self.burst


@dataclass
class HeldEdit:
    """The newest edit of one message that could not be sent yet."""

    team: str
    message: Outgoing
    seq: int
    since: float  # when the message first had an edit held: its place in the queue
    tries: int = 0  # passing failures of this edit so far (see EDIT_RETRIES)
    ready_at: float = 0.0  # monotonic time before which it is not tried again

    @property
    def rank(self) -> tuple[bool, float]:
        """The flush order: edits that settle a message first, then the longest held."""
        return (not settles(self.message), self.since)


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
        self._token = bot_token
        self._api_origin = _origin(api_url)
        self.max_file_bytes = max_file_bytes
        self._unclear: dict[str, tuple[str, str | None]] = {}  # reply key -> channel, thread
        # reply key -> (file name, size, when it was sent) of an upload that failed in a way
        # that may have landed: a file message has no metadata, so it is found by its file
        self._uploads_in_doubt: dict[str, tuple[str, int, float]] = {}
        # reply key -> monotonic time until which Slack may still carry out its unclear
        # request (post or upload): "not there" is not believed before then
        self._in_flight_until: dict[str, float] = {}
        # reply key -> wall-clock time of its unclear request: the search for it starts
        # there (``oldest``), or a thread longer than LOOKUP_PAGES pages is never reached
        self._unclear_since: dict[str, float] = {}
        # a reply found in doubt at start may be one the previous process was posting when
        # it died: Slack may still be carrying that out, so "not there" is believed only
        # IN_FLIGHT_GRACE_S after this surface was made
        self._started = time.monotonic()
        self._no_status: set[str] = set()  # channels where assistant status is unavailable
        # "channel:ts" of the newest posts made outside any thread (a DM conversation's): a
        # reply in a thread under one is the DM's conversation (see :meth:`posted_top_level`)
        self._top_level: OrderedDict[str, None] = OrderedDict()
        self._session: aiohttp.ClientSession | None = None
        # (Web API method, team) -> monotonic time a 429 reopens it
        self._closed_until: dict[tuple[str, str], float] = {}
        self._budgets: dict[str, EditBudget] = {}  # team -> its chat.update budget
        self._held_edits: dict[str, HeldEdit] = {}  # ref -> its newest edit not sent yet
        self._flushers: dict[str, asyncio.Task[None]] = {}  # team -> sender of its held edits
        # chat.update of one message, one at a time and newest last: a held progress edit
        # in flight must not land after the summary that replaced it
        self._edit_locks: dict[str, asyncio.Lock] = {}
        self._edit_seq: dict[str, int] = {}
        # ref -> edits of it between taking a seq number and their end (sent, held, failed):
        # the clean-out of idle messages keeps their order and lock
        self._open_edits: dict[str, int] = {}
        self._landed: dict[str, Outgoing] = {}  # ref -> what its last edit showed

    # -- rate limits --------------------------------------------------------------------------

    def _wait(self, method: str, team: str) -> float:
        """Seconds until ``method`` may be called in ``team``: a 429's Retry-After, and for
        chat.update the workspace's budget."""
        now = time.monotonic()
        left = self._closed_until.get((method, team), 0.0) - now
        if method == "chat.update":
            left = max(left, self._budget(team).wait(now))
        return left

    def _gate(self, method: str, team: str) -> None:
        """Refuse (without calling Slack) while ``method`` may not be called in ``team``;
        else count the call against the workspace's budget."""
        left = self._wait(method, team)
        if left > 0:
            raise DeliveryError(f"{method}: rate limited for {left:.1f}s more", retry_after=left)
        if method == "chat.update":
            self._budget(team).take()

    def _budget(self, team: str) -> EditBudget:
        budget = self._budgets.get(team)
        if budget is None:
            if len(self._budgets) > MAX_EDIT_STATE:  # a full budget is as good as a new one
                now = time.monotonic()
                for old in [t for t, b in self._budgets.items() if b.full(now)]:
                    del self._budgets[old]
            budget = self._budgets[team] = EditBudget(CHAT_UPDATE_PER_MINUTE, CHAT_UPDATE_BURST)
        return budget

    def _note(self, method: str, team: str, exc: Exception) -> None:
        retry_after = retry_after_of(exc)
        if retry_after is not None:
            self._closed_until[(method, team)] = time.monotonic() + retry_after
            log.info("slack: %s rate limited in %s for %.1fs", method, team, retry_after)

    def _hold(
        self, team: str, ref: str, message: Outgoing, seq: int, retry: HeldEdit | None = None
    ) -> None:
        """Keep the newest edit of ``ref`` for the workspace's flusher to send (``retry``:
        one that failed, with its count of tries and when it may be tried again)."""
        held = self._held_edits.get(ref)
        if held is not None and held.seq > seq:
            return  # a newer edit of this message is held already
        since = held.since if held is not None else time.monotonic()
        self._held_edits[ref] = HeldEdit(
            team,
            message,
            seq,
            since,
            tries=retry.tries if retry is not None else 0,
            ready_at=retry.ready_at if retry is not None else 0.0,
        )
        flusher = self._flushers.get(team)
        if flusher is None or flusher.done():
            self._flushers[team] = asyncio.create_task(
                self._flush_edits(team), name=f"slack-edits-{team}"
            )

    @staticmethod
    def _retry_of(held: HeldEdit, exc: DeliveryError) -> HeldEdit | None:
        """``held`` to be tried again after its passing failure ``exc``, or None: a refusal
        for good, a progress refresh (the next one replaces it), or out of tries."""
        if exc.permanent or exc.retry_after or not settles(held.message):
            return None
        if held.tries >= EDIT_RETRIES:
            return None
        delay = EDIT_RETRY_S * 2.0**held.tries
        log.info("slack: edit failed (%s); trying it again in %.1fs", exc, delay)
        held.tries += 1
        held.ready_at = time.monotonic() + delay
        return held

    def _queued_ahead(self, team: str, ref: str, message: Outgoing) -> bool:
        """Does another message of the workspace have an edit held that goes first? Held
        edits that settle a message go before all progress; among equals, the older first."""
        final = settles(message)
        return any(
            held.team == team and other != ref and (settles(held.message) or not final)
            for other, held in self._held_edits.items()
        )

    async def _flush_edits(self, team: str) -> None:
        """Send the workspace's held edits as its budget and any Retry-After allow."""
        while True:
            queue = [(ref, held) for ref, held in self._held_edits.items() if held.team == team]
            if not queue:
                return
            now = time.monotonic()
            ready = [(ref, held) for ref, held in queue if held.ready_at <= now]
            if not ready:  # only edits waiting to be tried again after a failure
                await asyncio.sleep(min(held.ready_at for _, held in queue) - now)
                continue
            queue = ready
            wait = self._wait("chat.update", team)
            if wait > 0:
                await asyncio.sleep(wait)  # waiting out the budget or a 429, not synchronisation
                continue
            ref, held = min(queue, key=lambda item: item[1].rank)
            with self._editing(ref):
                del self._held_edits[ref]
                try:
                    await self._update(team, ref, held.message, held.seq)
                except DeliveryError as exc:
                    retry = held if exc.retry_after else self._retry_of(held, exc)
                    if retry is not None and ref not in self._held_edits:
                        self._held_edits[ref] = retry  # its place in the queue kept
                    elif retry is None:
                        log.info("slack: held edit dropped: %s", exc)

    async def close(self) -> None:
        """Let held edits go out for a while (summaries among them), then stop sending."""
        pending = [task for task in self._flushers.values() if not task.done()]
        if pending:
            await asyncio.wait(pending, timeout=CLOSE_FLUSH_S)
        flushers = list(self._flushers.values())
        self._flushers.clear()
        for task in flushers:
            task.cancel()
        for result in await asyncio.gather(*flushers, return_exceptions=True):
            if isinstance(result, Exception):
                log.warning("slack: sending held edits failed: %r", result)
        if self._session is not None:
            await self._session.close()
            self._session = None

    @staticmethod
    def _where(target: ReplyTarget) -> tuple[str, str | None]:
        channel = target.context.get("channel")
        if not isinstance(channel, str) or not channel:
            raise DeliveryError(f"no Slack channel for {target.thread_key}", permanent=True)
        thread_ts = target.context.get("thread_ts")
        return channel, thread_ts if isinstance(thread_ts, str) and thread_ts else None

    # -- messages -----------------------------------------------------------------------------

    async def send(self, target: ReplyTarget, message: Outgoing, *, reply_key: str) -> str:
        channel, thread_ts = self._where(target)
        if reply_key in self._unclear:  # raises when it cannot tell: no blind resend
            found = await self._lookup(team_of(target), channel, thread_ts, reply_key)
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
        self._gate("chat.postMessage", team)
        sent_at = time.time()
        try:
            response = await self.client.chat_postMessage(**kwargs)
        except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            self._note("chat.postMessage", team, exc)
            if _unclear(exc):
                self._unclear[reply_key] = (channel, thread_ts)
                self._in_flight_until[reply_key] = time.monotonic() + IN_FLIGHT_GRACE_S
                self._unclear_since.setdefault(reply_key, sent_at)
            raise slack_error(exc, "chat.postMessage") from exc
        self._unclear.pop(reply_key, None)
        self._in_flight_until.pop(reply_key, None)
        self._unclear_since.pop(reply_key, None)
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
        channel, thread_ts = self._where(target)
        self._unclear.pop(reply_key, None)
        return await self._lookup(team_of(target), channel, thread_ts, reply_key)

    def _matches(self, msg: dict[str, Any], channel: str, reply_key: str) -> str | None:
        """``msg``'s reference if it is the reply with ``reply_key``: by its metadata, or,
        for an upload in doubt (files carry no metadata), a file of the same name and size."""
        meta = msg.get("metadata") or {}
        payload = meta.get("event_payload") or {}
        if meta.get("event_type") == METADATA_EVENT and payload.get("reply_key") == reply_key:
            return f"{channel}:{msg['ts']}"
        upload = self._uploads_in_doubt.get(reply_key)
        if upload is not None and _slack_time(msg.get("ts")) >= upload[2] - CLOCK_SKEW_S:
            for file in msg.get("files") or []:
                if (file.get("name"), file.get("size")) == upload[:2] and file.get("id"):
                    return f"{channel}:{file['id']}"
        return None

    async def _lookup(
        self, team: str, channel: str, thread_ts: str | None, reply_key: str
    ) -> str | None:
        """Search the thread (or the channel's newest messages) for the reply (see
        :meth:`_matches`). None only when Slack said it is not there, and its unclear request
        can no longer be under way (else the search waits for that and is made again); a
        failed search raises :class:`DeliveryError` (the caller asks again rather than post
        twice). A search Slack refuses for good (the app has no history scope) can never
        tell: that is raised as a passing failure, and the reply is no longer held for a
        search, so the core's last try sends it (a second copy beats no answer at all)
        rather than the answer failing over a search it did not need."""
        found = await self._search_once(team, channel, thread_ts, reply_key)
        until = self._in_flight_until.get(reply_key, self._started + IN_FLIGHT_GRACE_S)
        wait = until - time.monotonic()
        if found is None and wait > 0:
            log.info(
                "slack: reply %s not found yet after an unclear request; Slack may still be "
                "carrying it out: looking again in %.1fs",
                reply_key,
                wait,
            )
            await asyncio.sleep(wait)  # waiting out Slack's work on it, not synchronisation
            found = await self._search_once(team, channel, thread_ts, reply_key)
        # found, or Slack says it is not there when it can no longer be on its way
        self._unclear.pop(reply_key, None)
        self._uploads_in_doubt.pop(reply_key, None)
        self._in_flight_until.pop(reply_key, None)
        self._unclear_since.pop(reply_key, None)
        return found

    async def _search_once(
        self, team: str, channel: str, thread_ts: str | None, reply_key: str
    ) -> str | None:
        """:meth:`_search`, with a refusal for good turned into "cannot tell" (passing), the
        reply no longer held for a search (see :meth:`_lookup`)."""
        try:
            return await self._search(team, channel, thread_ts, reply_key)
        except DeliveryError as exc:
            if not exc.permanent:
                raise
            self._unclear.pop(reply_key, None)
            log.warning(
                "slack: cannot tell whether reply %s landed: Slack refuses to search the "
                "conversation (%s); grant the app the history scopes, or it may be sent twice",
                reply_key,
                exc,
            )
            raise DeliveryError(f"cannot tell whether reply {reply_key} landed: {exc}") from exc

    async def _search(
        self, team: str, channel: str, thread_ts: str | None, reply_key: str
    ) -> str | None:
        """One search of the thread (or the channel's newest messages) for the reply: its
        reference, None when Slack says it is not there; :class:`DeliveryError` when the
        search failed or could not reach far enough back."""
        method = "conversations.replies" if thread_ts else "conversations.history"
        cursor: str | None = None
        since = self._unclear_since.get(reply_key)
        # only what was posted since the unclear request (a clock apart): a reply made
        # after a crash has no such time, and is looked for among all of them
        oldest = f"{since - CLOCK_SKEW_S:.6f}" if since is not None else None
        for _page in range(LOOKUP_PAGES):
            self._gate(method, team)
            try:
                if thread_ts:
                    response = await self.client.conversations_replies(
                        channel=channel,
                        ts=thread_ts,
                        include_all_metadata=True,
                        limit=200,
                        cursor=cursor,
                        oldest=oldest,
                    )
                else:  # newest first: a reply in doubt is among the latest
                    response = await self.client.conversations_history(
                        channel=channel,
                        include_all_metadata=True,
                        limit=200,
                        cursor=cursor,
                        oldest=oldest,
                    )
            except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
                self._note(method, team, exc)
                log.info("could not check whether reply %s landed: %s", reply_key, exc)
                raise slack_error(exc, method) from exc
            for msg in response.get("messages") or []:
                found = self._matches(msg, channel, reply_key)
                if found is not None:
                    return found
            cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
            if not response.get("has_more") or not cursor:
                return None  # Slack says it is not there
        where = "replies of the thread" if thread_ts else "messages of the conversation"
        raise DeliveryError(
            f"{method}: reply {reply_key} not found in the {LOOKUP_PAGES * 200} newest {where}; "
            "cannot tell whether it landed"
        )

    async def edit(self, target: ReplyTarget, ref: str, message: Outgoing) -> None:
        """Edit now if the workspace's budget allows and nothing of it waits that goes
        first; else hold the edit (the newest per message wins) and raise
        :class:`DeliveryError` with ``retry_after``: the workspace's flusher sends it."""
        team = team_of(target)
        with self._editing(ref):
            seq = self._edit_seq[ref] = self._edit_seq.get(ref, 0) + 1
            try:
                if self._queued_ahead(team, ref, message):
                    wait = max(self._wait("chat.update", team), 1.0 / self._budget(team).rate)
                    raise DeliveryError("chat.update: queued behind held edits", retry_after=wait)
                await self._update(team, ref, message, seq)
            except DeliveryError as exc:
                if exc.retry_after:
                    self._hold(team, ref, message, seq)
                    raise
                retry = self._retry_of(HeldEdit(team, message, seq, time.monotonic()), exc)
                if retry is None:
                    raise
                self._hold(team, ref, message, seq, retry)
                raise DeliveryError(
                    f"{exc}; tried again in {EDIT_RETRY_S:g}s", retry_after=EDIT_RETRY_S
                ) from exc

    async def settle(self, target: ReplyTarget, ref: str, message: Outgoing) -> None:
        """Edit a message a button press found stale (its run is over), unless an edit of
        it is held or under way: that one is newer (the run's summary, which drops the
        buttons itself) and is not replaced."""
        if ref in self._held_edits or ref in self._open_edits:
            log.debug("slack: stale press on %s left to the edit already coming", ref)
            return
        await self.edit(target, ref, message)

    async def _update(self, team: str, ref: str, message: Outgoing, seq: int) -> None:
        channel, ts = split_ref(ref)
        async with self._edit_lock(ref):
            if self._edit_seq.get(ref, 0) != seq:
                return  # a newer edit of this message was made meanwhile: this one is stale
            if self._landed.get(ref) == message:  # shown already: no call spent on it
                self._held_edits.pop(ref, None)
                return
            self._gate("chat.update", team)
            self._held_edits.pop(ref, None)  # this newer edit replaces a held one
            self._landed.pop(ref, None)  # a failed edit may have landed all the same
            try:
                await self.client.chat_update(
                    channel=channel,
                    ts=ts,
                    text=_mrkdwn(message.text or " "),
                    blocks=blocks_for(message),
                )
            except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
                self._note("chat.update", team, exc)
                raise slack_error(exc, "chat.update") from exc
            self._landed[ref] = message

    def _edit_lock(self, ref: str) -> asyncio.Lock:
        return self._edit_locks.setdefault(ref, asyncio.Lock())

    @contextlib.contextmanager
    def _editing(self, ref: str) -> Iterator[None]:
        """An edit of ``ref`` is open from its seq number to its end (sent, held, failed).
        The clean-out runs after it, not before: forgetting the seq of an edit still to be
        made would make :meth:`_update` take it for a stale one and drop it silently."""
        self._open_edits[ref] = self._open_edits.get(ref, 0) + 1
        try:
            yield
        finally:
            left = self._open_edits.pop(ref) - 1
            if left:
                self._open_edits[ref] = left
            self._forget_idle_edits()

    def _forget_idle_edits(self) -> None:
        """Past MAX_EDIT_STATE messages, forget those no edit is using: none open (which
        covers one waiting for the lock, even in the moment after a release when the lock
        reads unlocked) and none held for the flusher."""
        if len(self._edit_seq) <= MAX_EDIT_STATE:
            return
        busy = self._open_edits.keys() | self._held_edits.keys()
        idle = [ref for ref in self._edit_seq if ref not in busy]
        for ref in idle:
            del self._edit_seq[ref]
            self._edit_locks.pop(ref, None)
            self._landed.pop(ref, None)
        log.debug("slack: forgot the edit state of %d idle messages", len(idle))

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
        channel, thread_ts = self._where(target)
        kwargs: dict[str, Any] = {"channel": channel, "filename": name, "title": name}
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
        team = team_of(target)
        self._gate("files.completeUploadExternal", team)
        sent_at = time.time()
        try:
            response = await self.client.files_upload_v2(content=data, **kwargs)
        except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            self._note("files.completeUploadExternal", team, exc)
            if _unclear(exc):  # it may be in the thread: find_sent looks before a resend
                self._uploads_in_doubt[reply_key] = (name, len(data), sent_at)
                self._in_flight_until[reply_key] = time.monotonic() + IN_FLIGHT_GRACE_S
                self._unclear_since.setdefault(reply_key, sent_at)
            error = slack_error(exc, "files_upload_v2")
            if not error.permanent:
                raise error from exc
            log.warning("slack: upload of %s refused (%s); posting a note instead", name, error)
            note = Outgoing(ReplyKind.NOTICE, _refused_upload_text(name, len(data), exc))
            return await self.send(target, note, reply_key=reply_key)
        self._uploads_in_doubt.pop(reply_key, None)
        self._in_flight_until.pop(reply_key, None)
        self._unclear_since.pop(reply_key, None)
        files = response.get("files") or [{}]
        return f"{channel}:{files[0].get('id') or reply_key}"

    async def typing(self, target: ReplyTarget) -> None:
        """The assistant thread status where the app has it; silently nothing elsewhere."""
        try:
            channel, thread_ts = self._where(target)
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
        except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError):
            return

    # -- files --------------------------------------------------------------------------------

    def _may_send_token(self, url: str) -> bool:
        """Whether ``url`` is Slack's (https on 443, a slack.com host) or the configured API's
        (``slack.api_url``: the same scheme, host and port): the bot token goes nowhere else,
        not to another port or a plain-http URL on the same host."""
        origin = _origin(url)
        if origin is None:
            return False
        if origin == self._api_origin:
            return True
        scheme, host, port = origin
        return (scheme, port) == ("https", 443) and (
            host == "slack.com" or host.endswith(".slack.com")
        )

    async def resolve(self, attachment: Attachment) -> Attachment:
        """A file sent as ``check_file_info`` (its id only) completed from files.info."""
        if not attachment.url and attachment.platform_id:
            return await self._file_info(attachment)
        return attachment

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        limit = min(max_bytes, self.max_file_bytes)
        attachment = await self.resolve(attachment)
        if attachment.size is not None and attachment.size > limit:
            raise FileTooLarge(attachment.name, limit, attachment.size)
        url = attachment.url
        if not url:
            raise DeliveryError(f"the file {attachment.name} has no download URL", permanent=True)
        if not self._may_send_token(url):
            raise DeliveryError(
                f"refusing to send the bot token to {urlsplit(url).hostname!r} for "
                f"{attachment.name}: not a Slack host",
                permanent=True,
            )
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            async with self._session.get(url, headers=headers, allow_redirects=True) as resp:
                if resp.status != 200:
                    raise DeliveryError(
                        f"downloading {attachment.name}: HTTP {resp.status}",
                        permanent=400 <= resp.status < 500 and resp.status != 429,
                    )
                if resp.content_type == "text/html":
                    raise DeliveryError(
                        f"downloading {attachment.name}: Slack answered with a web page (a "
                        "login page), not the file: the bot token lacks files:read or the file "
                        "is not shared with the bot",
                        permanent=True,
                    )
                chunks: list[bytes] = []
                total = 0
                async for chunk in resp.content.iter_chunked(DOWNLOAD_CHUNK):
                    total += len(chunk)
                    if total > limit:
                        raise FileTooLarge(attachment.name, limit)
                    chunks.append(chunk)
                return b"".join(chunks)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DeliveryError(f"downloading {attachment.name}: {exc}") from exc

    async def _file_info(self, attachment: Attachment) -> Attachment:
        """``attachment`` (a file Slack sent with only its id) with its name, size, type and
        download URL from files.info. Its failure names the file, so the person is told
        which one did not reach the agent; one Slack will not serve is permanent."""
        file_id = str(attachment.platform_id)
        try:
            response = await self.client.files_info(file=file_id)
        except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            error = slack_error(exc, "files.info")
            raise DeliveryError(
                f"the file {file_id} shared with the message could not be fetched ({error}); "
                "send it again, or check that the app has files:read",
                permanent=error.permanent,
                retry_after=error.retry_after,
            ) from exc
        info = response.get("file")
        info = info if isinstance(info, dict) else {}
        url = info.get("url_private_download") or info.get("url_private")
        name = str(info.get("name") or info.get("title") or file_id)
        if not url:  # deleted, hidden by the plan's limit, still processing, or external
            raise DeliveryError(
                f"the file {name} ({file_id}) shared with the message has no download link on "
                f"Slack (mode {info.get('mode') or 'unknown'}); send it again as an upload",
                permanent=True,
            )
        size = info.get("size")
        return Attachment(
            name=name,
            url=str(url),
            size=size if isinstance(size, int) else None,
            media_type=info.get("mimetype") or attachment.media_type,
            platform_id=file_id,
        )


DEFAULT_PORTS = {"https": 443, "http": 80}


def _origin(url: str) -> tuple[str, str, int] | None:
    """A URL's scheme, host and port (its scheme's default when it names none), or None
    when it has no host or an invalid port."""
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    try:
        port = parts.port or DEFAULT_PORTS.get(scheme)
    except ValueError:
        return None
    if not host or port is None:
        return None
    return scheme, host, port
