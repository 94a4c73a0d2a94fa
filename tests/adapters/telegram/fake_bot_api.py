"""A fake Telegram Bot API (aiohttp on 127.0.0.1, port 0) the real PTB client talks to.

Serves ``POST /bot<TOKEN>/<method>`` and ``GET /file/bot<TOKEN>/<path>``, records every
call (with its HTTP status) and can be told to answer a call with a 429 ``retry_after`` or
a 400 "can't parse entities". ``getUpdates`` releases queued updates (long polling, with
a bounded wait) and, like Telegram, forgets an update once a call's ``offset`` passes it.
With ``hold_acks`` set, a ``getUpdates`` that would confirm a pending update is held
instead (recorded in ``held``) and, when released, answers ``[]`` without confirming
anything: the gateway's acknowledgement never arrived, as if it died between fetching an
update and acknowledging it. ``fail`` makes a method misbehave N times like a network or an
overloaded Telegram does (429 storms, 5xx, a dropped connection, a stall past the client's
timeout), before doing its work or after it (``commit=True``: the message is in the chat,
the caller never hears so; recorded with status 200 and ``answered=False``). ``gate`` holds
a method's calls until a call of another method was answered (bounded), and counts the
calls that came before that answer: what a client did not wait for.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

JSON_FIELDS = {
    "entities",
    "caption_entities",
    "reply_markup",
    "reply_parameters",
    "link_preview_options",
    "allowed_updates",
    "commands",
    "chat_id",
    "message_id",
    "message_thread_id",
    "offset",
    "timeout",
    "limit",
    "show_alert",
    "drop_pending_updates",
}


HELD = 599  # the status recorded for a getUpdates that was held and never "arrived"


class BotApiError(Exception):
    """A method's error answer (``{"ok": false, ...}`` with this status)."""

    def __init__(self, status: int, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.description = description


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    status: int
    at: float = field(default_factory=time.monotonic)
    answered: bool = True  # False: the work was done but the caller never got the answer
    result: Any = None  # what the method returned (a sent message: its ``message_id``)


@dataclass
class Failure:
    method: str
    status: int
    body: dict[str, Any]
    when: Callable[[dict[str, Any]], bool]


@dataclass
class Gate:
    method: str
    after: str
    when: Callable[[dict[str, Any]], bool]
    timeout_s: float
    early: int = 0  # calls that came before a call of ``after`` was answered


@dataclass
class Fault:
    method: str
    kind: str  # "429" | "5xx" | "drop" | "stall"
    times: int
    retry_after: int
    commit: bool
    stall_s: float
    when: Callable[[dict[str, Any]], bool]


class FakeBotApi:
    def __init__(
        self, token: str, *, bot_id: int = 999999999, username: str = "jazz_example_bot"
    ) -> None:
        self.token = token
        self.bot_id = bot_id
        self.username = username
        self.calls: list[Call] = []
        self.failures: list[Failure] = []
        self.gates: list[Gate] = []
        self._answered: dict[str, asyncio.Event] = {}  # method -> a call of it was answered
        self.faults: list[Fault] = []
        self.updates: list[dict[str, Any]] = []
        self.files: dict[str, tuple[str, bytes]] = {}  # file_id -> (file_path, data)
        self.downloads: list[str] = []  # file paths served
        self.hold_acks = False
        self.webhook_url = ""  # what setWebhook registered (getWebhookInfo reports it)
        self.held: list[dict[str, Any]] = []  # getUpdates calls held (acks never received)
        self._release = asyncio.Event()
        self._new_updates = asyncio.Event()
        self._ids = itertools.count(5000)
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- control ------------------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/bot"

    def fail_next(
        self,
        method: str,
        kind: str,
        when: Callable[[dict[str, Any]], bool] = lambda _p: True,
        *,
        retry_after: int = 1,
    ) -> None:
        if kind == "429":
            body = {
                "ok": False,
                "error_code": 429,
                "description": f"Too Many Requests: retry after {retry_after}",
                "parameters": {"retry_after": retry_after},
            }
            self.failures.append(Failure(method, 429, body, when))
        elif kind == "entities":
            body = {
                "ok": False,
                "error_code": 400,
                "description": "Bad Request: can't parse entities: unsupported start tag",
            }
            self.failures.append(Failure(method, 400, body, when))
        elif kind == "button_data":  # permanent, for this message only (its buttons)
            body = {
                "ok": False,
                "error_code": 400,
                "description": "Bad Request: BUTTON_DATA_INVALID",
            }
            self.failures.append(Failure(method, 400, body, when))
        elif kind == "forbidden":  # permanent, for the whole chat: the bot was blocked
            body = {
                "ok": False,
                "error_code": 403,
                "description": "Forbidden: bot was blocked by the user",
            }
            self.failures.append(Failure(method, 403, body, when))
        else:
            raise ValueError(kind)

    def fail(
        self,
        method: str,
        kind: str,
        *,
        times: int = 1,
        retry_after: int = 1,
        commit: bool = False,
        stall_s: float = 0.0,
        when: Callable[[dict[str, Any]], bool] = lambda _p: True,
    ) -> None:
        """Misbehave on the next ``times`` calls of ``method`` that ``when`` matches."""
        if kind not in ("429", "5xx", "drop", "stall"):
            raise ValueError(kind)
        self.faults.append(Fault(method, kind, times, retry_after, commit, stall_s, when))

    def gate(
        self,
        method: str,
        *,
        after: str,
        timeout_s: float = 10.0,
        when: Callable[[dict[str, Any]], bool] = lambda _p: True,
    ) -> Gate:
        """Hold each call of ``method`` that ``when`` matches until a call of ``after`` has
        been answered, at most ``timeout_s``; one that had to wait is counted as early."""
        gate = Gate(method, after, when, timeout_s)
        self.gates.append(gate)
        return gate

    def _answered_event(self, method: str) -> asyncio.Event:
        return self._answered.setdefault(method, asyncio.Event())

    async def _pass_gates(self, method: str, params: dict[str, Any]) -> None:
        for gate in self.gates:
            answered = self._answered_event(gate.after)
            if gate.method == method and gate.when(params) and not answered.is_set():
                gate.early += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(answered.wait(), gate.timeout_s)

    def _fault(self, method: str, params: dict[str, Any]) -> Fault | None:
        for fault in self.faults:
            if fault.method == method and fault.times > 0 and fault.when(params):
                fault.times -= 1
                return fault
        return None

    async def _misbehave(
        self, request: web.Request, method: str, params: dict[str, Any], fault: Fault
    ) -> web.Response:
        if not fault.commit:
            status = {"429": 429, "5xx": 502}.get(fault.kind, 0)
            self.calls.append(Call(method, params, status))
        if fault.kind == "429":
            body = {
                "ok": False,
                "error_code": 429,
                "description": f"Too Many Requests: retry after {fault.retry_after}",
                "parameters": {"retry_after": fault.retry_after},
            }
            return web.json_response(body, status=429)
        if fault.kind == "5xx":
            body = {"ok": False, "error_code": 502, "description": "Bad Gateway"}
            return web.json_response(body, status=502)
        if fault.kind == "stall":
            await asyncio.sleep(fault.stall_s)  # past the client's timeout: it gave up
        if request.transport is not None:
            request.transport.abort()  # the connection drops before any answer
        return web.Response()

    def queue_update(self, update: dict[str, Any]) -> None:
        self.updates.append(update)
        self._new_updates.set()

    def add_file(self, file_id: str, file_path: str, data: bytes) -> None:
        self.files[file_id] = (file_path, data)

    def hold(self) -> None:
        """From now on, hold the getUpdates calls that would confirm an update."""
        self.hold_acks = True
        self._release.clear()

    def release_acks(self) -> None:
        """Answer the held getUpdates calls with ``[]``, confirming nothing."""
        self.hold_acks = False
        self._release.set()

    def called(self, method: str, ok: bool = True) -> list[Call]:
        return [c for c in self.calls if c.method == method and (c.status == 200) == ok]

    # -- server -------------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{bot}/{method}", self._method)
        app.router.add_get("/file/{bot}/{path:.*}", self._file)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        self.release_acks()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _params(self, request: web.Request) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if request.content_type == "application/json":
            body = await request.json()
            return dict(body) if isinstance(body, dict) else {}
        form = await request.post()
        for key, value in form.items():
            if isinstance(value, web.FileField):
                params[key] = {"filename": value.filename, "size": len(value.file.read())}
            elif key in JSON_FIELDS:
                try:
                    params[key] = json.loads(value)
                except ValueError:
                    params[key] = value
            else:
                params[key] = value
        return params

    async def _method(self, request: web.Request) -> web.Response:
        if request.match_info["bot"] != f"bot{self.token}":
            return web.json_response(
                {"ok": False, "error_code": 401, "description": "Unauthorized"}, status=401
            )
        method = request.match_info["method"]
        try:
            return await self._answer(request, method)
        finally:
            self._answered_event(method).set()

    async def _answer(self, request: web.Request, method: str) -> web.Response:
        params = await self._params(request)
        await self._pass_gates(method, params)
        for failure in self.failures:
            if failure.method == method and failure.when(params):
                self.failures.remove(failure)
                self.calls.append(Call(method, params, failure.status))
                return web.json_response(failure.body, status=failure.status)
        fault = self._fault(method, params)
        if fault is not None and not fault.commit:
            return await self._misbehave(request, method, params, fault)
        if method == "getUpdates":
            result: Any = await self._get_updates(params)
            if result is None:  # held: as if the request never reached Telegram
                self.calls.append(Call(method, params, HELD))
                return web.json_response({"ok": True, "result": []})
        else:
            handler = getattr(self, f"_m_{method}", None)
            if handler is None:
                self.calls.append(Call(method, params, 404))
                return web.json_response(
                    {"ok": False, "error_code": 404, "description": "Not Found"}, status=404
                )
            try:
                result = handler(params)
            except BotApiError as exc:
                self.calls.append(Call(method, params, exc.status))
                body = {"ok": False, "error_code": exc.status, "description": exc.description}
                return web.json_response(body, status=exc.status)
        if fault is not None:  # the work is done; the caller never hears of it
            self.calls.append(Call(method, params, 200, answered=False, result=result))
            return await self._misbehave(request, method, params, fault)
        self.calls.append(Call(method, params, 200, result=result))
        return web.json_response({"ok": True, "result": result})

    async def _file(self, request: web.Request) -> web.Response:
        if request.match_info["bot"] != f"bot{self.token}":
            return web.Response(status=401)
        path = request.match_info["path"]
        for file_path, data in self.files.values():
            if file_path == path:
                self.downloads.append(path)
                return web.Response(body=data)
        return web.Response(status=404)

    async def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]] | None:
        offset = int(params.get("offset") or 0)
        if self.hold_acks and any(u["update_id"] < offset for u in self.updates):
            self.held.append(params)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._release.wait(), timeout=60)
            return None  # the acknowledgement never arrived: nothing is confirmed
        self.updates = [u for u in self.updates if u["update_id"] >= offset]
        if not self.updates:
            self._new_updates.clear()
            wait = min(float(params.get("timeout") or 0), 1.0)
            try:
                await asyncio.wait_for(self._new_updates.wait(), timeout=wait)
            except TimeoutError:
                return []
        return [u for u in self.updates if u["update_id"] >= offset]

    # -- methods ------------------------------------------------------------------------------

    def _message(self, params: dict[str, Any], **extra: Any) -> dict[str, Any]:
        chat_id = int(params["chat_id"])
        msg: dict[str, Any] = {
            "message_id": next(self._ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
            "from": {"id": self.bot_id, "is_bot": True, "first_name": "Jazz"},
        }
        if params.get("message_thread_id") is not None:
            msg["message_thread_id"] = int(params["message_thread_id"])
        msg.update(extra)
        return msg

    def _m_getMe(self, _params: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": "Jazz",
            "username": self.username,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    def _m_setWebhook(self, params: dict[str, Any]) -> bool:
        self.webhook_url = str(params.get("url") or "")
        return True

    def _m_deleteWebhook(self, _params: dict[str, Any]) -> bool:
        self.webhook_url = ""
        return True

    def _m_getWebhookInfo(self, _params: dict[str, Any]) -> dict[str, Any]:
        return {"url": self.webhook_url, "has_custom_certificate": False, "pending_update_count": 0}

    def _m_setMyCommands(self, _params: dict[str, Any]) -> bool:
        return True

    def _m_getMyCommands(self, _params: dict[str, Any]) -> list[dict[str, Any]]:
        return []

    def _m_sendMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._message(params, text=params.get("text", ""))

    def _m_editMessageText(self, params: dict[str, Any]) -> dict[str, Any]:
        msg = self._message(params, text=params.get("text", ""))
        msg["message_id"] = int(params["message_id"])
        return msg

    def _m_editMessageReplyMarkup(self, params: dict[str, Any]) -> dict[str, Any]:
        msg = self._message(params, text="")
        msg["message_id"] = int(params["message_id"])
        return msg

    def _m_answerCallbackQuery(self, _params: dict[str, Any]) -> bool:
        return True

    def _m_sendChatAction(self, _params: dict[str, Any]) -> bool:
        return True

    def _m_sendDocument(self, params: dict[str, Any]) -> dict[str, Any]:
        doc = {"file_id": f"doc{next(self._ids)}", "file_unique_id": "u"}
        return self._message(params, document=doc)

    def _m_sendPhoto(self, params: dict[str, Any]) -> dict[str, Any]:
        photo = [
            {"file_id": f"ph{next(self._ids)}", "file_unique_id": "u", "width": 8, "height": 8}
        ]
        return self._message(params, photo=photo)

    def _m_getFile(self, params: dict[str, Any]) -> dict[str, Any]:
        file_id = str(params["file_id"])
        if file_id not in self.files:
            raise BotApiError(400, "Bad Request: invalid file_id")
        path, data = self.files[file_id]
        return {
            "file_id": file_id,
            "file_unique_id": "u" + file_id[-6:],
            "file_size": len(data),
            "file_path": path,
        }
