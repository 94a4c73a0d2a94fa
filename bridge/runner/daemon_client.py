"""Talking to the Jazz daemon: one HTTP request with its token, read whole and bounded.

Every request carries the bearer token (never logged, never followed to a redirect) and
never an ``Origin`` header (the daemon refuses those); a reply is read up to
:data:`MAX_BODY` and parsed as JSON where it is JSON. :func:`poll_run` reads one run's
object through a daemon that stops answering for a while (with backoff), and says when it
gives up. Kept apart from the backend (:mod:`.daemon`) and its handles
(:mod:`.daemon_handle`), which decide what to ask and what a reply means, so the
credentials and the HTTP statuses are handled in one place.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp

from ..config import RunnerSettings
from ..errors import RunnerError

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=30)
MAX_BODY = 64 * 1024 * 1024  # a poll answer larger than this is not one
MAX_BACKOFF_S = 5.0  # the longest pause between tries of a daemon that fails

NETWORK_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)


class DaemonProtocolError(Exception):
    """The daemon answered with something that is not a usable HTTP/JSON reply."""


class DaemonClient:
    """The daemon at ``settings.daemon_url``, with ``settings``' tokens."""

    def __init__(self, settings: RunnerSettings) -> None:
        self.settings = settings
        self.url = settings.daemon_url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    def _secrets(self) -> list[str]:
        values = [self.settings.daemon_token, self.settings.daemon_operator_token]
        return [v.get_secret_value() for v in values if v is not None and v.get_secret_value()]

    def redact(self, text: str) -> str:
        """``text`` with any configured token replaced (daemon messages may echo headers)."""
        for value in self._secrets():
            text = text.replace(value, "***")
        return text

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # No default headers: every request builds its own, and none ever has Origin.
            self._session = aiohttp.ClientSession(timeout=REQUEST_TIMEOUT, trust_env=False)
        return self._session

    async def request(
        self, method: str, path: str, *, body: dict[str, Any] | None = None, operator: bool = False
    ) -> tuple[int, Any]:
        """One request to the daemon: ``(status, parsed JSON or None)``.

        Raises one of ``NETWORK_ERRORS`` or :class:`DaemonProtocolError` when no usable
        reply came.
        """
        token = self.settings.daemon_token
        if token is None:
            raise RunnerError("runner.daemon_token is not set: the Jazz daemon needs its token")
        headers = {
            "Authorization": f"Bearer {token.get_secret_value()}",
            "Accept": "application/json",
        }
        op = self.settings.daemon_operator_token
        if operator and op is not None:
            headers["X-Jazz-Operator-Token"] = op.get_secret_value()
        async with self._client().request(
            method,
            self.url + path,
            json=body,  # sets Content-Type: application/json when there is a body
            headers=headers,
            allow_redirects=False,  # never carry the token anywhere else
        ) as resp:
            raw = bytearray()
            async for chunk in resp.content.iter_chunked(256 * 1024):
                raw += chunk
                if len(raw) > MAX_BODY:
                    raise DaemonProtocolError(f"reply to {method} {path} is over {MAX_BODY} bytes")
            data: Any = None
            if raw:
                try:
                    data = json.loads(raw)
                except ValueError:
                    data = None
            return resp.status, data

    def detail(self, data: Any) -> str:
        """A short, redacted reason from a daemon error body, for messages."""
        message: Any = None
        if isinstance(data, dict):
            message = data.get("error") or data.get("message")
            if isinstance(message, dict):
                message = message.get("message")
        if not isinstance(message, str) or not message.strip():
            return ""
        return ": " + self.redact(message.strip())[:200]

    async def send_cancel(self, path: str) -> int:
        """Ask the daemon to cancel the run at ``path`` (``DELETE`` where it has no
        ``/cancel``); its status. Raises as :meth:`request` does."""
        status, _ = await self.request("POST", f"{path}/cancel", body={})
        if status in (404, 405):
            status, _ = await self.request("DELETE", path)
        return status

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def describe(exc: BaseException) -> str:
    """An exception as a message names it: its type, and its text where it has one."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def run_path(run_id: str) -> str:
    """The path of the daemon's run ``run_id``."""
    return f"/runs/{quote(run_id, safe='')}"


@dataclass(frozen=True)
class PollFailure:
    """Why a run's object could not be had: its failure ``code`` and a message."""

    code: str  # run_lost (the daemon no longer knows it), daemon_refused, _error, _unreachable
    error: str


async def poll_run(
    client: DaemonClient,
    path: str,
    run_id: str,
    *,
    poll_s: float,
    unreachable_s: float,
    stop_deadline: Callable[[], float | None],
) -> dict[str, Any] | PollFailure | None:
    """The run object at ``path``; else why not, once that is final; ``None`` once the
    ``stop_deadline`` (read at every try) has passed first.

    A network failure, a 5xx, a 429 or a reply that is not a run object is tried again,
    with a doubling pause, until ``unreachable_s`` after the first.
    """
    url = client.url
    first_failure: float | None = None
    backoff = min(poll_s, 0.25)
    while True:
        try:
            status, data = await client.request("GET", path)
        except NETWORK_ERRORS as exc:
            problem = describe(exc)
        except DaemonProtocolError as exc:
            problem = str(exc)
        else:
            if status == 200 and isinstance(data, dict):
                if first_failure is not None:
                    log.info("daemon run %s: the daemon at %s answers again", run_id, url)
                return data
            if status == 404:
                return PollFailure(
                    "run_lost",
                    f"the Jazz daemon at {url} no longer knows run {run_id} "
                    "(it may have restarted)",
                )
            if status in (401, 403):
                return PollFailure(
                    "daemon_refused",
                    f"the Jazz daemon at {url} refused to report run {run_id} "
                    f"(HTTP {status}){client.detail(data)}; check runner.daemon_token",
                )
            if status == 200:
                problem = "a reply that is not a run object"
            elif status >= 500 or status == 429:
                problem = f"HTTP {status}{client.detail(data)}"
            else:
                return PollFailure(
                    "daemon_error",
                    f"the Jazz daemon at {url} answered HTTP {status} for run "
                    f"{run_id}{client.detail(data)}",
                )
        now = time.monotonic()
        if first_failure is None:
            first_failure = now
            log.warning("daemon run %s: cannot poll %s (%s); retrying", run_id, url, problem)
        if now - first_failure >= unreachable_s:
            return PollFailure(
                "daemon_unreachable",
                f"lost contact with the Jazz daemon at {url} for {unreachable_s:g}s ({problem})",
            )
        deadline = stop_deadline()
        if deadline is not None and now >= deadline:
            return None
        left = unreachable_s - (now - first_failure)
        await asyncio.sleep(max(min(backoff, left), 0.0))
        backoff = min(backoff * 2, MAX_BACKOFF_S)
