"""The gateway's log (``bridge/logs.py``, set up by ``bridge.cli``'s ``setup_logging``):
its file keeps within its configured size, is the gateway's own (never readable by the
conversations' accounts, whatever the umask), and on a full disk says so once; its lines
mask every secret the gateway knows, nested ones too, and one odd value never silences it.
"""

from __future__ import annotations

import io
import json
import logging
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from accounts_support import IS_ROOT, remove_accounts
from gateway_harness import Client

from bridge import logs
from bridge.cli import setup_logging
from bridge.config import load_settings
from bridge.logs import stop_writer
from bridge.plugins import load_specs
from bridge.runner.command import shared_interpreter

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "faults"))

from platforms_support import (
    GatewayProcess,
    deliver_telegram,
    platform_env,
    running_fakes,
    tg_update,
    wait_until,
)

REPO = Path(__file__).resolve().parents[2]
SECTIONS = {k: s.settings_model for k, s in load_specs().items()}
needs_accounts = pytest.mark.skipif(not IS_ROOT, reason="needs root (one account per conversation)")


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """The root logger as it was: the writer thread stopped, the handlers a test set up
    closed, the earlier ones and the level put back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    stop_writer()
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


# -- the log file's size ---------------------------------------------------------------------


MAX_BYTES = 4096


def _on_disk(log_dir: Path) -> int:
    return sum(p.stat().st_size for p in log_dir.iterdir() if p.name.startswith("jb.log"))


@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize("backups", [0, 1])
def test_the_log_file_stays_within_its_configured_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backups: int
) -> None:
    """``log.backups = 0`` (accepted: ``ge=0``) switched the log file's size cap off.

    The example config promises "at most (backups + 1) * max_bytes on disk" and the README
    "the log file rotates at log.max_bytes, keeping log.backups". Python's RotatingFileHandler
    never rolls over when backupCount is 0, so with ``backups = 0`` the file grew without
    bound and ``max_bytes`` silently did nothing."""
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    log_dir = tmp_path / "log"
    settings = load_settings(
        None,
        adapter_sections=SECTIONS,
        environ={
            "JAZZ_BRIDGE_LOG__FILE": str(log_dir / "jb.log"),
            "JAZZ_BRIDGE_LOG__MAX_BYTES": str(MAX_BYTES),
            "JAZZ_BRIDGE_LOG__BACKUPS": str(backups),
        },
    )
    setup_logging(settings)
    log = logging.getLogger("jazz_bridge.test")
    for i in range(400):  # ~40 KB of lines, ten times the cap
        log.info("line %04d %s", i, "x" * 60)
    for handler in logging.getLogger().handlers:
        handler.flush()
    limit = (backups + 1) * MAX_BYTES
    used = _on_disk(log_dir)
    assert used <= limit, (
        f"log.backups={backups}, log.max_bytes={MAX_BYTES}: {used} bytes of log on disk, "
        f"more than (backups + 1) * max_bytes = {limit}"
    )


def test_the_log_file_is_size_capped(tmp_path: Path) -> None:
    log_file = tmp_path / "logs" / "jazz-bridge.log"
    settings = load_settings(
        None,
        environ={
            "JAZZ_BRIDGE_LOG__FILE": str(log_file),
            "JAZZ_BRIDGE_LOG__MAX_BYTES": "4096",
            "JAZZ_BRIDGE_LOG__BACKUPS": "2",
        },
    )
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        setup_logging(settings)
        for i in range(2000):
            logging.getLogger("jazz_bridge.test").info("line %d of a long log", i)
        for handler in root.handlers:
            handler.flush()
        files = sorted(p.name for p in log_file.parent.iterdir())
        assert files == ["jazz-bridge.log", "jazz-bridge.log.1", "jazz-bridge.log.2"]
        assert all((log_file.parent / f).stat().st_size <= 4096 for f in files)
        assert "line 1999 " in log_file.read_text()
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


# -- whose the log file is -------------------------------------------------------------------


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


@needs_accounts
async def test_a_run_cannot_read_the_gateway_log_file(
    tmp_path: Path,
    fake_dir: Path,
    shared_root: Path,
    uid_range: tuple[int, int],
    usual_umask: None,
) -> None:
    """The gateway's log file (``log.file``) was readable by every account on the host,
    the conversations' own accounts included.

    The file was created with the process's umask (0644 under the usual 022) in a directory
    ``jazz-bridge`` makes 0755 (``/var/log/jazz-bridge/`` in the example config), so a run, as
    its conversation's account, could read the gateway's whole log: at ``log.level = "DEBUG"``
    every other conversation's messages and answers (python-telegram-bot and slack_sdk log the
    text they send), at any level every conversation's thread key, sender and outcome. One
    conversation must never read another's. The log file is the gateway's own, like its state
    (never readable by "other"), whatever the umask it was started with.

    The real ``jazz-bridge serve`` (root, one account per conversation) with Telegram on the
    fake Bot API and the web chat; the run of a web conversation tries to read the log file."""
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


@needs_accounts
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
    log = logging.getLogger("jazz_bridge.test")
    log.info("opened")
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o640
    for n in range(40):  # past max_bytes: rotated, a new file made at the path
        log.info("line %d %s", n, "x" * 200)
    assert (tmp_path / "jazz-bridge.log.1").exists()
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o640


# -- a full disk -----------------------------------------------------------------------------


LINES = 60


SCRIPT = r"""
import logging, os, sys
from bridge.cli import setup_logging
from bridge.config import load_settings
from bridge.plugins import load_specs

