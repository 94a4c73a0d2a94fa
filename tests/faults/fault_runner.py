#!/usr/bin/env python3
"""A misbehaving runner of the fault suite's own (stdlib only; copied into ``fake_dir``).

It reads the prompt like ``jazz run --input-stdin`` and misbehaves as the prompt's first
word says; any other prompt gets a normal envelope (so other conversations are served).
Every process it starts notes its pid, uid, session and group in
``$FAKE_DIR/note-<pid>-<event>.json`` so the tests can check that nothing is left afterwards.

  exit1      a traceback on stderr, exit 1, no envelope
  sigkill    kills itself with SIGKILL (no envelope)
  abort      os.abort(): SIGABRT (no envelope)
  noenvelope exit 0 with nothing on stdout
  garbage    binary and text garbage on stdout, exit 0
  badjson    a last line that starts with "{" but is not JSON, exit 0
  flood      50 MB on stdout in one line with no newline, then a real envelope
  floodlines 50 MB of 1 KiB lines that start with "{", then a real envelope
  hang       ignores --timeout and sleeps
  setsid     starts a child holding its pipes and a setsid child that lingers, answers
  daemon     leaves a daemon (double fork, setsid, fds closed, cwd /, an EMPTY environment:
             no run tag), answers once it runs
  noterm     ignores SIGTERM (and so does its child), sleeps
  wait NAME  answers once $FAKE_DIR/release-NAME exists (bounded: 60 s)
  forkchain  leaves a process that called setsid and forks and exits in a loop (each
             generation lives for microseconds), answers; every generation holds the
             write end of $FAKE_DIR/chain.fifo (when the test made one), so the test's
             read end sees end-of-file exactly when the last generation is gone
  leak       prints the value of $PROVIDER_API_KEY on stderr, exits 1 without an envelope
  graceful   works until SIGTERM, then finishes its answer and exits 0 (a runner that
             completes the turn it was in when stopped)
"""

import json
import os
import signal
import subprocess
import sys
import time

FAKE_DIR = os.environ["FAKE_DIR"]
FLOOD_BYTES = 50 * 1024 * 1024
LINGER = "import os, sys, time\nif sys.argv[1] == 'setsid':\n    os.setsid()\ntime.sleep(600)\n"
DAEMON = "import sys, time\nopen(sys.argv[1], 'w').close()\ntime.sleep(600)\n"


def note(**data: object) -> None:
    data.update(
        pid=os.getpid(), uid=os.getuid(), sid=os.getsid(0), pgid=os.getpgid(0), t=time.time()
    )
    path = os.path.join(FAKE_DIR, f"note-{os.getpid()}-{data['event']}.json")
    with open(path + ".tmp", "w") as fh:
        json.dump(data, fh)
    os.replace(path + ".tmp", path)


def envelope(answer: str) -> str:
    return json.dumps(
        {
            "ok": True,
            "answer": answer,
            "costUSD": 0.0,
            "costKnown": False,
            "tokenUsage": {"promptTokens": 1, "completionTokens": 1, "totalTokens": 2},
            "toolCalls": [],
            "artifacts": [],
        }
    )


def linger(kind: str, **popen: object) -> int:
    child = subprocess.Popen([sys.executable, "-c", LINGER, kind], **popen)
    return int(child.pid)


def daemonize(flag: str) -> int:
    """A classic daemon's start (what ``setsid env -i prog &`` amounts to): its pid."""
    read, write = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() == 0:
            os.chdir("/")
            os.write(write, str(os.getpid()).encode())
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.closerange(3, 1024)
            os.execve(sys.executable, [sys.executable, "-c", DAEMON, flag], {})
        os._exit(0)
    os.close(write)
    os.waitpid(middle, 0)
    pid = int(os.read(read, 32))
    deadline = time.monotonic() + 20  # until it runs with its new, empty environment
    while not os.path.exists(flag) and time.monotonic() < deadline:
        time.sleep(0.01)
    return pid


def main() -> int:
    prompt = json.loads(sys.stdin.readline())["prompt"]
    word = prompt.split()[0] if prompt.split() else ""
    note(event="start", word=word, prompt=prompt)
    out = sys.stdout
    if word == "exit1":
        sys.stderr.write("Traceback (most recent call last):\nRuntimeError: provider down\n")
        return 1
    if word == "sigkill":
        sys.stderr.write("about to be killed\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    if word == "abort":
        os.abort()
    if word == "noenvelope":
        sys.stderr.write("finished without saying anything\n")
        return 0
    if word == "garbage":
        out.buffer.write(b"\x00\xff\xfe garbage \x1b[31m\n not json either\n")
        return 0
    if word == "badjson":
        out.write("{this is not json\n")
        return 0
    if word == "flood":
        block = b"x" * (1024 * 1024)
        for _ in range(FLOOD_BYTES // len(block)):
            out.buffer.write(block)
        out.buffer.write(b"\n" + envelope("survived the flood").encode() + b"\n")
        return 0
    if word == "floodlines":
        line = b"{" + b"y" * 1022 + b"\n"
        for _ in range(FLOOD_BYTES // len(line)):
            out.buffer.write(line)
        out.buffer.write(envelope("survived the lines").encode() + b"\n")
        return 0
    if word == "hang":
        time.sleep(600)
    if word == "setsid":
        held = linger("keep")  # inherits stdout/stderr: the pipes stay open after we exit
        quiet = linger(
            "setsid",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        note(event="children", children=[held, quiet])
        out.write(envelope("answered, children left behind") + "\n")
        out.flush()
        return 0
    if word == "daemon":
        pid = daemonize(os.path.join(FAKE_DIR, f"daemon-{os.getpid()}"))
        note(event="children", children=[pid])
        out.write(envelope("answered, a daemon left behind") + "\n")
        out.flush()
        return 0
    if word == "leak":
        sys.stderr.write(f"auth failed with key {os.environ.get('PROVIDER_API_KEY')}\n")
        return 1
    if word == "forkchain":
        try:  # opened before the fork: every generation inherits it (fork keeps CLOEXEC fds)
            os.open(os.path.join(FAKE_DIR, "chain.fifo"), os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            pass  # no test reading it
        noted_r, noted_w = os.pipe()  # the answer waits for the note: no sweep can beat it
        if os.fork() == 0:
            os.close(noted_r)
            os.setsid()
            note(event="chain")  # its session is every generation's
            os.write(noted_w, b"1")
            os.close(noted_w)
            while True:
                if os.fork() != 0:
                    os._exit(0)
        os.close(noted_w)
        os.read(noted_r, 1)  # the note is written (or the child died: end of file)
        os.close(noted_r)
        out.write(envelope("answered, a fork chain left behind") + "\n")
        out.flush()
        return 0
    if word == "graceful":
        finished = []
        signal.signal(signal.SIGTERM, lambda *_: finished.append(True))
        note(event="working", word=word)
        deadline = time.monotonic() + 60
        while not finished and time.monotonic() < deadline:
            time.sleep(0.01)
        out.write(envelope("finished on SIGTERM") + "\n")
        return 0
    if word == "wait":
        deadline = time.monotonic() + 60
        flag = os.path.join(FAKE_DIR, f"release-{prompt.split()[1]}")
        while not os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.02)
    if word == "noterm":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # SIG_IGN survives exec: the child too
        child = linger("keep")
        note(event="children", children=[child])
        time.sleep(600)
    out.write(envelope(f"ok: {prompt}") + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
