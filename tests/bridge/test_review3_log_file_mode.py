"""Review: the gateway's log file (``log.file``) was readable by every account on the host,
the conversations' own accounts included.

The file was created with the process's umask (0644 under the usual 022) in a directory
``jazz-bridge`` makes 0755 (``/var/log/jazz-bridge/`` in the example config), so a run, as
its conversation's account, could read the gateway's whole log: at ``log.level = "DEBUG"``
every other conversation's messages and answers (python-telegram-bot and slack_sdk log the
text they send), at any level every conversation's thread key, sender and outcome. One
conversation must never read another's. The log file is the gateway's own, like its state
(never readable by "other"), whatever the umask it was started with.

The real ``jazz-bridge serve`` (root, one account per conversation) with Telegram on the
fake Bot API and the web chat; the run of a web conversation tries to read the log file.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from accounts_support import IS_ROOT, remove_accounts

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "faults"))

from gateway_harness import Client
from platforms_support import (
    GatewayProcess,
    deliver_telegram,
    platform_env,
    running_fakes,
    tg_update,
    wait_until,
)

from bridge.cli import setup_logging
from bridge.config import load_settings
from bridge.logs import stop_writer
from bridge.plugins import load_specs
from bridge.runner.cli import shared_interpreter

pytestmark = pytest.mark.skipif(not IS_ROOT, reason="needs root (one account per conversation)")

CONFIDENTIAL = "the-merger-with-acme-closes-friday"
PROCESS_UMASK = 0o022  # a shell's usual umask: how serve is started by hand or in a container

# A run that tries to read the gateway's log file and answers with what it found (and the
# prompt, which the Bot API call that sends the answer logs at DEBUG).
SNOOPING_RUNNER = """\
import json, os, sys
prompt = json.loads(sys.stdin.readline())["prompt"]
path = os.environ["GATEWAY_LOG"]
CONFIDENTIAL = "%s"
try:
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    found = "READ the gateway log, " + str(len(text)) + " characters"
    if CONFIDENTIAL in text:
        found += ", with the other conversation's answer in it"
except OSError as exc:
    found = "DENIED " + type(exc).__name__
answer = found + " (you said: " + prompt + ")"
print(json.dumps({"ok": True, "answer": answer, "costUSD": 0, "costKnown": False,
    "tokenUsage": {"promptTokens": 0, "completionTokens": 0, "totalTokens": 0},
    "toolCalls": [], "artifacts": []}))
"""


@pytest.fixture
def usual_umask() -> Iterator[None]:
    old = os.umask(PROCESS_UMASK)  # serve inherits it
    yield
    os.umask(old)


async def test_a_run_cannot_read_the_gateway_log_file(
    tmp_path: Path,
    fake_dir: Path,
    shared_root: Path,
    uid_range: tuple[int, int],
    usual_umask: None,
) -> None:
    log_file = tmp_path / "log" / "jazz-bridge" / "jazz-bridge.log"  # as /var/log/jazz-bridge/
    runner = fake_dir / "snooping_runner.py"
    runner.write_text(SNOOPING_RUNNER % CONFIDENTIAL)  # not in the env: it would be a secret
    runner.chmod(0o755)
    async with running_fakes() as (slack, telegram):
        env = platform_env(shared_root, fake_dir, uid_range, slack, telegram)
        env.update(
            JAZZ_BRIDGE_LOG__LEVEL="DEBUG",
            JAZZ_BRIDGE_LOG__FILE=str(log_file),
            JAZZ_BRIDGE_ISOLATION="on",
        )
        gateway = GatewayProcess(env, tmp_path)
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
                gateway.env["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps(
                    [shared_interpreter(), str(runner)]
                )
                gateway.env["JAZZ_BRIDGE_RUNNER__EXTRA_ENV"] = json.dumps(
                    {
                        "FAKE_DIR": str(fake_dir),
                        "GATEWAY_LOG": str(log_file),
                    }
                )
                await gateway.start(s)
                # conversation A (Telegram) is answered with something confidential
                await deliver_telegram(s, gateway.base, tg_update(1, 4242, 1, CONFIDENTIAL))
                await wait_until(
                    lambda: CONFIDENTIAL in log_file.read_text(), 20, "A's text in the log"
                )
                # conversation B (the web chat): its run reads the log file
                web = Client(gateway.base, s, fake_dir)
                await web.post("b", "what is in the gateway's log?")
                (answer,) = await web.wait_role("b", "assistant")
                mode = stat.S_IMODE(log_file.stat().st_mode)
        finally:
            await gateway.stop()
            remove_accounts(shared_root / "state" / "accounts.json")
    assert answer["text"].startswith("DENIED"), (
        f"the log file is {mode:04o}; a conversation's run says: {answer['text']}"
    )
    assert mode & 0o007 == 0, f"the log file is {mode:04o}"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    stop_writer()
    for handler in root.handlers:
        handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_a_log_file_left_readable_by_others_is_closed_to_them(
    tmp_path: Path, restore_logging: None, usual_umask: None
) -> None:
    """A log file an earlier version made 0644 (and rotated files made after it) stops being
    readable by others at the next start, as any ``jazz-bridge`` command opens it."""
    log_file = tmp_path / "jazz-bridge.log"
    log_file.write_text("")
    log_file.chmod(0o644)
    settings = load_settings(
        None,
        adapter_sections={k: s.settings_model for k, s in load_specs().items()},
        environ={"JAZZ_BRIDGE_LOG__FILE": str(log_file), "JAZZ_BRIDGE_LOG__MAX_BYTES": "4096"},
    )
    setup_logging(settings)
    log = logging.getLogger("jazz_bridge.review")
    log.info("opened")
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o640
    for n in range(40):  # past max_bytes: rotated, a new file made at the path
        log.info("line %d %s", n, "x" * 200)
    assert (tmp_path / "jazz-bridge.log.1").exists()
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o640
