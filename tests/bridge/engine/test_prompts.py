"""Prompt messages: what an approval shows is exactly what the agent asked to run, within
the room every surface gives it."""

from __future__ import annotations

import dataclasses

import pytest
from markdown_it import MarkdownIt

from bridge.engine.prompts import PromptRecord, message_for, resolved_text, settled_note

md = MarkdownIt("commonmark")


def approval(preview: str, tool: str = "write_file") -> PromptRecord:
    return PromptRecord(
        token="t" * 16,
        run_id=1,
        conversation_id=1,
        requester="u",
        kind="approval",
        request_id="r",
        payload={"toolName": tool, "message": "Write it", "preview": preview},
    )


def test_a_preview_with_its_own_fences_is_shown_whole_as_code() -> None:
    for preview in (
        "# Title\n\n```bash\nrm -rf /tmp/x\n```\n\n**after** <!channel>",
        "````md\n```py\nprint(1)\n```\n````\ntrailing `tick` and ~~~",
        "ends with backticks ``",
    ):
        text = message_for(approval(preview), others_pending=0, buttons=True).text
        code = [t for t in md.parse(text) if t.type in ("fence", "code_block")]
        assert len(code) == 1, text
        assert code[0].content == preview + "\n", text


def test_a_tool_name_is_shown_literally() -> None:
    for tool in ("*glob*", "`x`", "a``b", "__init__"):
        for text in (
            message_for(approval("p", tool), others_pending=0, buttons=False).text,
            resolved_text(approval("p", tool), "y", "Ann", None),
        ):
            spans = [
                c.content
                for t in md.parse(text)
                if t.children
                for c in t.children
                if c.type == "code_inline"
            ]
            assert tool in spans, (tool, text)


@pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
def test_a_settled_prompt_fits_every_surface() -> None:
    """A prompt at its longest, with its longest settled line, in UTF-16 units (at least
    what Slack and the web count), is within the max_length of the surface it is shown on:
    the room comes from the surface, not from one platform's limit in the core."""
    from adapters.slack.surface import SlackSurface
    from adapters.telegram.surface import TelegramSurface
    from adapters.web.surface import WebSurface
    from bridge.engine import prompts

    record = PromptRecord(
        token="t" * 16,
        run_id=1,
        conversation_id=1,
        requester="u",
        kind="approval",
        request_id="r",
        payload={"toolName": "write_file", "message": "m😀" * 5000, "preview": "p😀" * 5000},
    )
    for surface in (TelegramSurface, SlackSurface, WebSurface):
        room = surface.capabilities.max_length
        settled = prompts.unanswered_text(record, 999_999_999 * 60, room)
        assert utf16(settled) <= room, (surface.name, utf16(settled))
        assert utf16(prompts.expired_text(record, room)) <= room, surface.name


def utf16(text: str) -> int:
    """Length in UTF-16 code units, as Telegram counts."""
    return len(text.encode("utf-16-le")) // 2


def test_a_settled_prompt_names_the_choice_and_never_a_secret() -> None:
    asked = approval("x")
    answered = dataclasses.replace(asked, state="answered")
    assert settled_note(dataclasses.replace(answered, answer={"approved": True})) == "✅ approved"
    assert settled_note(dataclasses.replace(answered, answer={"approved": False})) == "❌ rejected"
    question = dataclasses.replace(answered, kind="input", payload={"question": "Which?"})
    assert settled_note(dataclasses.replace(question, answer={"response": "blue"})) == (
        "✅ answered: blue"
    )
    assert settled_note(dataclasses.replace(question, answer={"response": ""})) == "⏭ skipped"
    secret = dataclasses.replace(answered, kind="secret", answer={"requestId": "r"})
    assert settled_note(secret) == "✅ secret sent"  # the value is never stored nor shown
    assert settled_note(dataclasses.replace(secret, answer={"declined": True})) == "⏭ declined"
    assert settled_note(dataclasses.replace(asked, state="expired")) == "⌛ expired"
    assert settled_note(None) == "⌛ expired"
