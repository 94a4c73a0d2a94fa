"""The service's log: JSON lines off a terminal, text on one, one line per turn, no secrets.

Logging is configured the way ``jazz-bridge`` does it (``bridge.cli.setup_logging`` with
loaded settings), and the secrets reach the log through real code: httpx logging a request
URL that carries a Telegram bot token, an exception message, an ``extra`` field.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bridge"))
from accounts_support import remove_accounts
from gateway_harness import gateway_env, released_cli, running_gateway, wait_until

from bridge.cli import setup_logging
from bridge.config import load_settings
from bridge.logs import MASK, JsonFormatter, TextFormatter, formatter_for, stop_writer
from bridge.plugins import load_specs

SECTIONS = {k: s.settings_model for k, s in load_specs().items()}
BOT_TOKEN = "123456789:AAE-real-looking-bot-token_xyz"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
WEB_TOKEN = "web-token-for-the-local-chat-0042"


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    stop_writer()
    root.handlers[:] = handlers
    root.setLevel(level)


def _settings(**extra: str):  # type: ignore[no-untyped-def]
    environ = {
        "JAZZ_BRIDGE_TELEGRAM__TOKEN": BOT_TOKEN,
        "JAZZ_BRIDGE_SLACK__SIGNING_SECRET": SIGNING_SECRET,
        "JAZZ_BRIDGE_WEB__TOKEN": WEB_TOKEN,
        **extra,
    }
    return load_settings(None, adapter_sections=SECTIONS, environ=environ)


class Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def _lines(stream: io.StringIO) -> list[str]:
    return [line for line in stream.getvalue().splitlines() if line.strip()]


@pytest.mark.parametrize("writer_thread", [False, True], ids=["in-place", "serve-thread"])
async def test_configured_secrets_are_masked_wherever_they_are_logged(
    monkeypatch: pytest.MonkeyPatch, writer_thread: bool
) -> None:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    err = Stream(tty=False)
    monkeypatch.setattr(sys, "stderr", err)
    try:
        setup_logging(_settings(), "DEBUG", writer_thread=writer_thread)
        # a real library logs the token: httpx logs each request's URL at INFO
        async with httpx.AsyncClient() as client:
            resp = await client.post(f"http://127.0.0.1:{port}/bot{BOT_TOKEN}/getMe")
        assert resp.status_code == 200
        assert seen == [f"/bot{BOT_TOKEN}/getMe"]  # the secret really was in the URL
        log = logging.getLogger("jazz_bridge.test")
        log.warning("signing secret is %s", SIGNING_SECRET)
        log.info("web", extra={"header": f"Bearer {WEB_TOKEN}", "nested": {"t": BOT_TOKEN}})
        try:
            raise RuntimeError(f"bad token {BOT_TOKEN}")
        except RuntimeError:
            log.exception("call failed")
    finally:
        await runner.cleanup()
    stop_writer()  # serve's writer thread: every queued line written
    text = err.getvalue()
    for secret in (BOT_TOKEN, SIGNING_SECRET, WEB_TOKEN):
        assert secret not in text
    records = [json.loads(line) for line in _lines(err)]
    httpx_lines = [r for r in records if r["logger"] == "httpx"]
    assert httpx_lines and f"/bot{MASK}/getMe" in httpx_lines[0]["msg"]
    by_msg = {r["msg"]: r for r in records}
    assert f"signing secret is {MASK}" in by_msg
    assert by_msg["web"]["header"] == f"Bearer {MASK}"
    assert MASK in by_msg["web"]["nested"]
    failed = by_msg["call failed"]
    assert f"RuntimeError: bad token {MASK}" in failed["exc"]


def test_secret_looking_environment_values_are_masked_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-provider-key-0123456789")
    err = Stream(tty=False)
    monkeypatch.setattr(sys, "stderr", err)
    setup_logging(_settings())
    logging.getLogger("jazz_bridge.test").warning("env has sk-provider-key-0123456789")
    assert "sk-provider" not in err.getvalue()
    assert json.loads(_lines(err)[-1])["msg"] == f"env has {MASK}"


def test_json_off_a_terminal_text_on_one_and_the_format_setting_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = logging.getLogger("jazz_bridge.test")
    pipe = Stream(tty=False)
    monkeypatch.setattr(sys, "stderr", pipe)
    setup_logging(_settings())
    log.info("to a pipe", extra={"thread_key": "web:t1"})
    record = json.loads(_lines(pipe)[-1])
    assert record["msg"] == "to a pipe" and record["thread_key"] == "web:t1"
    assert record["level"] == "INFO" and record["logger"] == "jazz_bridge.test"

    # a real terminal (a pty), not a flag
    leader, follower = os.openpty()
    try:
        with os.fdopen(follower, "w", closefd=False) as tty:
            assert isinstance(formatter_for("auto", tty), TextFormatter)
            assert isinstance(formatter_for("json", tty), JsonFormatter)
    finally:
        os.close(leader)
        os.close(follower)

    term = Stream(tty=True)
    monkeypatch.setattr(sys, "stderr", term)
    setup_logging(_settings())
    log.info("on a terminal", extra={"thread_key": "web:t2", "note": "two words"})
    line = _lines(term)[-1]
    assert ' INFO jazz_bridge.test: on a terminal thread_key=web:t2 note="two words"' in line
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)

    forced = Stream(tty=True)
    monkeypatch.setattr(sys, "stderr", forced)
    setup_logging(_settings(JAZZ_BRIDGE_LOG__FORMAT="json"))
    log.info("forced json")
    assert json.loads(_lines(forced)[-1])["msg"] == "forced json"

    text = Stream(tty=False)
    monkeypatch.setattr(sys, "stderr", text)
    setup_logging(_settings(JAZZ_BRIDGE_LOG__FORMAT="text"))
    log.info("forced text")
    assert _lines(text)[-1].endswith("jazz_bridge.test: forced text")


def test_the_log_file_is_json_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", Stream(tty=True))
    setup_logging(_settings(JAZZ_BRIDGE_LOG__FILE=str(tmp_path / "log" / "jb.log")))
    logging.getLogger("jazz_bridge.test").info("into the file %s", BOT_TOKEN)
    for handler in logging.getLogger().handlers:
        handler.flush()
    record = json.loads((tmp_path / "log" / "jb.log").read_text().splitlines()[-1])
    assert record["msg"] == f"into the file {MASK}"


def test_a_log_write_that_blocks_does_not_block_the_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``serve``'s logging: stderr is a pipe nobody reads (a stuck journald), and logging
    still returns at once; the lines are written once there is room."""
    reader, writer = os.pipe()
    os.set_blocking(writer, False)
    filled = 0
    with contextlib.suppress(BlockingIOError):
        while True:
            filled += os.write(writer, b"x" * 65536)
    os.set_blocking(writer, True)  # as a service's stderr is: a write now waits for room
    stream = os.fdopen(writer, "w", encoding="utf-8")
    monkeypatch.setattr(sys, "stderr", stream)
    try:
        setup_logging(_settings(), writer_thread=True)
        logged = threading.Event()

        def log_lines() -> None:
            for i in range(3):
                logging.getLogger("jazz_bridge.test").warning("while the pipe is full %d", i)
            logged.set()

        caller = threading.Thread(target=log_lines, daemon=True)
        caller.start()
        returned = logged.wait(10)
        chunks: list[bytes] = []

        def drain() -> None:
            while chunk := os.read(reader, 1 << 20):
                chunks.append(chunk)

        drainer = threading.Thread(target=drain, daemon=True)
        drainer.start()  # room again: what was queued gets written
        stop_writer()
        caller.join(10)
        stream.close()  # the drainer reads to the end
        drainer.join(10)
        assert returned, "logging blocked the caller while the log's pipe was full"
        assert b"while the pipe is full 2" in b"".join(chunks)
    finally:
        stop_writer()
        monkeypatch.undo()
        with contextlib.suppress(OSError):
            stream.close()
        os.close(reader)


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_one_structured_line_per_turn(
    env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bridge.engine")
    async with running_gateway(env) as (_, client):
        await client.post("fine", "hello")
        await client.wait_role("fine", "assistant")
        await client.post("broken", "crash")
        await client.wait_role("broken", "error")

        def turns() -> list[logging.LogRecord]:
            return [r for r in caplog.records if getattr(r, "event", None) == "turn"]

        await wait_until(lambda: len(turns()) == 2, what="two turn lines")
    ok, failed = sorted(turns(), key=lambda r: r.thread_key)[::-1]  # type: ignore[attr-defined]
    for record, key in ((ok, "web:fine"), (failed, "web:broken")):
        data = json.loads(JsonFormatter().format(record))
        assert data["thread_key"] == key
        assert data["platform"] == "web"
        assert isinstance(data["duration_ms"], int) and data["duration_ms"] >= 0
        assert isinstance(data["run_id"], int)
    assert json.loads(JsonFormatter().format(ok))["outcome"] == "ok"
    failed_data = json.loads(JsonFormatter().format(failed))
    assert failed_data["outcome"] not in ("ok", None)
    # the fake runner's crash (the released CLI exits 0 or 1 only)
    assert failed_data["exit_code"] == (1 if released_cli() else 3)
