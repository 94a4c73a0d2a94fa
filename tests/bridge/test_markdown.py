"""Splitting answers to a surface's limit: every part within it, no code block cut open,
nothing lost (parsed back with markdown-it-py, a second CommonMark reader, not the one
the splitter uses).

A top-level code block longer than a message is re-fenced part by part: each part's code
must be exactly the code CommonMark reads in the answer, not the raw source lines around
it. An indented code block whose line is longer than a whole part (a log line, a minified
JSON with spaces) stays code in every part: the pieces of the cut line and the code lines
after them are shown as code, never read as prose (``*x*`` in italics, ``_`` eaten)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from trace_support import lines_run

import bridge.markdown
from bridge.markdown import blocks, inline, nested, references, split_markdown, tree, units

md = MarkdownIt("commonmark")


def code_of(part: str) -> list[str]:
    """The code lines CommonMark finds in ``part`` (fenced, at any depth)."""
    return [
        line for tok in md.parse(part) if tok.type == "fence" for line in tok.content.splitlines()
    ]


def fences_closed(part: str) -> bool:
    """Every fence in ``part`` has its closing line (an unclosed one runs to the end)."""
    lines = part.split("\n")
    for tok in md.parse(part):
        if tok.type == "fence" and tok.map is not None:
            closer = lines[tok.map[1] - 1].strip().lstrip(">").strip()
            if tok.map[1] - tok.map[0] < 2 or not closer.startswith(tok.markup):
                return False
    return True


def check(text: str, limit: int, code: list[str]) -> list[str]:
    parts = split_markdown(text, limit)
    assert len(parts) > 1
    assert all(len(p) <= limit for p in parts), [len(p) for p in parts]
    assert all(fences_closed(p) for p in parts), parts
    assert [line for p in parts for line in code_of(p)] == code  # all of it, in order, as code
    return parts


def test_a_code_block_in_a_list_item_is_closed_and_reopened_at_a_cut() -> None:
    code = [
        f"def f{i}(*args, **kwargs): return __import__('os').getcwd()  # {i}" for i in range(60)
    ]
    text = (
        "1. Save this as `tool.py`:\n\n   ```python\n"
        + "\n".join(f"   {line}" for line in code)
        + "\n   ```\n2. Run it."
    )
    parts = check(text, 1500, code)
    assert parts[1].startswith("```python\n"), parts[1][:40]  # its language kept, a fence
    assert "2. Run it." in parts[-1]


def test_a_code_block_in_a_quote_is_reopened_inside_the_quote() -> None:
    code = [f"line {i}: " + "x" * 40 for i in range(80)]
    text = "> Quoted code:\n>\n> ```sh\n" + "\n".join(f"> {line}" for line in code) + "\n> ```"
    parts = check(text, 1200, code)
    assert all(p.startswith(">") for p in parts)


def test_long_top_level_code_and_prose_still_split_as_before() -> None:
    code = [f"print({i})" for i in range(600)]
    text = "Intro paragraph.\n\n```python\n" + "\n".join(code) + "\n```\n\n" + "word " * 900
    check(text, 2000, code)


def test_a_code_block_in_a_nested_list_reopens_as_a_real_fence() -> None:
    code = [f"x = {i}  # <tag> & `b` *s*" for i in range(400)]
    text = "- a\n  - b\n    ```py\n" + "\n".join(f"    {c}" for c in code) + "\n    ```\n  - c"
    parts = check(text, 3484, code)  # every line is still code: none reads as a paragraph
    for part in parts[1:]:
        assert part.startswith("```py\n"), part[:40]  # a fence, not indented code
        assert not part.split("\n")[1].startswith(" "), part[:60]  # body de-indented alike
    # the item after the block keeps its depth: nested under an item, not top level
    tail = md.parse(parts[-1][parts[-1].rindex("```") + 3 :])
    assert [t.type for t in tail if t.type == "bullet_list_open"] == ["bullet_list_open"] * 2


def test_a_code_block_in_a_quoted_list_reopens_inside_the_quote() -> None:
    code = [f"line {i}: " + "y" * 40 for i in range(80)]
    text = "> - item\n>   ```sh\n" + "\n".join(f">   {c}" for c in code) + "\n>   ```"
    parts = check(text, 1200, code)
    assert all(p.startswith(">") for p in parts)
    assert all(p.startswith("> ```sh\n") for p in parts[1:]), [p[:20] for p in parts]


def test_a_nested_item_at_the_start_of_a_part_keeps_its_depth() -> None:
    text = "\n".join(f"- item {i}\n  - sub {i} with `code`\n    1. deep {i}" for i in range(400))
    for part in split_markdown(text, 3484):
        first = part.split("\n")[0]
        assert first.startswith(("- ", "1. ")), first  # never indented code, never orphaned
        if not first.startswith("- item"):  # an ancestor stands in for the item cut off
            assert first == "- …", part[:60]
            assert any(t.type == "bullet_list_open" and t.level > 0 for t in md.parse(part))


def items_of(part: str) -> list[tuple[int, int, str]]:
    """Each list item CommonMark finds in ``part``: its depth, its number (0 in a bullet
    list) and its first paragraph's text."""
    found: list[tuple[int, int, str]] = []
    numbers: list[int] = []  # the next number of each list open around a token
    for k, tok in enumerate(tokens := md.parse(part)):
        if tok.type in ("ordered_list_open", "bullet_list_open"):
            numbers.append(int(tok.attrGet("start") or 1) if tok.type[0] == "o" else 0)
        elif tok.type in ("ordered_list_close", "bullet_list_close"):
            numbers.pop()
        elif tok.type == "list_item_open":
            text = tokens[k + 2].content if tokens[k + 1].type == "paragraph_open" else ""
            found.append((len(numbers), numbers[-1], text))
            numbers[-1] += 1 if numbers[-1] else 0
    return found


