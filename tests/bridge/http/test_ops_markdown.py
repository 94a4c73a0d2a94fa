"""The /ops pages' Markdown (``bridge/http/ops_markdown.py``): rendered, and nothing of the
text's own HTML, no link but http, https and mailto (each ``rel="noopener noreferrer
nofollow"``), no image loaded."""

from __future__ import annotations

import re

import pytest

from bridge.http.ops_markdown import LINK_REL, render


def _hrefs(html: str) -> list[str]:
    return re.findall(r'href="([^"]*)"', html)


def test_markdown_is_rendered() -> None:
    html = render("**b** _i_ `c`\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n~~gone~~\nnext line")
    assert "<strong>b</strong>" in html and "<em>i</em>" in html and "<code>c</code>" in html
    assert "<table>" in html and "<td>1</td>" in html and "<s>gone</s>" in html
    assert "<br />\nnext line" in html  # a newline is a line break, as in a chat


@pytest.mark.parametrize(
    "text",
    [
        "[x](javascript:alert(1))",
        "[x](JavaScript:alert(1))",
        "[x](  javascript:alert(1))",
        "[x](java&#115;cript:alert(1))",
        "[x](vbscript:msgbox(1))",
        "[x](data:text/html;base64,PHNjcmlwdD4=)",
        "[x](file:///etc/passwd)",
        "[x](/ops/c/1)",
        "[x](//evil.example/)",
        "[x]\n\n[x]: javascript:alert(1)",
        "<javascript:alert(1)>",
        "![x](data:image/png;base64,AAAA)",
    ],
)
def test_no_link_but_to_the_web_or_mail(text: str) -> None:
    html = render(text)
    assert _hrefs(html) == [], html
    assert "<a" not in html and "<img" not in html


@pytest.mark.parametrize(
    "text,href",
    [
        ("[x](https://example.org/a?b=1&c=2)", "https://example.org/a?b=1&amp;c=2"),
        ("[x](HTTP://example.org)", "HTTP://example.org"),
        ("<https://example.org>", "https://example.org"),
        ("<ada@example.org>", "mailto:ada@example.org"),
        (
            '[x](https://example.org/"onmouseover="alert(1))',
            "https://example.org/%22onmouseover=%22alert(1)",
        ),
    ],
)
def test_a_web_or_mail_link_opens_nothing_of_the_page(text: str, href: str) -> None:
    html = render(text)
    assert _hrefs(html) == [href], html
    assert f'rel="{LINK_REL}"' in html


def test_raw_html_is_text() -> None:
    html = render('<script>alert(1)</script>\n\n<div onclick="x()">d</div> <b>b</b> <!-- c -->')
    assert "<script" not in html and "<div" not in html and "<b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;div onclick=&quot;x()&quot;&gt;" in html and "&lt;!-- c --&gt;" in html


def test_an_image_is_a_link_to_it_never_loaded() -> None:
    html = render('![a "cat" <b>](https://example.org/cat.png "title")')
    assert "<img" not in html
    assert _hrefs(html) == ["https://example.org/cat.png"]
    assert "image: a &quot;cat&quot; &lt;b&gt;" in html and f'rel="{LINK_REL}"' in html
