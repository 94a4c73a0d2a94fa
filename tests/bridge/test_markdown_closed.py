"""An answer that ends inside a code block the model never closed (cut off by its token
limit) gets its block closed before the run's summary line: the summary read as one more
line of code before."""

from __future__ import annotations

import pytest
from markdown_it import MarkdownIt

from bridge.markdown import closed

SUMMARY = "\n\n_✓ 2 tools · 1,234 tokens · $0.01 · 3.2s_"


def _summary_is_text(markdown: str) -> bool:
    tokens = MarkdownIt("commonmark").parse(markdown)
    inline = [c for t in tokens if t.type == "inline" for c in t.children or []]
    return any(t.type == "em_open" for t in inline) and not any(
        t.type == "fence" and "tokens" in t.content for t in tokens
    )


@pytest.mark.parametrize(
    "answer",
    [
        "Here is the script:\n\n```python\nprint('cut')",
        "Here:\n\n````markdown\n```python\nx = 1\n```",  # an inner fence does not close it
        "~~~\nstill code\n",
        "```\n",
    ],
)
def test_the_summary_after_an_unclosed_block_is_not_code(answer: str) -> None:
    assert not _summary_is_text(answer + SUMMARY), "the case no longer shows the fault"
    assert _summary_is_text(closed(answer) + SUMMARY), closed(answer)


@pytest.mark.parametrize(
    "answer",
    ["plain text", "```py\nx\n```", "- a list\n  ```\n  code in an item", "```\nx\n`````"],
)
def test_an_answer_without_an_open_block_is_left_as_it_is(answer: str) -> None:
    assert closed(answer) == answer
