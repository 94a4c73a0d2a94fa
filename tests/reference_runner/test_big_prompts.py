"""A 10 MB prompt: read in linear time, answered with an envelope the gateway can read.

(:mod:`reference_runner.stdin` reads it, :mod:`reference_runner.run` quotes at most
``ECHO_MAX_CHARS`` of it.)

The default answer quoted the whole prompt; 10 MB of Cyrillic lines became a 48 MB envelope
(JSON escapes each letter as six bytes), past the gateway's line limit, so the gateway saw a
run without an envelope. Reading the first line also copied the whole buffer for every
64 KiB read: about 20 s before the run even started.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from reference_support import Runner, argv, prompt

from bridge.runner.cli_streams import MAX_LINE

PROMPT_CHARS = 10 * 1024 * 1024
BOUND_S = 60.0  # generous on a loaded machine; the size check is what fails first


def test_a_10_mb_prompt_gets_an_envelope_the_gateway_reads(tmp_path: Path) -> None:
    text = "яы\n" * (PROMPT_CHARS // 3)
    runner = Runner(tmp_path, argv(timeout_ms=120_000))
    try:
        started = time.monotonic()
        runner.send(prompt(text))
        res = runner.finish(timeout=BOUND_S)
        took = time.monotonic() - started
    finally:
        runner.kill()
    line = max(res.stdout.splitlines(), key=len)
    print(f"{took:.1f} s, envelope line {len(line):,} bytes (gateway limit {MAX_LINE:,})")
    assert res.code == 0 and res.envelope is not None and res.envelope["ok"] is True
    assert len(line) < MAX_LINE
    answer = res.answer
    assert "> яы" in answer and "not echoed" in answer
    assert res.envelope["tokenUsage"]["promptTokens"] == PROMPT_CHARS // 3
    history = json.loads(next((tmp_path / "history").iterdir()).read_text())
    assert history[0]["content"] == text  # the whole prompt is still the conversation's
