"""What every route of the web chat shares: the one JSON shape of its refusals, and the
thread name a route is for (checked once, here, for the API and the event streams alike).
"""

from __future__ import annotations

import re

from aiohttp import web

THREAD_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
BAD_THREAD = "thread must be 1-128 characters of A-Z a-z 0-9 . _ -"


def bad(message: str, status: int = 400) -> web.Response:
    return web.json_response({"error": message}, status=status)


def thread_of(request: web.Request) -> str | None:
    """The route's thread name, or None when it is not one (answer :data:`BAD_THREAD`)."""
    thread = request.match_info["thread"]
    # fullmatch: "$" would also take a name ending in a newline (a 500 further on)
    return thread if THREAD_RE.fullmatch(thread) else None
