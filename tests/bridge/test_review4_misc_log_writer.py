"""Review: one log call with an extra field that cannot be turned into text stopped the
gateway's log for good.

``serve`` writes its log lines on a writer thread (:func:`bridge.logs.off_thread`); the
secret masker runs there, on each handler, and turns every ``extra`` value into text. A value
whose ``str()`` raised (or a structure holding itself) raised out of the masker, which killed
the writer thread: that line and every later one, for as long as the gateway ran, were
never written, without a word anywhere.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from bridge import logs


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text for this one")

    __repr__ = __str__


@pytest.fixture
def logger() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    logs.install([handler], fmt="json", environ={})
    queued = logs.off_thread([handler])
    lg = logging.getLogger("jazz_bridge.review4.writer")
    lg.handlers[:] = [queued]
    lg.propagate = False
    lg.setLevel(logging.INFO)
    yield lg, out
    logs.stop_writer()
    lg.handlers[:] = []


def _lines(out: io.StringIO) -> list[dict[str, object]]:
    logs.stop_writer()  # every queued line written (bounded: the writer's own join)
    return [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]


@pytest.mark.parametrize("kind", ["unprintable", "self-holding"])
def test_a_bad_extra_value_does_not_silence_the_log(
    logger: tuple[logging.Logger, io.StringIO], kind: str
) -> None:
    lg, out = logger
    value: object
    if kind == "unprintable":
        value = Unprintable()
    else:
        loop: list[object] = []
        loop.append(loop)
        value = loop
    lg.info("before")
    lg.info("odd extra", extra={"thing": value, "thread_key": "web:demo"})
    lg.info("after")
    by_msg = {str(r["msg"]): r for r in _lines(out)}
    assert "after" in by_msg, f"the log stopped: {sorted(by_msg)}"
    assert "odd extra" in by_msg  # the line itself is kept, its other fields intact
    assert by_msg["odd extra"]["thread_key"] == "web:demo"
