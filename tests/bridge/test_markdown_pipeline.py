"""Splitting then rendering is rendering then splitting, for every surface.

The property, for generated Markdown (paragraphs, emphasis, inline code, ``$math$``, links
and reference links, fenced code, nested lists with code in their items, quotes, long
words, emoji and other astral characters) and a limit:

* every part of ``split_markdown(answer, limit, unit)`` is at most ``limit`` in the
  surface's unit (UTF-16 code units for Telegram, characters for Slack and the web chat);
* each part rendered on its own (Telegram: ``render``, one message, within the
  limit too; Slack and the web chat: the Markdown as the parser reads it) shows, in order,
  exactly what the whole answer rendered at once shows: the same visible characters, each
  with the same formatting (entities or tags over it, a link's target, a code block's
  language). "The same" is modulo the split boundaries: whitespace is not compared (a cut
  turns a space or soft break into a message break, a cut code line into two lines), and
  the ``…`` items that stand in for the ancestors of a list item continued from the part
  before are not part of the answer's text. So nothing is lost, repeated or moved, and no
  construct is cut open: a span cut open would show its markers as text (``$``, ``*``) or
  lose its formatting, a code block cut open would turn the text after it into code;
* Telegram's own ``render`` of a long answer (split on the Markdown tree when its
  rendering is over the limit) satisfies the same, each message within the limit.

Spans are generated shorter than the smallest limit: a hard cut inside a span longer than
a whole part is the documented exception.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pyromark
import telegramify_markdown.converter
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from adapters.slack.text import _markdown as slack_markdown
from adapters.telegram.render import Part, convert, render
from bridge.markdown import PARSE_OPTIONS, UTF16, split_markdown, utf16_len

Styled = list[tuple[str, tuple[Any, ...]]]  # visible characters, each with its formatting

# é is one UTF-16 unit; an emoji and MATHEMATICAL BOLD SMALL W two each
LETTERS = (
    "abcdwxyz\N{LATIN SMALL LETTER E WITH ACUTE}\N{GRINNING FACE}\N{MATHEMATICAL BOLD SMALL W}"
)
word = st.text(alphabet=LETTERS, min_size=1, max_size=6)
long_word = st.text(alphabet=LETTERS, min_size=40, max_size=150)
words = st.lists(word, min_size=1, max_size=3).map(" ".join)


@st.composite
def inline(draw: st.DrawFn) -> str:
    kind = draw(
        st.sampled_from(
            ["w", "w", "w", "long", "em", "strong", "del", "code"] * 2 + ["math", "link", "ref"]
        )
    )
    text = draw(words)
    return {
        "w": text,
        "long": draw(long_word),
        "em": f"*{text}*",
        "strong": f"**{text}**",
        "del": f"~~{text}~~",
        "code": f"`{text}`",
        "math": f"${text}$",
        "link": f"[{text}](https://example.com/{draw(st.integers(0, 9))})",
        "ref": f"[{text}][r{draw(st.integers(0, 1))}]",
    }[kind]


line = st.lists(inline(), min_size=1, max_size=8).map(" ".join)
code_line = st.text(alphabet="abcxyz😀 *_`<>=()", max_size=90).map(str.rstrip)


@st.composite
def fence(draw: st.DrawFn, indent: str = "") -> str:
    info = draw(st.sampled_from(["", "py", "sh"]))
    body = draw(st.lists(code_line, min_size=1, max_size=8))
    return "\n".join([f"{indent}```{info}", *(indent + c for c in body), f"{indent}```"])


@st.composite
def a_list(draw: st.DrawFn, indent: str = "") -> str:
    """A list at ``indent``, its items' lines, sub-lists (two deep) and code blocks."""
    ordered = draw(st.booleans())
    # a nested list numbered from other than 1 cannot interrupt its item's text: it is
    # text, and a code block under it indented code, which a cut still opens (a limit)
    start = draw(st.sampled_from([1, 1, 3, 10] if not indent else [1]))
    lines: list[str] = []
    for n in range(draw(st.integers(1, 5))):
        marker = f"{start + n}." if ordered else "-"
        lines.append(f"{indent}{marker} {draw(line)}")
        inner = indent + " " * (len(marker) + 1)
        deep = len(indent) > 4
        what = draw(st.sampled_from(["", "", "code"] if deep else ["", "", "list", "code"]))
        if what == "list":
            lines.append(draw(a_list(inner)))
        elif what == "code":
            lines += ["", draw(fence(inner))]
    return "\n".join(lines)


@st.composite
def block(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["para", "para", "para", "fence", "list", "quote"]))
    if kind == "para":
        return "\n".join(draw(st.lists(line, min_size=1, max_size=3)))
    if kind == "fence":
        return draw(fence())
    if kind == "list":
        return draw(a_list())
    inside = draw(st.one_of(st.lists(line, min_size=1, max_size=3).map("\n".join), a_list()))
    return "\n".join(f"> {s}".rstrip() for s in inside.split("\n"))


@st.composite
def answers(draw: st.DrawFn) -> tuple[str, int]:
    """An answer and a limit. Reference links only where their definitions fit in a
    quarter of a part (the share a part keeps for them; more are left where they were)."""
    limit = draw(st.sampled_from([64, 100, 200, 500]))
    body = "\n\n".join(draw(st.lists(block(), min_size=1, max_size=8)))
    used = sorted(set(re.findall(r"\]\[(r\d)\]", body)))
    if used and limit < 200:
        body = re.sub(r"\]\[r\d\]", "](https://e.x)", body)
    elif used:
        body += "\n\n" + "\n".join(f"[{r}]: https://e.x/{r}" for r in used)
    return body, limit


