"""The progress line: tool names read as the runner gave them, never as Markdown."""

from __future__ import annotations

from collections import Counter

from markdown_it import MarkdownIt

from bridge.engine.progress import ProgressState

md = MarkdownIt("commonmark")


def test_tool_names_are_shown_literally() -> None:
    state = ProgressState()
    names = ["mcp__github__create_issue", "*glob*", "`x`", "[a](b)"]
    state.tools = Counter({name: 1 for name in names})
    state.tools["mcp__github__create_issue"] += 1
    line = state.tool_summary()
    inline = md.parseInline(line)[0].children or []
    assert [c.content for c in inline if c.type == "code_inline"] == names, line
    assert not [c for c in inline if c.type in ("em_open", "strong_open", "link_open")], line
    assert "x2" in line
