"""An artifact path the runner reports never costs the turn its answer.

A runner (or whatever runs as the conversation's account and writes to the runner's stdout)
controls the envelope's ``artifacts[].path``. JSON lets such a string carry a NUL
(``"\\u0000"``) or a lone surrogate (``"\\ud800"``); Python's ``os`` calls reject those with
``ValueError`` (not ``OSError``). The gateway must refuse that one artifact, as it does any
unsafe path, and still deliver the answer and record the run's cost.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from faults_support import gateway_env, running_gateway, wait_until

from bridge.runner.command import shared_interpreter

pytestmark = pytest.mark.faults

RUNNER = r"""
import json, sys
first = json.loads(sys.stdin.readline())
word = first["prompt"].split()[0]
path = {"nul": "workspace/a\u0000b.png", "surrogate": "workspace/\ud800.png"}[word]
env = {"ok": True, "answer": "the answer for " + word, "costUSD": 0.25, "costKnown": True,
       "tokenUsage": {"promptTokens": 1, "completionTokens": 1, "totalTokens": 2},
       "toolCalls": [], "artifacts": [{"kind": "file", "path": path, "mediaType": "image/png",
       "tool": "x", "source": "model"}]}
sys.stdout.write(json.dumps(env) + "\n")
sys.stdout.flush()
"""


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    runner = fake_dir / "artifact_path_runner.py"
    runner.write_text(RUNNER)
    os.chmod(runner, 0o755)
    e["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps([shared_interpreter(), str(runner)])
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


@pytest.mark.parametrize("word", ["nul", "surrogate"])
async def test_an_artifact_path_python_cannot_encode_is_refused_and_the_answer_still_arrives(
    env: dict[str, str], word: str
) -> None:
    async with running_gateway(env) as (app, client):
        await client.post("art", f"{word} please")

        async def settled() -> bool:
            roles = [m["role"] for m in await client.messages("art")]
            return "assistant" in roles or "error" in roles

        await wait_until(settled, 20, "the turn's reply")
        msgs = await client.messages("art")
        print(f"\n{word}:", [(m["role"], m["text"][:160]) for m in msgs])
        texts = [m["text"] for m in msgs if m["role"] == "assistant"]
        assert any(t.startswith(f"the answer for {word}") for t in texts), msgs
        # the run's spend is the runner's, not the "not run, cost nothing" of a gateway error
        spent, unpriced = await app.store.cost_since(0)
        assert spent == pytest.approx(0.25) and not unpriced, (spent, unpriced)