# -- what a rendering shows -----------------------------------------------------------------

STUB = re.compile(r"(?:⦁|\d+\.)[ \t]*…")  # a stand-in ancestor item, as Telegram shows it
SAME = {"expandable_blockquote": "blockquote"}  # how long a quote is is not its formatting


def telegram_styled(part: Part) -> Styled:
    """The visible characters of a Telegram message, each with the entities over it."""
    text = part.text
    dropped = {i for m in STUB.finditer(text) for i in range(m.start(), m.end())}
    shown: Styled = []
    unit = 0
    for i, char in enumerate(text):
        if not char.isspace() and i not in dropped:
            style = sorted(
                (SAME.get(str(e.type), str(e.type)), e.url or "", e.language or "")
                for e in part.entities
                if e.offset <= unit < e.offset + e.length
            )
            shown.append((char, tuple(style)))
        unit += utf16_len(char)
    return shown


def _tag(tag: Any) -> tuple[Any, ...] | None:
    """The formatting a Start tag puts on its text (None for structure that shows none)."""
    if isinstance(tag, str):
        return (tag,) if tag in ("Emphasis", "Strong", "Strikethrough", "BlockQuote") else None
    name = next(iter(tag))
    data = tag[name]
    if name in ("Link", "Image"):
        return (name, data["dest_url"])
    if name == "CodeBlock":
        return ("CodeBlock", data.get("Fenced", "") if isinstance(data, dict) else "")
    if name == "BlockQuote":
        return ("BlockQuote",)
    return None


def parsed_styled(markdown: str) -> Styled:
    """What Slack or the web chat shows of ``markdown``, as the one parser reads it: the
    visible characters (and each list item's marker), each with the formatting over it."""
    shown: Styled = []
    styles: list[tuple[Any, ...] | None] = []
    counters: list[int | None] = []

    def style(*extra: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(sorted(str(s) for s in [*styles, *extra] if s is not None))

    def events() -> Iterator[Any]:
        yield from pyromark.events(markdown, options=PARSE_OPTIONS, merge_text=True)

    for event in events():
        if isinstance(event, str):
            continue
        if "Start" in event:
            tag = event["Start"]
            if isinstance(tag, dict) and "List" in tag:
                counters.append(tag["List"])
            elif tag == "Item":
                n = counters[-1] if counters else None
                shown.append(("•" if n is None else f"{n}.", ("marker",)))
                if counters and n is not None:
                    counters[-1] = n + 1
            styles.append(_tag(tag))
            continue
        if "End" in event:
            styles.pop()
            if isinstance(event["End"], dict) and "List" in event["End"]:
                counters.pop()
            continue
        for key, extra in (("Text", None), ("Code", ("Code",)), ("InlineMath", ("Math",))):
            if key in event:
                own = style(extra) if extra else style()
                shown += [(c, own) for c in event[key] if not c.isspace()]
    kept: Styled = []
    for char, own in shown:
        if char == "…":  # a stand-in ancestor item: not the answer's text
            if kept and kept[-1][1] == ("marker",):
                kept.pop()
            continue
        kept.append((char, own))
    return kept


def joined(styled: list[Styled]) -> Styled:
    return [c for s in styled for c in s]


SETTINGS = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_the_splitter_reads_markdown_as_telegram_s_converter_does() -> None:
    """One parser, one set of extensions: the one telegramify-markdown converts with."""
    assert PARSE_OPTIONS == telegramify_markdown.converter.STANDARD_OPTIONS


EMPTY_CODE_LAST = ("a a a a a a a a a a a *a a* [a a](https://example.com/0)\n\n```\n\n```", 64)


@SETTINGS
@given(answers())
@example(EMPTY_CODE_LAST)
def test_telegram_parts_render_as_their_share_of_the_whole(case: tuple[str, int]) -> None:
    answer, limit = case
    parts = split_markdown(answer, limit, UTF16)
    assert all(utf16_len(p) <= limit for p in parts), [utf16_len(p) for p in parts]
    # a part that shows nothing (an empty code block) is dropped by render's own split,
    # never sent (render of it alone stands in its source): the others are the whole
    # (an answer showing nothing at all stands in its source, whole or in parts)
    rendered = [render(p) for p in parts if convert(p)[0].strip()] or [render(p) for p in parts]
    assert all(len(r) == 1 for r in rendered), "a part needed a second split"
    assert all(utf16_len(r[0].text) <= limit for r in rendered)
    (whole,) = render(answer, 10**9)
    assert joined([telegram_styled(r[0]) for r in rendered]) == telegram_styled(whole)


def test_an_empty_code_block_split_off_sends_nothing_of_its_own() -> None:
    answer, _ = EMPTY_CODE_LAST
    messages = render(answer, 16)
    assert len(messages) > 1, messages
    assert all("```" not in m.text for m in messages)


@SETTINGS
@given(answers())
@example(EMPTY_CODE_LAST)
def test_telegram_render_splits_on_the_tree_too(case: tuple[str, int]) -> None:
    answer, limit = case
    (whole,) = render(answer, 10**9)
    messages = render(answer, max(limit, 256))
    assert all(utf16_len(m.text) <= max(limit, 256) for m in messages)
    assert joined([telegram_styled(m) for m in messages]) == telegram_styled(whole)


@SETTINGS
@given(answers())
def test_slack_parts_render_as_their_share_of_the_whole(case: tuple[str, int]) -> None:
    answer, limit = case
    parts = split_markdown(answer, limit)
    assert all(len(p) <= limit for p in parts), [len(p) for p in parts]
    shown = [parsed_styled(slack_markdown(p)) for p in parts]
    assert joined(shown) == parsed_styled(slack_markdown(answer))
