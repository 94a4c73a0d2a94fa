"""Bad flags end as a failure envelope naming them (:mod:`reference_runner.args`)."""

from __future__ import annotations

from typing import Any

import pytest
from reference_support import prompt


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (("--bogus",), "unrecognized arguments"),
        (("--approval-policy", "yolo"), "invalid choice"),
        (("--events", "tools,nonsense"), "unknown event categories"),
        (("--timeout", "soon"), "--timeout"),
    ],
)
def test_bad_flags_are_a_failure_envelope(spawn: Any, extra: tuple[str, ...], needle: str) -> None:
    res = spawn(prompt("x"), extra=extra).finish()
    assert res.code == 1 and res.envelope is not None and res.envelope["ok"] is False
    assert needle in res.envelope["error"]