logs_dir = sys.argv[1]
sections = {k: s.settings_model for k, s in load_specs().items()}
env = {"JAZZ_BRIDGE_LOG__FILE": os.path.join(logs_dir, "gateway.log"),
       "JAZZ_BRIDGE_LOG__FORMAT": "json"}
# written in place (as one-shot commands do; serve's writer thread runs the same handlers):
# each line is on the disk, or failed, before the next statement
setup_logging(load_settings(None, adapter_sections=sections, environ=env))
log = logging.getLogger("jazz_bridge.test")
log.info("before the disk fills")
filler = os.path.join(logs_dir, "filler")
fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
try:
    while os.write(fd, b"x" * 512):
        pass
except OSError:
    pass
os.close(fd)
for i in range(int(sys.argv[2])):
    log.info("while full %d %s", i, "y" * 200)
os.remove(filler)
log.info("space is back")
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if not IS_ROOT:
        pytest.skip("mounting a small file system needs root")
    logs_dir = tmp_path / "logs"
    logs_dir.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "jazz-test-logs", str(logs_dir)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield logs_dir
    finally:
        subprocess.run(["umount", "-l", str(logs_dir)], check=False, timeout=30)


def test_a_full_log_disk_is_said_once_not_per_line(small_disk: Path) -> None:
    """A log file on a full disk buried the gateway's stderr under tracebacks.

    With ``log.file`` on a disk that fills, every log line the gateway wrote failed on the file
    and Python's logging printed ``--- Logging error ---``, a traceback, the call stack and the
    line again to stderr (the journal): some 25 lines of noise per log line, for as long as
    the disk stayed full, around the real lines the stderr handler printed. The operator now
    reads one warning naming the file and why, and one line when it is written again; the
    lines in between still reach stderr, and the file takes lines again once space is freed."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(small_disk), str(LINES)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    records = []
    other = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            other.append(line)
    msgs = [r.get("msg", "") for r in records]
    assert sum(m.startswith("while full") for m in msgs) == LINES  # stderr kept every line
    assert len(other) <= 4, (
        f"{len(other)} lines of noise on stderr for {LINES} log lines while the log file's "
        "disk was full:\n" + "\n".join(other[:40])
    )
    assert any("gateway.log" in line and "No space left" in line for line in other), other
    log_file = (small_disk / "gateway.log").read_text(encoding="utf-8", errors="replace")
    assert "space is back" in log_file
    assert "before the disk fills" in log_file
    # the file's lines stay whole JSON lines: a torn one is not glued to the next
    last = log_file.splitlines()[-1]
    assert json.loads(last)["msg"] == "space is back", last


# -- what a line holds -----------------------------------------------------------------------


SECRETS = ['Zq"7k-Lm9pX2-provider', "Zq\\7k-Lm9pX2-backslash", "pässwort-für-den-proxy"]


class Stream(io.StringIO):
    def isatty(self) -> bool:
        return False


@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize("secret", SECRETS, ids=["quote", "backslash", "non-ascii"])
def test_a_secret_in_a_nested_extra_is_masked(monkeypatch: pytest.MonkeyPatch, secret: str) -> None:
    r"""A secret inside a structured ``extra`` field was masked only when JSON left it as is.

    ``SecretMasker._mask_value`` turns a dict/list extra into ``json.dumps(value)`` (ASCII
    escapes on) and then looks for each secret in that text. A secret holding a character JSON
    escapes (``"``, ``\``, any non-ASCII letter: common in generated passwords and in
    passphrases) no longer appears verbatim, so it is written to the log; a log reader's JSON
    decoder turns the escapes back into the secret."""
    err = Stream()
    monkeypatch.setattr(sys, "stderr", err)
    env = {"JAZZ_BRIDGE_RUNNER__EXTRA_ENV": json.dumps({"PROVIDER_KEY": secret})}
    setup_logging(load_settings(None, adapter_sections=SECTIONS, environ=env))
    logging.getLogger("jazz_bridge.test").info(
        "starting run", extra={"runner_env": {"PROVIDER_KEY": secret}}
    )
    logging.getLogger("jazz_bridge.test").info("flat", extra={"key": secret})
    lines = [json.loads(line) for line in err.getvalue().splitlines() if line.strip()]
    by_msg = {r["msg"]: r for r in lines}
    assert secret not in str(by_msg["flat"]["key"])  # a flat extra is masked
    nested = by_msg["starting run"]["runner_env"]
    decoded = json.loads(nested) if isinstance(nested, str) else nested
    assert secret not in _strings(decoded), f"logged: {nested!r}"


def _strings(value: object) -> str:
    """Every string inside ``value`` (as a reader of the decoded log line sees them)."""
    if isinstance(value, dict):
        return " ".join(_strings(v) for v in (*value.keys(), *value.values()))
    if isinstance(value, list):
        return " ".join(_strings(v) for v in value)
    return str(value)


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text for this one")

    __repr__ = __str__


@pytest.fixture
def logger() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    logs.install([handler], fmt="json", environ={})
    queued = logs.off_thread([handler])
    lg = logging.getLogger("jazz_bridge.test.writer")
    lg.handlers[:] = [queued]
    lg.propagate = False
    lg.setLevel(logging.INFO)
    yield lg, out
    logs.stop_writer()
    lg.handlers[:] = []


def _lines(out: io.StringIO) -> list[dict[str, object]]:
    logs.stop_writer()  # every queued line written (bounded: the writer's own join)
    return [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]


@pytest.mark.parametrize("kind", ["unprintable", "self-holding"])
def test_a_bad_extra_value_does_not_silence_the_log(
    logger: tuple[logging.Logger, io.StringIO], kind: str
) -> None:
    """One log call with an extra field that cannot be turned into text stopped the
    gateway's log for good.

    ``serve`` writes its log lines on a writer thread (:func:`bridge.logs.off_thread`); the
    secret masker runs there, on each handler, and turns every ``extra`` value into text. A value
    whose ``str()`` raised (or a structure holding itself) raised out of the masker, which killed
    the writer thread: that line and every later one, for as long as the gateway ran, were
    never written, without a word anywhere."""
    lg, out = logger
    value: object
    if kind == "unprintable":
        value = Unprintable()
    else:
        loop: list[object] = []
        loop.append(loop)
        value = loop
    lg.info("before")
    lg.info("odd extra", extra={"thing": value, "thread_key": "web:demo"})
    lg.info("after")
    by_msg = {str(r["msg"]): r for r in _lines(out)}
    assert "after" in by_msg, f"the log stopped: {sorted(by_msg)}"
    assert "odd extra" in by_msg  # the line itself is kept, its other fields intact
    assert by_msg["odd extra"]["thread_key"] == "web:demo"
