"""A bare URL in an answer reaches Telegram whole: its ``__init__`` or ``*x*`` is not read as
emphasis (which showed ``pkg/init.py`` in bold and made Telegram link a URL that does not
exist), whatever punctuation ends the sentence around it; code and links are left alone."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.telegram.render import render

GH = "https://github.com/o/r/blob/main/pkg/__init__.py"


def one(markdown: str) -> tuple[str, list[tuple[str, int, int, str | None]]]:
    parts = render(markdown)
    assert len(parts) == 1
    part = parts[0]
    return part.text, [(str(e.type), e.offset, e.length, e.url) for e in part.entities]


def test_a_bare_url_with_dunder_names_is_shown_and_linked_whole() -> None:
    text, entities = one(f"See {GH} for details.")
    assert text == f"See {GH} for details."
    assert all(kind not in ("bold", "italic") for kind, *_ in entities), entities
    links = [(o, n, url) for kind, o, n, url in entities if kind == "text_link"]
    assert links in ([], [(4, len(GH), GH)])  # linked by us, or left for Telegram to find


def test_punctuation_around_a_bare_url_stays_outside_it() -> None:
    url = "https://en.wikipedia.org/wiki/Foo_(bar)"
    text, _ = one(f"(see {GH}), or {url}. Also **https://x.io/__a__**!")
    assert text == f"(see {GH}), or {url}. Also https://x.io/__a__!"


def test_urls_in_code_and_links_are_left_as_they_were() -> None:
    text, entities = one(f"`{GH}` and [the file]({GH}) and <{GH}>")
    assert text == f"{GH} and the file and {GH}"
    assert ("code", 0, len(GH), None) in entities
    assert any(kind == "text_link" and url == GH for kind, _, _, url in entities)


def test_a_bare_url_in_a_table_cell_is_shown_whole() -> None:
    text, _ = one(f"| file | note |\n|---|---|\n| {GH} | x |")
    assert GH in text


segment = st.text(alphabet="ab_*~-.", min_size=1, max_size=12)


@settings(max_examples=80, deadline=None, database=None)
@given(st.lists(segment, min_size=1, max_size=5), st.sampled_from(["", ".", ",", "!", ":"]))
def test_any_bare_url_path_is_shown_as_written(segments: list[str], after: str) -> None:
    url = "https://example.com/" + "/".join(segments) + "/end"
    text, _ = one(f"Open {url}{after} now")
    assert f"{url}{after} now" in text
