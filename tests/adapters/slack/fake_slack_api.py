"""A fake Slack Web API (aiohttp on 127.0.0.1, port 0) the real ``AsyncWebClient`` talks to.

Serves ``POST|GET /api/<method>`` (the client's ``base_url`` is :attr:`FakeSlackApi.api_url`),
the upload URLs ``files.getUploadURLExternal`` hands out, private file downloads
(``url_private_download``: the bot token as a bearer, else Slack's HTML login page, as Slack
itself answers), and a Socket Mode websocket (``apps.connections.open`` points at it).
Every call is recorded with its arguments (query, form and JSON merged), its HTTP status and
any uploaded bytes. Posted messages are kept per channel with their metadata, so
``conversations.replies``/``history`` with ``include_all_metadata`` can find them. A method
can be told to answer 429 with Retry-After, 5xx, drop the connection, or stall past the
client's timeout (``stall_s``, then drop it), N times, either before or after doing its work
(``commit=True``: the message is recorded, the caller can't know).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

JSON_STRING_ARGS = {"files", "blocks", "metadata", "attachments"}
LOGIN_PAGE = b"<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in</body></html>"


@dataclass
class Call:
    method: str
    args: dict[str, Any]
    status: int
    at: float = field(default_factory=time.monotonic)
    data: bytes | None = None  # an upload's bytes
    peer: Any = None  # the client's (host, port): one per connection it opened


@dataclass
class Failure:
    method: str
    kind: str  # "429" | "5xx" | "drop" | "stall" | "slow" (answers, after stall_s)
    times: int
    retry_after: int
    commit: bool
    when: Callable[[dict[str, Any]], bool]
    stall_s: float = 0.0


class FakeSlackApi:
    def __init__(
        self,
        bot_token: str,
        *,
        app_token: str = "",
        team: str = "T0TEAM0001",
        bot_user_id: str = "U0BOT00001",
        bot_id: str = "B0BOT00001",
    ) -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.team = team
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.calls: list[Call] = []
        self.failures: list[Failure] = []
        self.messages: dict[str, list[dict[str, Any]]] = {}  # channel -> messages
        self.posted_at: dict[str, float] = {}  # message ts -> when it was posted (monotonic)
        self.uploads: dict[str, dict[str, Any]] = {}  # file id -> filename, length, data
        self.files: dict[str, tuple[str, bytes, bool]] = {}  # id -> (name, data, login page)
        self.downloads: list[tuple[str, str | None]] = []  # (file id, Authorization header)
        self.socket_acks: list[dict[str, Any]] = []
        self._sockets: list[web.WebSocketResponse] = []
        self._socket_open = asyncio.Event()
        # message ts are the time they were posted, as Slack's are (microseconds, unique)
        self._ts = itertools.count(int(time.time() * 1_000_000), 100)
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- control ------------------------------------------------------------------------------

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        return f"{self.base}/api/"

    def fail(
        self,
        method: str,
        kind: str,
        *,
        times: int = 1,
        retry_after: int = 1,
        commit: bool = False,
        when: Callable[[dict[str, Any]], bool] = lambda _a: True,
        stall_s: float = 0.0,
    ) -> None:
        if kind not in ("429", "5xx", "internal_error", "drop", "stall", "slow"):
            raise ValueError(kind)
        self.failures.append(Failure(method, kind, times, retry_after, commit, when, stall_s))

    def add_file(self, name: str, data: bytes, *, login_page: bool = False) -> dict[str, Any]:
        """A file as it appears in a message event's ``files`` list."""
        file_id = f"F0FILE{next(self._ids):04d}"
        self.files[file_id] = (name, data, login_page)
        url = f"{self.base}/files-pri/{self.team}-{file_id}/download/{name}"
        return {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": "application/octet-stream",
            "size": len(data),
            "url_private": url,
            "url_private_download": url,
        }

    def called(self, method: str, ok: bool = True) -> list[Call]:
        return [c for c in self.calls if c.method == method and (c.status == 200) == ok]

    def thread(self, channel: str, thread_ts: str) -> list[dict[str, Any]]:
        """Messages posted in a thread (replies only, not the parent)."""
        return [m for m in self.messages.get(channel, []) if m.get("thread_ts") == thread_ts]

    async def socket_send(self, envelope: dict[str, Any]) -> None:
        """Push a Socket Mode envelope to the connected client."""
        await asyncio.wait_for(self._socket_open.wait(), timeout=20)
        await self._sockets[-1].send_str(json.dumps(envelope))

    async def drop_sockets(self) -> None:
        """Close every Socket Mode connection (Slack does this when it refreshes them)."""
        self._socket_open.clear()
        for ws in self._sockets:
            await ws.close()

    # -- server -------------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._method)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_get("/files-pri/{owner}/download/{name}", self._download)
        app.router.add_get("/socket", self._socket)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        for ws in self._sockets:
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @staticmethod
    async def _args(request: web.Request) -> dict[str, Any]:
        args: dict[str, Any] = dict(request.query)
        if request.content_type == "application/json":
            body = await request.json()
            if isinstance(body, dict):
                args.update(body)
        elif request.method == "POST":
            form = await request.post()
            for key, value in form.items():
                if isinstance(value, web.FileField):
                    args[key] = {"filename": value.filename, "data": value.file.read()}
                else:
                    args[key] = value
        for key in JSON_STRING_ARGS:
            if isinstance(args.get(key), str):
                try:
                    args[key] = json.loads(args[key])
                except ValueError:
                    pass
        return args

    def _failure(self, method: str, args: dict[str, Any]) -> Failure | None:
        for failure in self.failures:
            if failure.method == method and failure.times > 0 and failure.when(args):
                failure.times -= 1
                return failure
        return None

    async def _method(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        args = await self._args(request)
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") or str(args.get("token") or "")
        wanted = self.app_token if method == "apps.connections.open" else self.bot_token
        if token != wanted:
            self.calls.append(Call(method, args, 200))
            return web.json_response({"ok": False, "error": "invalid_auth"})
        failure = self._failure(method, args)
        if failure is not None and failure.kind == "slow":
            await asyncio.sleep(failure.stall_s)  # a slow network: it still does the work
            failure = None
        if failure is not None and not failure.commit:
            return await self._fail(request, method, args, failure)
        handler = getattr(self, "_m_" + method.replace(".", "_"), None)
        if handler is None:
            self.calls.append(Call(method, args, 404))
            return web.json_response({"ok": False, "error": "unknown_method"}, status=404)
        result = handler(args)
        if failure is not None:  # the work is done; the caller never hears of it
            return await self._fail(request, method, args, failure)
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.calls.append(Call(method, args, 200 if result.get("ok") else 400, peer=peer))
        return web.json_response(result)

    async def _fail(
        self, request: web.Request, method: str, args: dict[str, Any], failure: Failure
    ) -> web.StreamResponse:
        if failure.kind == "429":
            self.calls.append(Call(method, args, 429))
            return web.json_response(
                {"ok": False, "error": "ratelimited"},
                status=429,
                headers={"Retry-After": str(failure.retry_after)},
            )
        if failure.kind == "5xx":
            self.calls.append(Call(method, args, 503))
            return web.json_response({"ok": False, "error": "service_unavailable"}, status=503)
        if failure.kind == "internal_error":  # Slack: "some aspect ... may have succeeded"
            self.calls.append(Call(method, args, 400))
            return web.json_response({"ok": False, "error": "internal_error"})
        self.calls.append(Call(method, args, 0))
        if failure.kind == "stall":
            await asyncio.sleep(failure.stall_s)  # past the client's timeout: it gave up
        if request.transport is not None:
            request.transport.abort()  # the connection drops before any answer
        return web.Response()

    async def _upload(self, request: web.Request) -> web.Response:
        file_id = request.match_info["file_id"]
        data = await request.read()
        self.calls.append(Call("upload", {"file_id": file_id}, 200, data=data))
        if file_id not in self.uploads:
            return web.Response(status=404, text="unknown upload")
        self.uploads[file_id]["data"] = data
        return web.Response(text="OK - " + str(len(data)))

    async def _download(self, request: web.Request) -> web.Response:
        file_id = request.match_info["owner"].split("-", 1)[-1]
        auth = request.headers.get("Authorization")
        self.downloads.append((file_id, auth))
        if file_id not in self.files:
            return web.Response(status=404)
        _name, data, login_page = self.files[file_id]
        if login_page or auth != f"Bearer {self.bot_token}":
            return web.Response(body=LOGIN_PAGE, content_type="text/html")
        return web.Response(body=data, content_type="application/octet-stream")

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._sockets.append(ws)
        await ws.send_str(json.dumps({"type": "hello", "num_connections": 1}))
        self._socket_open.set()
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                self.socket_acks.append(json.loads(msg.data))
        return ws

    # -- methods ------------------------------------------------------------------------------

    def _next_ts(self) -> str:
        raw = next(self._ts)
        return f"{raw // 1_000_000}.{raw % 1_000_000:06d}"

    def _m_auth_test(self, _args: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://example.slack.com/",
            "team": "Example",
            "user": "jazz",
            "team_id": self.team,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _m_apps_connections_open(self, _args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": f"ws://127.0.0.1:{self.port}/socket"}

    def _post(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = str(args.get("channel") or "")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if not (args.get("text") or args.get("markdown_text") or args.get("blocks")):
            return {"ok": False, "error": "no_text"}
        if args.get("markdown_text") and (args.get("text") or args.get("blocks")):
            return {"ok": False, "error": "markdown_text_conflict"}
        if len(str(args.get("markdown_text") or "")) > 12_000:
            return {"ok": False, "error": "msg_too_long"}
        msg: dict[str, Any] = {
            "type": "message",
            "ts": self._next_ts(),
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "text": args.get("text") or args.get("markdown_text") or "",
        }
        for key in ("thread_ts", "blocks", "markdown_text", "metadata"):
            if args.get(key):
                msg[key] = args[key]
        self.messages.setdefault(channel, []).append(msg)
        self.posted_at[msg["ts"]] = time.monotonic()
        return {"ok": True, "channel": channel, "ts": msg["ts"], "message": msg}

    def _m_chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        return self._post(args)

    def _m_chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(args.get("channel") or ""), str(args.get("ts") or "")
        for msg in self.messages.get(channel, []):
            if msg["ts"] == ts:
                for key in ("text", "blocks", "markdown_text"):
                    if key in args:
                        msg[key] = args[key]
                if "blocks" not in args:
                    msg.pop("blocks", None)
                return {"ok": True, "channel": channel, "ts": ts, "text": msg.get("text")}
        return {"ok": False, "error": "message_not_found"}

    def _m_chat_postEphemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        if not args.get("user") or not args.get("channel"):
            return {"ok": False, "error": "invalid_arguments"}
        return {"ok": True, "message_ts": self._next_ts()}

    def _with_metadata(self, msg: dict[str, Any], include: bool) -> dict[str, Any]:
        return msg if include else {k: v for k, v in msg.items() if k != "metadata"}

    def _m_conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(args.get("channel") or ""), str(args.get("ts") or "")
        include = str(args.get("include_all_metadata")).lower() in ("1", "true")
        found = [self._with_metadata(m, include) for m in self.thread(channel, ts)]
        return {"ok": True, "messages": found, "has_more": False}

    def _m_conversations_history(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = str(args.get("channel") or "")
        include = str(args.get("include_all_metadata")).lower() in ("1", "true")
        found = [
            self._with_metadata(m, include)
            for m in reversed(self.messages.get(channel, []))
            if not m.get("thread_ts")
        ]
        return {"ok": True, "messages": found, "has_more": False}

    def _m_files_getUploadURLExternal(self, args: dict[str, Any]) -> dict[str, Any]:
        if not args.get("filename") or not args.get("length"):
            return {"ok": False, "error": "invalid_arguments"}
        file_id = f"F0UP{next(self._ids):06d}"
        self.uploads[file_id] = {"filename": args["filename"], "length": int(args["length"])}
        return {"ok": True, "upload_url": f"{self.base}/upload/{file_id}", "file_id": file_id}

    def _m_files_completeUploadExternal(self, args: dict[str, Any]) -> dict[str, Any]:
        files = args.get("files") or []
        done = []
        for f in files:
            upload = self.uploads.get(f.get("id"))
            if upload is None or "data" not in upload:
                return {"ok": False, "error": "file_not_found"}
            upload.update(
                channel=args.get("channel_id"), thread_ts=args.get("thread_ts"), title=f["title"]
            )
            done.append({"id": f["id"], "title": f.get("title"), "name": upload["filename"]})
            # shared into the conversation: a message of the bot's holding the file
            shared: dict[str, Any] = {
                "type": "message",
                "ts": self._next_ts(),
                "user": self.bot_user_id,
                "bot_id": self.bot_id,
                "text": "",
                "files": [{**done[-1], "size": upload["length"]}],
            }
            if args.get("thread_ts"):
                shared["thread_ts"] = args["thread_ts"]
            self.messages.setdefault(str(args.get("channel_id") or ""), []).append(shared)
        return {"ok": True, "files": done}

    def _m_assistant_threads_setStatus(self, args: dict[str, Any]) -> dict[str, Any]:
        if not args.get("channel_id") or not args.get("thread_ts"):
            return {"ok": False, "error": "invalid_arguments"}
        return {"ok": True}
