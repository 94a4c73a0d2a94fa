"""Failures on demand: the ways a runner goes wrong that the gateway must survive.

Why it exists: a real agent fails, answers nothing, crashes without an envelope, prints
garbage or megabytes on stdout, leaves processes behind and ignores SIGTERM; the gateway's
handling of each (an error in the chat, the process group killed, the run reaped) can only
be tested against a runner that does it when told to.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from typing import TYPE_CHECKING

from .contract import Finished
from .directives import MAX_BIG_STDOUT_MB, MAX_SELF_S, amount_arg

if TYPE_CHECKING:
    from .run import Run

SPAWN_CHILD = """\
import os, subprocess, sys, time
grandchild = subprocess.Popen(
    sys.argv[2:], start_new_session=True,
    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
)
os.write(1, b"%d\\n" % grandchild.pid)
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
time.sleep(float(sys.argv[1]))
"""
PYTHON_SLEEP = "import sys, time; time.sleep(float(sys.argv[1]))"


def do_fail(run: Run, rest: str) -> None:
    run.fail("failed", rest or "the reference runner was told to fail")


def do_empty(run: Run, _rest: str) -> None:
    run.fail("empty_response", "the answer was empty")


def do_crash(run: Run, _rest: str) -> None:
    run.out.stderr(
        "Traceback (most recent call last):\n"
        '  File "reference_runner.py", line 1, in <module>\n'
        "RuntimeError: the reference runner was told to crash"
    )
    raise Finished(3)


def do_garbage(run: Run, _rest: str) -> None:
    run.out.stdout_bytes(b"%%% this is not an envelope %%%\n<html>garbage</html>\n")
    raise Finished(1)


def do_big_stdout(run: Run, rest: str) -> None:
    megabytes = amount_arg(rest, 1.0, MAX_BIG_STDOUT_MB)
    line = b"j" * 1023 + b"\n"
    block = line * 64  # 64 KiB, whole lines
    left = int(megabytes * 1024 * 1024)
    while left > 0:
        piece = block[: min(left, len(block))]
        if len(piece) < len(block) and not piece.endswith(b"\n"):
            piece = piece[:-1] + b"\n"
        run.out.stdout_bytes(piece)
        left -= len(piece)
    run.notes.append(f"wrote {megabytes:g} MB of junk to stdout")


def do_spawn(run: Run, rest: str) -> None:
    import shutil
    import subprocess

    seconds = amount_arg(rest, 60.0, MAX_SELF_S)
    sleeper = shutil.which("sleep")
    grand_argv = (
        [sleeper, f"{seconds:g}"]
        if sleeper
        else [sys.executable, "-c", PYTHON_SLEEP, f"{seconds:g}"]
    )
    child = subprocess.Popen(
        [sys.executable, "-c", SPAWN_CHILD, f"{seconds:g}", *grand_argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], 10.0)
    line = child.stdout.readline() if ready else b""
    child.stdout.close()
    pids = [child.pid] + ([int(line)] if line.strip().isdigit() else [])
    run.out.event("log", message="spawned a child and a setsid grandchild", pids=pids)
    run.notes.append(f"left {len(pids)} process(es) running for {seconds:g} s: {pids}")


def do_ignore_term(run: Run, _rest: str) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    run.timeout_armed = False  # only SIGKILL (or SIGINT) ends this run now
    run.out.event("log", message="ignoring SIGTERM", pid=os.getpid())
    end = time.monotonic() + MAX_SELF_S
    while time.monotonic() < end:
        time.sleep(0.1)
    run.fail("failed", f"ignored SIGTERM for {MAX_SELF_S:g} s and nobody killed it")
