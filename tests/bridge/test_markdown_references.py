"""Reference-style links (``[the docs][1]`` with ``[1]: https://...`` at the end, as models
write citations) in an answer longer than a message: every part is rendered on its own, so a
part must carry the definitions its links use (parsed back with markdown-it-py, a second
CommonMark reader)."""

from __future__ import annotations

from markdown_it import MarkdownIt

from bridge.markdown import split_markdown

md = MarkdownIt("commonmark").enable("table")
LIMIT = 3484  # a Telegram message's share (its surface's max_length less 16)


def hrefs(markdown: str) -> list[str]:
    """The targets of the links CommonMark finds in ``markdown``, in order."""
    return [
        str(child.attrGet("href"))
        for tok in md.parse(markdown)
        if tok.type == "inline"
        for child in tok.children or []
        if child.type == "link_open"
    ]


SECTION = (LIMIT - 2) // 2 - 10  # two sections fill a part, with no room for the notes


def section(i: int) -> str:
    head = f"Section {i:02d} relies on [the reference {i % 3}][ref{i % 3}]."
    return head + " word" * ((SECTION - len(head)) // 5)


def cited_answer(sections: int) -> str:
    body = "\n\n".join(section(i) for i in range(sections))
    notes = "\n".join(f'[ref{n}]: https://example.com/docs/{n} "Doc {n}"' for n in range(3))
    return f"{body}\n\n{notes}"


def test_every_part_keeps_the_links_it_cites() -> None:
    """The links of every part but the last showed as literal ``[the reference 0][ref0]``:
    their definitions were in the last part only."""
    answer = cited_answer(30)
    parts = split_markdown(answer, LIMIT)
    assert len(parts) > 1 and all(len(p) <= LIMIT for p in parts), [len(p) for p in parts]
    assert [h for p in parts for h in hrefs(p)] == hrefs(answer)


def test_no_part_is_only_link_definitions() -> None:
    """A part holding only the definitions renders as nothing: an empty message."""
    answer = cited_answer(30)
    for part in split_markdown(answer, LIMIT):
        assert md.parse(part), part
