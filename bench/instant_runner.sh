#!/bin/sh
# An instant runner for benchmarks: the `jazz run --json` contract at its cheapest.
# Reads the first stdin line (the {"prompt": ...} request; never waits for stdin to close:
# the gateway keeps it open for answers), prints one envelope line and exits 0.
# Arguments are ignored. A shell, not Python: CPython's ~25 ms start-up would be the
# whole measure, and "instant" is the point. bench/instant_runner.py is the Python one.
IFS= read -r _request
printf '%s\n' '{"ok": true, "answer": "ok: instant", "costUSD": 0, "costKnown": false, "tokenUsage": {"promptTokens": 1, "completionTokens": 1, "totalTokens": 2}, "toolCalls": [], "artifacts": []}'