def test_nested_items_numbered_from_other_than_1_keep_their_depth_and_code_at_a_cut() -> None:
    """A part starting inside a list numbered from 10 had ``10) …`` then ``    5) …``: an
    item numbered other than 1 cannot interrupt a paragraph, so it read as more of the
    ``…`` text, and the code block under it as indented code showing its backticks."""

    def item(n: int) -> str:
        pad = " " * (7 + len(f"{n}) "))
        return f"       {n}) run step {n}:\n\n{pad}```sh\n{pad}echo {n}\n{pad}```"

    text = (
        "10) Deploy:\n\n    5) On the server:\n\n"
        + "\n".join(item(n) for n in range(7, 80))
        + "\n11) Done."
    )
    parts = check(text, 600, [f"echo {n}" for n in range(7, 80)])
    assert not [t for p in parts for t in md.parse(p) if t.type == "code_block"], parts
    steps = [it for p in parts for it in items_of(p) if it[2].startswith("run step")]
    assert steps == [(3, n, f"run step {n}:") for n in range(7, 80)]  # numbered as written
    for part in parts[1:]:
        assert items_of(part)[:2] == [(1, 10, "…"), (2, 5, "…")], part[:80]
    assert items_of(parts[-1])[-1] == (1, 11, "Done.")


def test_a_long_paragraph_is_not_cut_inside_a_link_bold_or_code() -> None:
    for span in (
        "[the documentation page for this](https://example.com/docs)",
        "**the documentation page for this**",
        "`the documentation page for this`",
    ):
        text = "word " * 694 + "see " + span + " " + "tail " * 200
        parts = split_markdown(text, 3484)
        assert len(parts) == 2
        assert all(len(p) <= 3484 for p in parts)
        assert span in parts[0] or span in parts[1], [p[-60:] for p in parts]
        assert " ".join(parts).split() == text.split()


def test_a_span_longer_than_a_part_is_still_cut() -> None:
    text = "**" + "bold words " * 2000 + "**"
    parts = split_markdown(text, 3484)
    assert all(len(p) <= 3484 for p in parts) and len(parts) > 1
    assert " ".join(parts).split() == text.split()


def test_a_long_paragraph_is_not_cut_where_the_next_part_would_start_a_list() -> None:
    text = ("word " * 693 + "a - b ") + "tail " * 300
    for part in split_markdown(text, 3484):
        assert not part.startswith(("- ", "+ ", "* ", "#", ">")), part[:20]


def test_a_long_table_repeats_its_header_on_every_part() -> None:
    head = "| name | value |\n|---|---|"
    text = head + "\n" + "\n".join(f"| row {i} | value {i} |" for i in range(800))
    parts = split_markdown(text, 3484)
    assert len(parts) > 1 and all(len(p) <= 3484 for p in parts)
    assert all(p.startswith(head + "\n| row ") for p in parts), [p[:40] for p in parts]
    rows = [line for p in parts for line in p.split("\n")[2:]]
    assert rows == text.split("\n")[2:]


