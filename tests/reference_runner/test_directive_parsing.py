"""Directives: every one listed, documented and handled; odd arguments never a crash.

(:mod:`reference_runner.directives`.)

``!tools ²`` (a superscript counts as a digit for ``str.isdigit`` but not for ``int``), a
count of thousands of digits (past Python's int-from-text limit) or ``!big-stdout nan``
ended the turn as ``reference runner error: ValueError(...)``: a demo directive mistyped in
the chat looked like a broken gateway.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from reference_support import Runner, argv, once, prompt

from reference_runner import directives
from reference_runner.run import HANDLERS


@pytest.mark.parametrize(
    "text",
    ["!tools ²", "!long ³", "!tools " + "9" * 5000, "!long " + "7" * 5000, "!big-stdout nan"],
    ids=["tools-superscript", "long-superscript", "tools-5000-digits", "long-5000-digits", "nan"],
)
def test_an_odd_directive_argument_still_answers(tmp_path: Path, text: str) -> None:
    runner = Runner(tmp_path, argv())
    try:
        runner.send(prompt(text))
        res = runner.finish()
    finally:
        runner.kill()
    print(res.envelope and {k: res.envelope[k] for k in ("ok", "error") if k in res.envelope})
    assert res.code == 0 and res.envelope is not None and res.envelope["ok"] is True
    assert "This is the jazz-bridge reference runner, not an AI." in res.answer


def test_help_lists_every_directive_and_the_docstring_documents_them(spawn: Any) -> None:
    answer = once(spawn, "!help").answer
    doc = directives.__doc__ or ""
    for name, _, _ in directives.DIRECTIVES:
        assert f"`!{name}" in answer
        assert f"!{name} " in doc
    assert "unknown directive !nope" in once(spawn, "!nope").answer


def test_every_directive_has_one_handler_and_help_is_directives() -> None:
    assert set(HANDLERS) == {name for name, _, _ in directives.DIRECTIVES} | {"help"}
    assert HANDLERS["help"] is HANDLERS["directives"]
