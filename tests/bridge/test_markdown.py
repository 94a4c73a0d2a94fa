"""Splitting answers to a surface's limit: every part within it, no code block cut open,
nothing lost (parsed back with the same CommonMark parser the splitter uses)."""

from __future__ import annotations

from markdown_it import MarkdownIt

from bridge.markdown import split_markdown

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
    assert parts[1].startswith("   ```python\n"), parts[1][:40]  # its language kept
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
