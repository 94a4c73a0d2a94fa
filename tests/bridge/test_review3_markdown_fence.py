"""A top-level code block longer than a message is re-fenced part by part: each part's code
must be exactly the code CommonMark reads in the answer (parsed back with the same parser the
splitter uses), not the raw source lines around it."""

from __future__ import annotations

from markdown_it import MarkdownIt

from bridge.markdown import split_markdown

md = MarkdownIt("commonmark")
LIMIT = 3484  # a Telegram message's share (its surface's max_length less 16)


def code_lines(markdown: str) -> list[str]:
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
    return [line for part in parts for line in code_lines(part)]


def test_an_indented_code_block_keeps_its_indentation_when_split() -> None:
    """A fence indented by three spaces (its code too) came back with every line shifted
    three spaces right: pasted Python failed with 'unexpected indent'."""
    body = "\n".join(f"   def f{i}():\n       return {i}" for i in range(300))
    answer = f"Here it is:\n\n   ```python\n{body}\n   ```\n\nDone."
    assert split_code(answer) == code_lines(answer)


def test_the_last_line_of_a_code_block_the_model_never_closed_is_kept() -> None:
    """An answer cut off inside a ````markdown block (the model ran out of tokens) whose last
    line opens an inner ```python block lost that line: it was taken for the closing fence."""
    body = "\n".join(f"Step {i}: " + "x" * 60 for i in range(80))
    answer = f"````markdown\n{body}\n```python"
    assert split_code(answer)[-1] == "```python"
    assert split_code(answer) == code_lines(answer)


def test_code_that_looks_like_a_fence_once_de_indented_does_not_close_the_block() -> None:
    """In a fence indented three spaces, a code line indented four (`` ```` `` in a Markdown
    example) is code; taken out of the indentation it must not end the reopened block."""
    body = "\n".join(f"line {i} " + "y" * 60 for i in range(80))
    answer = f"   ```md\n{body}\n    ```\n{body}\n   ```"
    assert split_code(answer) == code_lines(answer)
