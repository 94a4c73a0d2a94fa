"""What a Slack message says, read as the prompt it becomes: pure functions of the event.

Slack spreads one message over several fields: ``text`` (escaped, with the bot's mention
in it), rich-text ``blocks`` (the words when ``text`` came empty), ``files`` (some only by
id, some gone), forwarded messages as ``attachments``. This module turns them into the
prompt and the :class:`~bridge.model.Attachment` list, knowing nothing of bolt, aiohttp or
the gateway, so that :mod:`.intake` stays about routing (which conversation, who may).
"""

from __future__ import annotations

import re
from typing import Any

from bridge.model import Attachment

CHECK_FILE_INFO = "check_file_info"  # a file sent with only its id: files.info has the rest
THREAD_COMMANDS = re.compile(r"^\s*!(new|status|stop|help)(?=\s|$)", re.IGNORECASE)
MAX_FORWARDS = 10  # forwarded/shared messages quoted into one prompt


def prompt_text(raw: str, bot_user_id: str | None) -> str:
    """The prompt: the bot's mention removed, Slack's three escapes undone."""
    if bot_user_id:
        raw = re.sub(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>", "", raw)
    text = unescape(raw).strip()
    match = THREAD_COMMANDS.match(text)
    if match:  # Slack keeps slash commands out of threads: "!new" means the core's "/new"
        text = "/" + text.lstrip()[1:]
    return text


def unescape(raw: str) -> str:
    return raw.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def escape(plain: str) -> str:
    return plain.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def blocks_text(blocks: Any) -> str:
    """A message's rich-text blocks as Slack's escaped ``text`` would read: the words when
    ``text`` came empty (the blocks are what the person wrote), mentions as ``<@U…>``."""
    lines = []
    for block in blocks if isinstance(blocks, list) else []:
        if isinstance(block, dict) and block.get("type") == "rich_text":
            lines += [_rich_line(part) for part in _list(block.get("elements"))]
    return "\n".join(line for line in lines if line)


def _rich_line(part: Any) -> str:
    """One section, list, quote or code block of a rich-text block."""
    if not isinstance(part, dict):
        return ""
    if part.get("type") == "rich_text_list":  # its items are sections
        return "\n".join(_rich_line(item) for item in _list(part.get("elements")))
    return "".join(_rich_element(e) for e in _list(part.get("elements")))


def _rich_element(element: Any) -> str:
    e = obj(element)
    kind, value = e.get("type"), e.get("text")
    if kind == "text" and isinstance(value, str):
        return escape(value)
    if kind == "link" and isinstance(e.get("url"), str):
        return f"<{e['url']}|{escape(value)}>" if isinstance(value, str) else f"<{e['url']}>"
    if kind in ("user", "channel", "usergroup"):
        ref = e.get("user_id") or e.get("channel_id") or e.get("usergroup_id")
        sigil = {"user": "@", "channel": "#", "usergroup": "!subteam^"}[str(kind)]
        return f"<{sigil}{ref}>" if isinstance(ref, str) else ""
    if kind == "emoji" and isinstance(e.get("name"), str):
        return f":{e['name']}:"
    if kind == "broadcast" and isinstance(e.get("range"), str):
        return f"<!{e['range']}>"
    return ""


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def attachments(event: dict[str, Any]) -> tuple[Attachment, ...]:
    """The message's files. One Slack sends as ``"file_access": "check_file_info"`` (Slack
    Connect, some DMs) has only its id: it is kept with no URL, and the surface asks
    files.info for the rest when the run downloads it (not here: the intake stays one
    store write before the ack)."""
    found = []
    files = event.get("files")  # a forwarded message's are not checked by the guard
    for f in files if isinstance(files, list) else []:
        if not isinstance(f, dict):
            continue
        url = f.get("url_private_download") or f.get("url_private")
        file_id = f.get("id") if isinstance(f.get("id"), str) else None
        if not url and f.get("file_access") == CHECK_FILE_INFO and file_id:
            found.append(Attachment(name=file_id, platform_id=file_id))
            continue
        if not isinstance(url, str) or not url:  # tombstoned, hidden, or still processing
            continue
        size, media_type = f.get("size"), f.get("mimetype")
        found.append(
            Attachment(
                name=str(f.get("name") or f.get("title") or file_id or "file"),
                url=url,
                size=int(size) if isinstance(size, int) else None,
                media_type=media_type if isinstance(media_type, str) and media_type else None,
                platform_id=file_id,
            )
        )
    return tuple(found)


def unavailable(event: dict[str, Any]) -> list[str]:
    """The names of the message's files Slack gave no way to fetch: deleted (a tombstone),
    hidden by the workspace's storage limit, still processing."""
    names = []
    files = event.get("files")
    for f in files if isinstance(files, list) else []:
        if not isinstance(f, dict) or f.get("url_private_download") or f.get("url_private"):
            continue
        if f.get("file_access") == CHECK_FILE_INFO and isinstance(f.get("id"), str):
            continue  # fetched through files.info at the run
        name = f.get("name") or f.get("title")
        names.append(str(name) if isinstance(name, str) and name else "a file")
    return names


def unavailable_note(names: list[str]) -> str:
    """Told to the agent, so that it can say so instead of answering as if there were none."""
    listed = ", ".join(f"`{n}`" if n != "a file" else n for n in names[:MAX_FORWARDS])
    return (
        f"(The person also shared {listed}, which Slack did not make available to the "
        "gateway: deleted, hidden by the workspace's storage limit, or still processing.)"
    )


def shared(event: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages forwarded (or shared) in ``event``: Slack carries each as an attachment
    marked ``is_share`` (or ``is_msg_unfurl``, a pasted message link), not in ``text``."""
    found = []
    for item in event.get("attachments") or []:
        if isinstance(item, dict) and (item.get("is_share") or item.get("is_msg_unfurl")):
            found.append(item)
    return found[:MAX_FORWARDS]


def _forwarded(shared: list[dict[str, Any]]) -> str:
    """The forwarded messages as quotes for the prompt, each under who wrote it and where."""
    parts = []
    for item in shared:
        body = unescape(str(item.get("text") or item.get("fallback") or "")).strip()
        author = item.get("author_name") or item.get("author_subname")
        if not author and isinstance(item.get("author_id"), str):
            author = f"<@{item['author_id']}>"
        link = item.get("from_url") or item.get("original_url")
        head = "Forwarded message" + (f" from {author}" if author else "")
        head += f" ({link}):" if isinstance(link, str) and link else ":"
        quoted = "\n".join(f"> {line}" for line in body.splitlines()) or "> (no text)"
        parts.append(f"{head}\n{quoted}")
    return "\n\n".join(parts)


def with_forwarded(text: str, shared: list[dict[str, Any]]) -> str:
    """The person's own words, then what they forwarded (the request when they wrote none)."""
    quoted = _forwarded(shared)
    if not quoted:
        return text
    return f"{text}\n\n{quoted}" if text else quoted


def obj(value: Any) -> dict[str, Any]:
    """``value`` when it is an object, else an empty one (ids may come as bare strings)."""
    return value if isinstance(value, dict) else {}