def test_a_long_indented_code_block_keeps_its_indentation() -> None:
    code = [f"code line {i} <x>" for i in range(700)]
    text = "intro\n\n" + "\n".join(f"    {c}" for c in code)
    parts = split_markdown(text, 3484)
    found = [
        line
        for p in parts
        for t in md.parse(p)
        if t.type == "code_block"
        for line in t.content.splitlines()
    ]
    assert found == code


def test_any_line_break_is_a_line_break() -> None:
    """CRLF and lone CR (old Mac, some tools' output) split like LF, nothing lost."""
    body = "w " * 2000
    for newline in ("\r\n", "\r"):
        text = newline.join(["a", "b", "- x", "", body])  # a list, then a long paragraph
        parts = split_markdown(text, 3484)
        assert all(len(p) <= 3484 for p in parts)
        assert "".join(parts).replace("\n", "").replace(" ", "") == ("ab-x" + body.replace(" ", ""))
        assert "\r" not in "".join(parts)


LONG_INPUTS: dict[str, Callable[[int], str]] = {
    "a flat list": lambda n: "\n".join(f"- item {i} with a few words" for i in range(n)),
    "a nested list": lambda n: "\n".join("  " * (i % 6) + f"- item {i} words" for i in range(n)),
    "many short lists": lambda n: "\n\n".join(f"- item {i}\n\nprose {i}" for i in range(n)),
    "a long line of spans": lambda n: " ".join(f"`a{i}` *b{i}* [l](u{i})" for i in range(n)),
    "emphasis that never closes": lambda n: " ".join(["*x"] * n + ["y**"] * n),
    "a table": lambda n: "| a | b |\n|---|---|\n" + "\n".join(f"| {i} | x |" for i in range(n)),
}


@pytest.mark.parametrize("shape", LONG_INPUTS)
def test_splitting_does_work_in_proportion_to_the_answer(shape: str) -> None:
    """Twice the answer is about twice the work, not four times: a 1 MB list took 23 s
    (every line looked at every list item of the answer), holding the event loop."""
    make = LONG_INPUTS[shape]
    small, large = (
        sum(
            lines_run(functools.partial(split_markdown, make(n), 500), module)
            for module in (bridge.markdown, blocks, inline, nested, references, tree, units)
        )
        for n in (400, 800)
    )
    assert large / small < 2.5, (small, large)


@st.composite
def nested_answers(draw: st.DrawFn) -> tuple[str, int, int]:
    """A list nested up to some depth (in up to three quotes), code blocks in its items
    (some opened on the item's own line, some closed by a longer fence); with a limit."""
    depth = draw(st.integers(1, 16))
    quote = "> " * draw(st.integers(0, 3))
    limit = draw(st.sampled_from([64, 80, 120, 200, 400, 1000]))
    lines: list[str] = []
    widths: list[int] = []  # the content offset each open item adds
    for i in range(draw(st.integers(1, 24))):
        widths = widths[: draw(st.integers(0, min(len(widths), depth - 1)))]
        indent = " " * sum(widths)
        marker = draw(st.sampled_from(["-", "*", "1.", "1)"]))
        widths.append(len(marker) + 1)
        inner = indent + " " * (len(marker) + 1)
        words = " ".join("w" * n for n in draw(st.lists(st.integers(1, 8), max_size=30)))
        fence = draw(st.sampled_from(["", "", "```", "~~~"]))
        on_item = fence == "```" and draw(st.booleans())
        info = draw(st.sampled_from(["", "py", "x" * 30]))
        lines.append(f"{indent}{marker} " + (f"{fence}{info}" if on_item else f"item {i} {words}"))
        if fence:
            if not on_item:
                lines.append(f"{inner}{fence}{info}")
            for n in draw(st.lists(st.integers(0, 140), max_size=8)):
                lines.append(f"{inner}code {n} " + "x" * n)
            lines.append(inner + fence + draw(st.sampled_from(["", fence[0]])))
    return "\n".join((quote + line).rstrip() for line in lines), limit, depth


