"""An indented code block whose line is longer than a whole part (a log line, a minified
JSON with spaces) stays code in every part: the pieces of the cut line and the code lines
after them are shown as code, never read as prose (``*x*`` in italics, ``_`` eaten)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from bridge.markdown import split_markdown

md = MarkdownIt("commonmark").enable("table")


def code_text(part: str) -> str:
    """The code CommonMark finds in ``part`` (indented or fenced, at any depth)."""
    return "".join(t.content for t in md.parse(part) if t.type in ("code_block", "fence"))


def squeeze(text: str) -> str:
    return "".join(text.split())


def test_a_long_line_of_indented_code_stays_code_in_every_part() -> None:
    long_line = " ".join(f"w{i}_*x*" for i in range(60))
    answer = f"Intro.\n\n    {long_line}\n    short()\n\nAfter."
    parts = split_markdown(answer, 200)
    assert len(parts) > 2
    assert all(len(p) <= 200 for p in parts)
    # every character of the code is code in some part, in order; nothing else is
    assert squeeze("".join(code_text(p) for p in parts)) == squeeze(long_line + "short()")


@settings(max_examples=60, deadline=None, database=None)
@given(
    st.lists(
        st.lists(
            st.sampled_from(["ab", "*x*", "_y_", "`z`", "<t>", "a&b", "|", "~~s~~", "😀"]),
            min_size=1,
            max_size=120,
        ).map(" ".join),
        min_size=1,
        max_size=6,
    ),
    st.integers(min_value=64, max_value=300),
)
def test_indented_code_of_any_line_length_is_all_code(lines: list[str], limit: int) -> None:
    answer = "Text.\n\n" + "\n".join(f"    {line}" for line in lines) + "\n\nEnd."
    parts = split_markdown(answer, limit)
    assert all(len(p) <= limit for p in parts)
    assert squeeze("".join(code_text(p) for p in parts)) == squeeze("".join(lines))
