"""Prompt messages: what an approval shows is exactly what the agent asked to run, within
the room every surface gives it."""

from __future__ import annotations

import pytest
from markdown_it import MarkdownIt

from bridge.engine.prompts import PromptRecord, message_for, resolved_text

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
    """The prompts' room (the prompt with its longest settled line, in UTF-16 units, which
    is at least what Slack and the web count) is within each surface's max_length."""
    from adapters.slack.surface import SlackSurface
    from adapters.telegram.surface import TelegramSurface
    from adapters.web.adapter import WebSurface
    from bridge.engine.prompts import PROMPT_ROOM

    for surface in (TelegramSurface, SlackSurface, WebSurface):
        assert surface.capabilities.max_length >= PROMPT_ROOM, surface.name
