"""A prompt nobody answers within ``limits.prompt_wait_s`` is declined for the agent, once.

A run waiting for a person holds one of the gateway's run slots for as long as nobody
answers (its timeout is paused): with the default four slots, four unanswered approvals
stopped every other conversation. Now the agent hears "rejected"/"declined" after the
wait, its answer arrives, the slot is free, and the prompt's buttons say it expired. A
prompt whose message cannot be delivered is declined to the runner once, not once by its
expiry and again when its delivery is given up.

The real gateway with the web chat and the bundled reference runner, or the tests' plain
surface with its platform down and a runner of the test's own (real subprocesses); every
wait is bounded.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import plain_surface
import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway, use_reference_runner, wait_until

from bridge.engine import delivery
from bridge.model import Inbound
from bridge.runner.command import shared_interpreter


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    use_reference_runner(e, fake_dir)
    e["JAZZ_BRIDGE_LIMITS__PROMPT_WAIT_S"] = "1"
    e["JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS"] = "1"
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_an_unanswered_approval_is_rejected_and_frees_the_slot(
    env: dict[str, str],
) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("asker", "!approve deploy")
        prompt = (await client.wait_role("asker", "prompt"))[0]
        await client.post("other", "hello from another conversation")  # waits for the slot
        answer = (await client.wait_role("asker", "assistant"))[0]["text"]
        assert "deploy was declined" in answer, answer
        other = (await client.wait_role("other", "assistant"))[0]["text"]
        assert "hello from another conversation" in other, other
        shown = [m for m in await client.messages("asker") if m["role"] == "prompt"]
        assert "⌛ expired" in shown[0]["text"] and not shown[0]["choices"], shown
        token = prompt["choices"][0]["token"]
        status, _ = await client.press("asker", token, "ada")
        assert status == 410  # expired: pressing it now changes nothing


async def test_an_unanswered_question_is_declined(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("q", "!ask favourite colour?")
        await client.wait_role("q", "prompt")
        answer = (await client.wait_role("q", "assistant"))[0]["text"]
        assert "the question was declined" in answer, answer


# -- a prompt whose message cannot be delivered ----------------------------------------------


RUNNER = r"""
import json, os, select, sys, time

FAKE_DIR = os.environ["FAKE_DIR"]
LOG = os.path.join(FAKE_DIR, f"frames-{os.getpid()}.log")


def log(obj):
    with open(LOG, "a") as fh:
        fh.write(json.dumps(obj) + "\n")


def ask(call):
    sys.stderr.write(json.dumps({"type": "approval_required", "toolCallId": call,
                                 "toolName": "bash", "message": "run " + call}) + "\n")
    sys.stderr.flush()


def frame(deadline):
    while time.monotonic() < deadline:
        ready, _, _ = select.select([sys.stdin], [], [], 0.5)
        if ready:
            line = sys.stdin.readline()
            if not line:
                return None
            if line.strip():
                return json.loads(line)
    return None


json.loads(sys.stdin.readline())  # the prompt
log({"event": "start"})
deadline = time.monotonic() + 60
ask("call-1")
first = frame(deadline)
log({"event": "frame", "frame": first})
# a second prompt: the gateway reads its event only once it is done with call-1's
# (its delivery given up, anything it does about that written to stdin before)
ask("call-2")
while True:
    got = frame(deadline)
    log({"event": "frame", "frame": got})
    if got is None or got.get("toolCallId") == "call-2":
        break
print(json.dumps({"ok": True, "answer": "done", "costUSD": 0.0, "costKnown": True,
                  "tokenUsage": {"promptTokens": 1, "completionTokens": 1, "totalTokens": 2},
                  "toolCalls": [], "artifacts": []}), flush=True)
log({"event": "end"})
"""


@pytest.fixture
def unreachable_env(
    tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    runner = fake_dir / "frames_runner.py"
    runner.write_text(RUNNER)
    os.chmod(runner, 0o755)
    e["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps([shared_interpreter(), str(runner)])
    e["JAZZ_BRIDGE_LIMITS__PROMPT_WAIT_S"] = "0.3"
    # the platform is down for longer than the prompt's wait and the deliverer's patience
    monkeypatch.setattr(plain_surface, "UNREACHABLE_AT_START", True)
    monkeypatch.setattr(delivery, "MAX_BACKOFF_S", 0.01)
    monkeypatch.setattr(delivery, "SLOW_BACKOFF_S", 0.05)
    monkeypatch.setattr(delivery, "PATIENCE_S", 1.0)
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def _frames(fake_dir: Path) -> list[dict[str, object]]:
    return [
        json.loads(line)
        for path in fake_dir.glob("frames-*.log")
        for line in path.read_text().splitlines()
        if line.strip()
    ]


async def test_a_prompt_that_cannot_be_shown_is_answered_to_the_runner_once(
    unreachable_env: dict[str, str], fake_dir: Path
) -> None:
    """A prompt is answered to the runner once, even when its message cannot be delivered.

    ``_show_prompt`` starts the prompt's expiry timer (``limits.prompt_wait_s``) before it
    delivers the prompt's message, and delivery now keeps retrying a transient failure until
    the reply is ``PATIENCE_S`` old (an hour). A platform that is down longer than the prompt's
    wait therefore sees both fire for the same prompt: the expiry declines it to the runner
    ("rejected"), and when delivery gives up, ``_decline_unshown`` declines it to the runner a
    second time (it ignores that ``resolve_prompt`` found the prompt already answered). The
    runner gets two ``approval_decision`` frames for one ``toolCallId``."""
    async with running_gateway(unreachable_env, {"plain": plain_surface.SPEC}) as (app, _):
        assert app.engine is not None
        await app.engine.submit(
            Inbound(
                platform="plain",
                event_id="e1",
                thread_key="plain:down",
                sender_id="u1",
                sender_name="Ada",
                text="deploy",
            )
        )
        await wait_until(
            lambda: any(f.get("event") == "end" for f in _frames(fake_dir)),
            30,
            "the runner to get an answer to both of its prompts",
        )
    frames = [f["frame"] for f in _frames(fake_dir) if f.get("event") == "frame"]
    to_first = [f for f in frames if isinstance(f, dict) and f.get("toolCallId") == "call-1"]
    assert len(to_first) == 1, (
        f"the runner was answered {len(to_first)} times for one approval: {to_first}"
    )
