#!/usr/bin/env python3
"""A greedy runner of the resource-limit suite (stdlib only; copied into ``fake_dir``).

It speaks the runner contract (one JSON envelope on stdout) and acts on the prompt's first
word:

  limits      answers ``limits: {json}``: the rlimits it was started with
  processes N starts N processes (each waits for its parent to go), answers how many the
              kernel let it start, then ends them
  bigfile N   writes a file of N bytes into its workspace, then answers (the file limit
              kills it first with SIGXFSZ)
  burn        spins on the CPU until the CPU limit kills it (SIGXCPU)
  hog         takes memory 64 MiB at a time until refused, then dies of it the way a
              runtime does: "out of memory" on stderr, exit code 1
  herd N      starts N processes each holding 192 MiB at once (each far below a
              per-process limit, together maybe not), answers once all held it; a helper
              killed (the kernel's OOM killer) fails the run: exit code 1
  (other)     answers normally
"""

import json
import os
import resource
import sys
import time

CHUNK = 64 * 1024 * 1024
LIMITS = {
    "processes": resource.RLIMIT_NPROC,
    "memory_bytes": resource.RLIMIT_AS,
    "cpu_s": resource.RLIMIT_CPU,
    "file_bytes": resource.RLIMIT_FSIZE,
    "core": resource.RLIMIT_CORE,
}


def envelope(answer: str) -> None:
    env = {
        "ok": True,
        "answer": answer,
        "costUSD": 0.0,
        "costKnown": True,
        "tokenUsage": {"promptTokens": 1, "completionTokens": 1, "totalTokens": 2},
        "toolCalls": [],
        "artifacts": [],
    }
    sys.stdout.write(json.dumps(env) + "\n")
    sys.stdout.flush()


def read_prompt() -> str:
    data = sys.stdin.readline()
    try:
        request = json.loads(data)
    except ValueError:
        return data.strip()
    return str(request.get("prompt", "")) if isinstance(request, dict) else ""


def limits() -> None:
    found = {}
    for name, which in LIMITS.items():
        soft, hard = resource.getrlimit(which)
        found[name] = [soft, hard]
    envelope("limits: " + json.dumps(found))


def processes(count: int) -> None:
    read_end, write_end = os.pipe()
    kids = []
    for _ in range(count):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:  # waits until the parent closes its end
            os.close(write_end)
            os.read(read_end, 1)
            os._exit(0)
        kids.append(pid)
    os.close(write_end)
    for pid in kids:
        os.waitpid(pid, 0)
    envelope(f"processes started: {len(kids)} of {count}")


def bigfile(size: int) -> None:
    block = b"x" * (1024 * 1024)
    with open("big.bin", "wb") as fh:
        left = size
        while left > 0:
            fh.write(block[: min(left, len(block))])
            left -= len(block)
    envelope(f"wrote {size} bytes")


def burn() -> None:
    deadline = time.monotonic() + 600  # bounded: the limit ends it long before
    n = 0
    while time.monotonic() < deadline:
        n += 1
    envelope(f"burnt {n}")


def hog() -> None:
    held = []
    try:
        while len(held) < 4096:  # 256 GiB: far past any limit a test sets
            held.append(bytearray(CHUNK))
    except MemoryError:
        held.clear()
        sys.stderr.write("fatal: out of memory\n")
        sys.stderr.flush()
        sys.exit(1)
    envelope(f"held {len(held) * CHUNK} bytes")


HERD_BYTES = 192 * 1024 * 1024
PAGE = 4096


def herd(count: int) -> None:
    ready_r, ready_w = os.pipe()
    release_r, release_w = os.pipe()
    kids = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            os.close(release_w)
            held = bytearray(HERD_BYTES)
            held[::PAGE] = b"\x01" * len(range(0, HERD_BYTES, PAGE))  # resident, not lazy
            os.write(ready_w, b"1")
            os.close(ready_w)  # so the parent sees the end once each wrote or died
            os.read(release_r, 1)  # until the parent lets go
            os._exit(0)
        kids.append(pid)
    os.close(ready_w)
    os.close(release_r)
    while os.read(ready_r, count):  # until each helper held its share, or died
        pass
    os.close(release_w)
    killed = 0
    for pid in kids:
        _, status = os.waitpid(pid, 0)
        killed += os.WIFSIGNALED(status)
    if killed:
        sys.stderr.write(f"fatal: {killed} helper process(es) killed\n")
        sys.exit(1)
    envelope(f"herd held {count * HERD_BYTES} bytes")


def main() -> None:
    words = read_prompt().split()
    first = words[0] if words else ""
    arg = int(words[1]) if len(words) > 1 and words[1].isdigit() else 0
    if first == "limits":
        limits()
    elif first == "processes":
        processes(arg)
    elif first == "bigfile":
        bigfile(arg)
    elif first == "burn":
        burn()
    elif first == "hog":
        hog()
    elif first == "herd":
        herd(arg)
    else:
        envelope("greedy runner: " + " ".join(words))


if __name__ == "__main__":
    main()
