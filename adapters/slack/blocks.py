"""Block Kit for a message with buttons (a prompt, a progress bubble): a markdown block with
the text, then the choices as buttons whose ``value`` is the core's opaque token.

Apart from the surface so what a prompt looks like on Slack is one small function, shared by
posts and edits.
"""

from __future__ import annotations

from typing import Any

from bridge.model import Outgoing

from .text import MARKDOWN_BLOCK_MAX, _markdown, _plain

BUTTON_LABEL_MAX = 75
BUTTONS_PER_ACTIONS = 25


def blocks_for(message: Outgoing) -> list[dict[str, Any]]:
    """A markdown block with the text, then the choices as buttons (if any)."""
    text = message.text or " "
    # clipped before defusing (in _markdown): a cut that drops a code span's closing
    # backticks turns what was code into text, to be defused
    blocks: list[dict[str, Any]] = [
        {"type": "markdown", "text": _markdown(text, MARKDOWN_BLOCK_MAX)}
    ]
    buttons: list[dict[str, Any]] = []
    for i, choice in enumerate(message.choices):
        button: dict[str, Any] = {
            "type": "button",
            "action_id": f"jb_choice_{i}",
            "text": {"type": "plain_text", "text": _plain(choice.label, BUTTON_LABEL_MAX)},
            "value": choice.token,
        }
        if choice.style in ("primary", "danger"):
            button["style"] = choice.style
        buttons.append(button)
    for start in range(0, len(buttons), BUTTONS_PER_ACTIONS):
        blocks.append(
            {
                "type": "actions",
                "block_id": f"jb_choices_{start // BUTTONS_PER_ACTIONS}",
                "elements": buttons[start : start + BUTTONS_PER_ACTIONS],
            }
        )
    return blocks
