"""A runner that asks for one approval, as the test writes it, then answers with the verdict.

The prompt-expiry tests of both platforms use it: :func:`use_approval_runner` installs it
in a gateway's environment (prompts expire after a second), :func:`ask` says what it asks.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bridge.runner.command import shared_interpreter

RUNNER = """\
import json, os, sys
sys.stdin.readline()
with open(os.path.join(os.environ["FAKE_DIR"], "approval.json")) as fh:
    asked = json.load(fh)
event = {"type": "approval_required", "toolCallId": "call-1", **asked}
sys.stderr.write(json.dumps(event) + "\\n")
sys.stderr.flush()
line = sys.stdin.readline()
verdict = "approved" if line.strip() and json.loads(line).get("approved") else "rejected"
envelope = {"ok": True, "answer": "the patch was " + verdict, "costUSD": 0.0,
            "costKnown": False, "toolCalls": [], "artifacts": [],
            "tokenUsage": {"promptTokens": 1, "completionTokens": 1, "totalTokens": 2}}
sys.stdout.write(json.dumps(envelope) + "\\n")
"""

# how an expired approval's message ends: the reason, whole
REASON = "the agent was told rejected."


def use_approval_runner(env: dict[str, str], fake_dir: Path) -> None:
    """Run the approval runner (a copy every account can read); prompts wait one second."""
    runner = fake_dir / "approval_runner.py"
    runner.write_text(RUNNER)
    os.chmod(runner, 0o755)
    env["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps([shared_interpreter(), str(runner)])
    env["JAZZ_BRIDGE_LIMITS__PROMPT_WAIT_S"] = "1"


def ask(fake_dir: Path, payload: dict[str, Any]) -> None:
    """What the next run asks approval for (``toolName``, ``message``, ``preview``)."""
    (fake_dir / "approval.json").write_text(json.dumps(payload))
    os.chmod(fake_dir / "approval.json", 0o644)
