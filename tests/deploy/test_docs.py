"""README.md and docs/*.md: every relative link names a file of the repository, and every
``#anchor`` a heading of the file it points into.

The documents are parsed with markdown-it-py (the gateway's own Markdown parser), so a path
in a code span or a fenced block is not taken for a link, and reference-style links are
resolved as a renderer resolves them. Anchors are the slugs GitHub gives headings: lower
case, punctuation other than ``-`` and ``_`` dropped, spaces as ``-``, a repeated heading
suffixed ``-1``, ``-2``. The checker is also run on documents made here with a broken link
and a broken anchor, so a checker that never complains fails too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
EXPECTED_DOCS = ("design.md", "runner-contract.md", "http-api.md", "operations.md")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
NOT_IN_SLUG = re.compile(r"[^\w\- ]")

PARSER = MarkdownIt("commonmark").enable("table")


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def _walk(tokens: list[Token]) -> Iterator[Token]:
    for token in tokens:
        yield token
        if token.children:
            yield from _walk(token.children)


def _plain(inline: Token) -> str:
    """A heading's text as rendered: code spans without their backticks, links as their text."""
    return "".join(
        child.content for child in inline.children or [] if child.type in ("text", "code_inline")
    )


def slug(text: str) -> str:
    return NOT_IN_SLUG.sub("", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of ``path``'s headings."""
    tokens = PARSER.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    seen: dict[str, int] = {}
    for i, token in enumerate(tokens):
        if token.type != "heading_open":
            continue
        base = slug(_plain(tokens[i + 1]))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[str]:
    """Every link and image target of ``path``, in order."""
    tokens = PARSER.parse(path.read_text(encoding="utf-8"))
    targets = []
    for token in _walk(tokens):
        if token.type == "link_open":
            targets.append(str(token.attrs.get("href", "")))
        elif token.type == "image":
            targets.append(str(token.attrs.get("src", "")))
    return targets


def broken_links(path: Path, repo: Path) -> list[str]:
    """What is wrong with ``path``'s relative links, one line each (none when all resolve)."""
    problems = []
    for target in links(path):
        if not target or SCHEME.match(target) or target.startswith("//"):
            continue  # https:, mailto:, <http://...>: not the repository's
        parts = urlsplit(target)
        where = path if not parts.path else (path.parent / unquote(parts.path)).resolve()
        if not where.is_relative_to(repo.resolve()):
            problems.append(f"{path.name}: {target}: leaves the repository")
            continue
        if not where.exists():
            problems.append(f"{path.name}: {target}: {where.relative_to(repo)} does not exist")
            continue
        if parts.fragment:
            if where.suffix != ".md" or not where.is_file():
                problems.append(f"{path.name}: {target}: an anchor into a file that is no document")
            elif unquote(parts.fragment) not in anchors(where):
                problems.append(
                    f"{path.name}: {target}: no heading #{parts.fragment} in "
                    f"{where.relative_to(repo)}"
                )
    return problems


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(doc: Path) -> None:
    assert broken_links(doc, REPO) == []


def test_the_docs_exist_and_the_readme_links_each() -> None:
    readme = set(links(REPO / "README.md"))
    for name in EXPECTED_DOCS:
        assert (DOCS / name).is_file(), name
        assert f"docs/{name}" in readme, f"README.md does not link docs/{name}"


def test_a_missing_file_and_a_missing_anchor_are_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# Title\n\n## Some `code`: here\n\n## Title\n")
    doc = tmp_path / "docs" / "a.md"
    doc.write_text(
        "# A\n\n"
        "[ok](b.md) [ok anchor](b.md#some-code-here) [repeated](b.md#title-1) [self](#a)\n"
        "[gone](missing.md) [no heading](b.md#nowhere) [up](../../outside.md)\n"
        "[web](https://example.com/x.md) `[in code](missing-too.md)`\n\n"
        "```\n[fenced](missing-three.md)\n```\n"
    )
    problems = broken_links(doc, tmp_path)
    assert problems == [
        "a.md: missing.md: docs/missing.md does not exist",
        "a.md: b.md#nowhere: no heading #nowhere in docs/b.md",
        "a.md: ../../outside.md: leaves the repository",
    ]


def test_slugs_follow_githubs_rule() -> None:
    assert slug("Operator view: `GET /ops`") == "operator-view-get-ops"
    assert slug("Released CLI 0.14.2") == "released-cli-0142"
    assert slug("What every request goes through") == "what-every-request-goes-through"