@settings(max_examples=300, deadline=None, database=None)
@given(nested_answers())
def test_every_part_is_within_the_limit_at_any_depth(answer: tuple[str, int, int]) -> None:
    """A part never goes over the limit, however deep the nesting: a code block opened at
    the end of a part left no room for its closing line, and ancestors repeated at the top
    of a part with the line after them could go over. Code blocks stay closed and keep
    their code (cut into lines only where a line is longer than a part)."""
    text, limit, depth = answer
    parts = split_markdown(text, limit)
    assert all(len(p) <= limit for p in parts), [len(p) for p in parts]
    if depth <= 8 and fences_closed(text):  # deeper than that, a 64-character part is all
        # prefix: the item context may be flattened, but no code goes missing
        assert all(fences_closed(p) for p in parts), parts
        whole = "".join(code_of(text)).replace(" ", "")
        assert "".join(line for p in parts for line in code_of(p)).replace(" ", "") == whole


@pytest.mark.parametrize("depth", range(1, 13))
def test_a_code_block_opened_at_the_end_of_a_part_keeps_room_for_its_closing_line(
    depth: int,
) -> None:
    indent = "  " * depth
    items = "\n".join("  " * d + f"- level {d}" for d in range(depth + 1))
    for filler in range(0, 200, 7):  # the opener lands at every place near the end of a part
        text = f"{items} " + "w" * filler + f"\n{indent}  ```py\n{indent}  x = 1\n{indent}  ```"
        for limit in (64, 100, 200):
            parts = split_markdown(text, limit)
            assert all(len(p) <= limit for p in parts), (filler, limit, [len(p) for p in parts])


# -- top-level code blocks --------------------------------------------------------------

LIMIT = 3484  # a Telegram message's share (its surface's max_length less 16)


def fence_code_lines(markdown: str) -> list[str]:
    """The lines of every fenced code block CommonMark finds in ``markdown``."""
    return [
        line
        for tok in md.parse(markdown)
        if tok.type == "fence"
        for line in tok.content.splitlines()
    ]


def split_code(markdown: str) -> list[str]:
    parts = split_markdown(markdown, LIMIT)
    assert len(parts) > 1 and all(len(p) <= LIMIT for p in parts)
    return [line for part in parts for line in fence_code_lines(part)]


def test_an_indented_code_block_keeps_its_indentation_when_split() -> None:
    """A fence indented by three spaces (its code too) came back with every line shifted
    three spaces right: pasted Python failed with 'unexpected indent'."""
    body = "\n".join(f"   def f{i}():\n       return {i}" for i in range(300))
    answer = f"Here it is:\n\n   ```python\n{body}\n   ```\n\nDone."
    assert split_code(answer) == fence_code_lines(answer)


def test_the_last_line_of_a_code_block_the_model_never_closed_is_kept() -> None:
    """An answer cut off inside a ````markdown block (the model ran out of tokens) whose last
    line opens an inner ```python block lost that line: it was taken for the closing fence."""
    body = "\n".join(f"Step {i}: " + "x" * 60 for i in range(80))
    answer = f"````markdown\n{body}\n```python"
    assert split_code(answer)[-1] == "```python"
    assert split_code(answer) == fence_code_lines(answer)


def test_code_that_looks_like_a_fence_once_de_indented_does_not_close_the_block() -> None:
    """In a fence indented three spaces, a code line indented four (`` ```` `` in a Markdown
    example) is code; taken out of the indentation it must not end the reopened block."""
    body = "\n".join(f"line {i} " + "y" * 60 for i in range(80))
    answer = f"   ```md\n{body}\n    ```\n{body}\n   ```"
    assert split_code(answer) == fence_code_lines(answer)


# -- indented code with lines longer than a part ---------------------------------------

md_tables = MarkdownIt("commonmark").enable("table")


def code_text(part: str) -> str:
    """The code CommonMark finds in ``part`` (indented or fenced, at any depth)."""
    return "".join(t.content for t in md_tables.parse(part) if t.type in ("code_block", "fence"))


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


@pytest.mark.parametrize("marks", ["> ", "> > ", "- ", "1. ", "> - "])
def test_a_long_word_in_a_quote_or_item_is_not_cut_off_its_marks(marks: str) -> None:
    """Its only space is the one after its marks: a part of the marks alone would show a
    literal ">" (or an empty item). Every part has text after its marks."""
    parts = split_markdown(marks + "a" * 100, 64, "utf16")
    assert len(parts) > 1 and all(len(p) <= 64 for p in parts), parts
    for part in parts:
        assert part.lstrip(" >-1.").strip(), parts
