"""What the Slack surface puts in a message's text: agent text never notifies a channel."""

from __future__ import annotations

import re
from typing import Any

import pytest

from adapters.slack.blocks import blocks_for
from adapters.slack.surface import SlackSurface
from adapters.slack.text import MARKDOWN_BLOCK_MAX, _markdown, _mrkdwn
from bridge.markdown import split_markdown
from bridge.model import Choice, Outgoing, ReplyKind, ReplyTarget

# chat.postMessage's markdown_text (and a markdown block): "Limit ... 12,000 characters"
SLACK_MARKDOWN_TEXT_LIMIT = 12_000
AGENT = "**done** <!channel> <!here|here> <!everyone> <!subteam^S123> a < b & c > d <@U1>"


class Client:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def chat_postMessage(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        return {"ts": "1.2"}


def surface_for(client: Client) -> SlackSurface:
    fake: Any = client  # the calls the surface makes, recorded
    return SlackSurface(fake, "xoxb-t", api_url="https://slack.com/api/", max_file_bytes=1)


def specials(text: str) -> list[str]:
    return [k for k in ("<!channel", "<!here", "<!everyone", "<!subteam") if k in text]


@pytest.mark.parametrize("kind", [ReplyKind.ANSWER, ReplyKind.PROMPT])
async def test_agent_text_cannot_notify_a_channel(kind: ReplyKind) -> None:
    client = Client()
    surface = surface_for(client)
    target = ReplyTarget(surface="slack", thread_key="slack:T1:C1", context={"channel": "C1"})
    choices = (Choice(token="t.y", label="Approve", style="primary"),)
    message = Outgoing(kind=kind, text=AGENT, choices=choices if kind is ReplyKind.PROMPT else ())
    await surface.send(target, message, reply_key="k")
    sent = client.calls[0]
    if "text" in sent:  # mrkdwn: &, < and > escaped, as Slack's formatting reference asks
        assert sent["text"] == (  # a user's mention is one (the person who asked a prompt)
            "**done** &lt;!channel&gt; &lt;!here|here&gt; &lt;!everyone&gt; "
            "&lt;!subteam^S123&gt; a &lt; b &amp; c &gt; d <@U1>"
        )
    for markdown in [sent.get("markdown_text")] + [
        b["text"] for b in sent.get("blocks") or [] if b["type"] == "markdown"
    ]:
        if markdown is not None:
            assert specials(markdown) == [], markdown
            assert markdown.replace("\u200d", "") == AGENT  # reads the same


def test_a_clipped_text_does_not_end_in_half_an_entity() -> None:
    from adapters.slack.text import _mrkdwn

    text = _mrkdwn("x" * 2996 + "&&&&", 3000)
    assert len(text) <= 3000 and text.endswith("…")
    assert re.fullmatch(r"(?:x|&amp;)*…", text), text[-10:]
    assert blocks_for(Outgoing(kind=ReplyKind.ANSWER, text="<!here>"))[0]["text"] != "<!here>"


CODE = (
    "Run `echo <!here>` then:\n\n```sh\ncurl -d '<!channel>' x\n```\n\n"
    "    <!everyone> indented\n\n> ```\n> <!here>\n> ```\n\nbut <!here> outside"
)


def test_code_keeps_its_text_exactly() -> None:
    """No joiner inside code spans or blocks: Slack shows code as written (nothing in it
    notifies), and a joiner there was copied along with the code, breaking the command."""
    (block,) = blocks_for(Outgoing(kind=ReplyKind.ANSWER, text=CODE))
    text = block["text"]
    assert text.count("\u200d") == 1  # the one outside code
    assert text.replace("<\u200d!here> outside", "<!here> outside") == CODE
    assert _markdown("a `<!here>` b") == "a `<!here>` b"
    assert _markdown("``x ` <!here>`` <!here>") == "``x ` <!here>`` <\u200d!here>"


def test_a_line_that_starts_with_a_mention_keeps_its_code_as_written() -> None:
    """CommonMark reads a line that starts with ``<!`` and a letter as raw HTML, which
    Slack does not render: its code span is still code there, so it gets no joiner."""
    assert _markdown("<!here> run `echo <!channel>`") == "<\u200d!here> run `echo <!channel>`"
    assert _markdown("<!here>\n```\n<!here>\n```") == "<\u200d!here>\n```\n<!here>\n```"


def test_a_clipped_block_defuses_what_the_cut_took_out_of_code() -> None:
    """A markdown block is clipped to Slack's limit: a cut that drops the closing backtick
    of a code span leaves its ``<!channel>`` as text, which must get its joiner."""
    text = "`<!channel> " + "x" * 12_000 + "`"
    (block,) = blocks_for(Outgoing(kind=ReplyKind.ANSWER, text=text))
    assert specials(block["text"]) == [] and len(block["text"]) <= MARKDOWN_BLOCK_MAX
    many = blocks_for(Outgoing(kind=ReplyKind.ANSWER, text="<!here> " * 2000))[0]["text"]
    assert specials(many) == [] and len(many) <= MARKDOWN_BLOCK_MAX


def test_the_notification_text_shows_links_and_mentions_readably() -> None:
    """The mrkdwn ``text`` (the notification's text beside blocks, per chat.postMessage)
    had every link and mention escaped: ``&lt;@U1&gt;`` and raw ``[docs](https://…)``
    showed as typed. Now a Markdown link is a mrkdwn link, Slack's own mentions and links
    are kept; special mentions and code stay escaped."""
    text = _mrkdwn(
        "Asked by <@U123>: see [the docs](https://example.com/a?b=1&c=2), "
        "<https://example.com|home>, [src](src/main.py), <#C42|general>, <!here> and "
        "`[x](https://example.com) <@U9>`"
    )
    assert text == (
        "Asked by <@U123>: see <https://example.com/a?b=1&amp;c=2|the docs>, "
        "<https://example.com|home>, src (src/main.py), <#C42|general>, &lt;!here&gt; and "
        "`[x](https://example.com) &lt;@U9&gt;`"
    )
    clipped = _mrkdwn("x" * 2990 + " see [the docs](https://example.com/a)", 3000)
    assert clipped == "x" * 2990 + " see …"  # a link is cut off whole, never in half


async def test_an_answer_part_full_of_special_mentions_stays_within_slacks_limit() -> None:
    """An answer is split to 12,000 - 16 characters, and a joiner then went in before each
    ``<!here>``: a part full of them reached 13,484 characters in ``markdown_text``, over
    the 12,000 chat.postMessage allows. Now such a part reads the same within the limit."""
    client = Client()
    surface = surface_for(client)
    target = ReplyTarget(surface="slack", thread_key="slack:T1:C1", context={"channel": "C1"})
    answer = "<!here> " * 3000 + "\n\nRun `<!here>` and <!channel>"
    parts = split_markdown(answer, SlackSurface.capabilities.max_length - 16)
    for i, part in enumerate(parts):
        await surface.send(target, Outgoing(ReplyKind.ANSWER, part), reply_key=f"k{i}")
    sent = [call["markdown_text"] for call in client.calls]
    assert len(sent) == len(parts) > 1
    for part, text in zip(parts, sent, strict=True):
        assert len(text) <= SLACK_MARKDOWN_TEXT_LIMIT, len(text)
        assert specials(text.replace("`<!here>`", "")) == [], text[:40]
        assert text.replace("\u200d", "").replace("\u01c3", "!") == part  # reads the same
    assert sent[-1].endswith("Run `<!here>` and <\u200d!channel>")  # code as written
    prompt = "<!here> " * 1300  # within a markdown block, not with a joiner to each
    blocked = blocks_for(Outgoing(ReplyKind.PROMPT, prompt))[0]["text"]
    assert len(blocked) <= MARKDOWN_BLOCK_MAX and specials(blocked) == []
    assert blocked.replace("\u01c3", "!") == prompt  # not clipped to make room for joiners
