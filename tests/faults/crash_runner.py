#!/usr/bin/env python3
"""The crash suite's runner (stdlib only; copied into ``fake_dir``): fast and countable.

It reads the prompt like ``jazz run --input-stdin``, appends one JSON line
``{"conversation", "prompt", "pid", "t"}`` to ``$FAKE_DIR/runs-<pid>.jsonl`` before doing
anything else (so a run the gateway's kill cut short is still counted), works for a few
milliseconds (``$CRASH_RUN_MS``, at most; random, so a kill can land mid-run; a word
``slow=N`` in the prompt makes it work N ms, long enough for a progress bubble) and answers
``ANSWER <prompt>``.
"""

import json
import os
import random
import sys
import time

FAKE_DIR = os.environ["FAKE_DIR"]


def main() -> int:
    first = json.loads(sys.stdin.readline())
    prompt = first["prompt"]
    conv = sys.argv[sys.argv.index("--conversation") + 1]
    line = json.dumps(
        {"conversation": conv, "prompt": prompt, "pid": os.getpid(), "t": time.time()}
    )
    fd = os.open(
        os.path.join(FAKE_DIR, f"runs-{os.getpid()}.jsonl"),
        os.O_WRONLY | os.O_CREAT | os.O_APPEND,
        0o644,
    )
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
    slow = [w for w in prompt.split() if w.startswith("slow=")]
    if slow:
        time.sleep(float(slow[0][5:]) / 1000)
    else:
        time.sleep(random.uniform(0, float(os.environ.get("CRASH_RUN_MS", "20")) / 1000))
    envelope = {
        "ok": True,
        "answer": f"ANSWER {prompt}",
        "costUSD": 0.0,
        "costKnown": False,
        "tokenUsage": {"promptTokens": 1, "completionTokens": 1, "totalTokens": 2},
        "toolCalls": [],
        "artifacts": [],
    }
    sys.stdout.write(json.dumps(envelope) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
