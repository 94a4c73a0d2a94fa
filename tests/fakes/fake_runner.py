#!/usr/bin/env python3
"""A runner of the tests' own (stdlib only), speaking the jazz run contract.

It records every run (argv, uid, gid, groups, umask, conversation, prompt) as one JSON line
in $FAKE_DIR/run-<pid>.log, and obeys words in the prompt:
  hold NAME      wait until the file $FAKE_DIR/release-NAME exists (bounded 60 s)
  crash          exit 3 with no envelope
  garbage        print garbage on stdout, exit 1
  noenvelope     exit 0 printing nothing
  hang           sleep far past any timeout
  spawn          start a child and a setsid grandchild that linger; write their pids
  approve        ask for one approval and wait for the answer
  artifact-outside  claim /etc/passwd as an artifact
Otherwise it answers "fake answer to: <prompt>".
"""

import json
import os
import subprocess
import sys
import time

FAKE_DIR = os.environ.get("FAKE_DIR", "/tmp")


def log(event: dict) -> None:
    """One log file per process (runs of different accounts can't share one file)."""
    event.setdefault("t", time.monotonic())
    with open(os.path.join(FAKE_DIR, f"run-{os.getpid()}.log"), "a") as fh:
        fh.write(json.dumps(event) + "\n")


def envelope(answer: str, **extra: object) -> None:
    env = {
        "ok": True,
        "answer": answer,
        "costUSD": 0.0,
        "costKnown": False,
        "tokenUsage": {"promptTokens": 1, "completionTokens": 2, "totalTokens": 3},
        "toolCalls": [],
        "artifacts": [],
    }
    env.update(extra)
    sys.stdout.write(json.dumps(env) + "\n")
    sys.stdout.flush()


def main() -> int:
    first = json.loads(sys.stdin.readline())
    prompt = first["prompt"]
    conv = sys.argv[sys.argv.index("--conversation") + 1]
    mask = os.umask(0)
    os.umask(mask)
    record = {
        "event": "start",
        "pid": os.getpid(),
        "argv": sys.argv,
        "uid": os.getuid(),
        "gid": os.getgid(),
        "groups": os.getgroups(),
        "umask": mask,
        "conversation": conv,
        "prompt": prompt,
        "t": time.monotonic(),
        "env": sorted(os.environ),
        "home": os.environ.get("JAZZ_HOME"),
    }
    log(record)
    words = prompt.split()
    try:
        if "hold" in words:
            name = words[words.index("hold") + 1]
            deadline = time.monotonic() + 60
            while not os.path.exists(os.path.join(FAKE_DIR, f"release-{name}")):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
        if "crash" in words:
            sys.stderr.write("Traceback (most recent call last):\n  boom\n")
            return 3
        if "garbage" in words:
            print("this is not json at all")
            return 1
        if "noenvelope" in words:
            return 0
        if "hang" in words:
            time.sleep(120)
        if "spawn" in words:
            child = subprocess.Popen(["sleep", "300"])
            grand = subprocess.Popen(["setsid", "sleep", "300"])
            log({"event": "spawned", "pids": [child.pid, grand.pid], "conversation": conv})
            time.sleep(120)
        if "artifact-outside" in words:
            envelope(
                "made a file",
                artifacts=[
                    {
                        "kind": "file",
                        "path": "/etc/passwd",
                        "mediaType": "text/plain",
                        "tool": "x",
                        "source": "model",
                    }
                ],
            )
            return 0
        if "approve" in words:
            sys.stderr.write(
                json.dumps(
                    {
                        "type": "approval_required",
                        "toolCallId": "call-1",
                        "toolName": "bash",
                        "message": "run ls",
                    }
                )
                + "\n"
            )
            sys.stderr.flush()
            line = sys.stdin.readline()
            decision = json.loads(line) if line.strip() else {}
            verdict = "approved" if decision.get("approved") else "rejected"
            envelope(f"the tool was {verdict}")
            return 0
        sys.stderr.write(
            json.dumps({"type": "tool_execution_start", "toolName": "read", "toolCallId": "t1"})
            + "\n"
        )
        envelope(f"fake answer to: {prompt}")
        return 0
    finally:
        log({"event": "end", "pid": os.getpid(), "conversation": conv, "t": time.monotonic()})


if __name__ == "__main__":
    sys.exit(main())
