"""Half a surrogate pair in the runner's envelope is mended once, where it is read.

JSON may carry a lone surrogate (``"\\ud83d"``): a runner written in JavaScript that cuts
its answer between the two halves of an emoji prints exactly that. Python keeps it as a
str no UTF-8 encoder takes; every surface (and SQLite, and a log file) then fails on it
its own way. It is replaced by U+FFFD as the envelope is parsed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway

from bridge.runner.cli import shared_interpreter
from bridge.runner.envelope import parse_envelope

CUT = "The list, cut short: \\ud83d and \\udc00 but \\ud83d\\ude00 is whole"
CUT_RUNNER = (
    "import sys\n"
    "sys.stdin.readline()\n"
    'print(\'{"ok": true, "answer": "' + CUT.replace("\\", "\\\\") + '", "costUSD": 0, '
    '"costKnown": false, "tokenUsage": {}, "toolCalls": [], "artifacts": []}\', '
    "flush=True)\n"
)
MENDED = "The list, cut short: \ufffd and \ufffd but \U0001f600 is whole"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    runner = fake_dir / "cut_runner.py"
    runner.write_text(CUT_RUNNER)
    os.chmod(runner, 0o755)
    e["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps([shared_interpreter(), str(runner)])
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def test_the_envelope_parser_mends_lone_surrogates() -> None:
    line = json.dumps({"ok": True, "answer": "a \ud83d b", "tokenUsage": {}})
    result = parse_envelope(line, exit_code=0, stderr_tail=[], duration_ms=1)
    assert result.answer == "a \ufffd b"
    line = json.dumps({"ok": False, "code": "x\udc00", "error": "cut \ud83d"})
    result = parse_envelope(line, exit_code=1, stderr_tail=[], duration_ms=1)
    assert (result.code, result.error) == ("x\ufffd", "cut \ufffd")


async def test_a_cut_answer_reaches_the_web_chat(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_app, client):
        await client.post("cut", "list")
        (answer,) = await client.wait_role("cut", "assistant")
        assert answer["text"].startswith(MENDED), answer
