"""Events go to stderr only for the categories ``--events`` asks for, and some always come.

(:mod:`reference_runner.output`.)
"""

from __future__ import annotations

import json
from typing import Any

from reference_support import once


def test_events_are_filtered_by_category(spawn: Any) -> None:
    res = once(spawn, "!tools 2 !subagent !cost 0.5", events="tools")
    types = set(res.types)
    assert {"tools_detected", "tool_call", "tool_execution_start", "tool_execution_complete"} <= (
        types
    )
    assert {"stream_start", "usage_update", "complete"} <= types  # usage always comes
    assert not types & {"thinking_start", "subagent_start", "text_chunk", "run_spend"}
    env = res.envelope
    assert env is not None and [c["name"] for c in env["toolCalls"]] == ["read_file", "bash"]
    assert all(isinstance(json.loads(c["arguments"]), dict) for c in env["toolCalls"])
    assert env["costUSD"] == 0.5 and env["costKnown"] is True


def test_every_category_when_asked(spawn: Any) -> None:
    res = once(spawn, "!tools 1 !subagent !cost 0.25")
    types = set(res.types)
    assert {"thinking_start", "thinking_chunk", "thinking_complete"} <= types
    assert {"subagent_start", "subagent_complete", "text_start", "text_chunk"} <= types
    (spend,) = [e for e in res.events if e["type"] == "run_spend"]
    assert spend["costUSD"] == 0.25 and spend["costKnown"] is True
