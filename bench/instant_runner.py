"""An instant runner for benchmarks: the ``jazz run --json`` contract, minimally (stdlib only).

Reads the first stdin line (``{"prompt": ...}``), prints one envelope line on stdout and
exits 0 at once (it never waits for stdin to close: the gateway keeps it open for answers).
Arguments are ignored. Needs nothing from ``site``, so it may be started with ``-S -E``.
"""

import json
import sys


def main() -> int:
    try:
        first = json.loads(sys.stdin.readline() or "{}")
        prompt = str(first.get("prompt", "")) if isinstance(first, dict) else ""
    except ValueError:
        prompt = ""
    envelope = {
        "ok": True,
        "answer": "ok: " + prompt[:40],
        "costUSD": 0,
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
