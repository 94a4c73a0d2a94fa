"""The work an agent would do, pretended: tool calls, sub-agents, time, artifacts, answers.

Why it exists: the gateway shows progress, tool counts, costs, long answers and files from
a run; these directives make the runner produce each of them on demand, as the real agent
would report them (events in their categories, ``toolCalls`` and ``artifacts`` in the
envelope), without doing anything real.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from typing import TYPE_CHECKING

from .args import nonneg_float
from .contract import NOT_AN_AI, HomeError
from .directives import DIRECTIVES, MAX_LONG, MAX_SELF_S, MAX_TOOLS, amount_arg, count_arg
from .home import atomic_write
from .media import MEDIA_TYPES, tiny_png

if TYPE_CHECKING:
    from .run import Run


def do_directives(run: Run, _rest: str) -> None:
    lines = [f"**{NOT_AN_AI}**", "", "It answers by echoing. Directives in a message:", ""]
    lines += [f"- `!{name}{' ' + arg if arg else ''}`: {what}" for name, arg, what in DIRECTIVES]
    run.answer_override = "\n".join(lines)


def do_tools(run: Run, rest: str) -> None:
    count = count_arg(rest, 1, MAX_TOOLS)
    names = ["read_file", "bash", "web_search"]
    run.out.event("tools_detected", count=count)
    for i in range(count):
        call_id = run.next_id("call")
        tool = names[i % len(names)]
        arguments = json.dumps({"n": i + 1, "note": "pretend"})
        run.out.event("tool_call", toolCallId=call_id, toolName=tool, arguments=arguments)
        run.out.event("tool_execution_start", toolCallId=call_id, toolName=tool)
        run.out.event(
            "tool_execution_complete",
            toolCallId=call_id,
            toolName=tool,
            result="ok (pretend)",
            durationMs=1,
        )
        run.tool_calls.append({"id": call_id, "name": tool, "arguments": arguments})
    run.notes.append(f"ran {count} pretend tool call(s)")


def do_subagent(run: Run, rest: str) -> None:
    ident = run.next_id("subagent")
    task = rest or "look something up"
    run.out.event("subagent_start", subagentId=ident, name="helper", task=task)
    run.out.event("subagent_complete", subagentId=ident, name="helper", result="done")
    run.notes.append("ran a pretend sub-agent")


def do_delay(run: Run, rest: str) -> None:
    seconds = amount_arg(rest, 1.0, MAX_SELF_S)
    work(run, seconds)
    run.notes.append(f"worked {seconds:g} s")


def work(run: Run, seconds: float) -> None:
    """Busy for ``seconds``: a text_chunk and a usage_update every 0.2 s."""
    start = time.monotonic()
    end = start + seconds
    n = 0
    while (now := time.monotonic()) < end:
        n += 1
        run.out.event("text_chunk", text=f"working… {now - start:.1f}s ")
        run.out.event("usage_update", completionTokens=n, totalTokens=n)
        time.sleep(min(0.2, max(0.0, end - time.monotonic())))


def do_artifact(run: Run, rest: str) -> None:
    name = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(rest) or "artifact.txt")
    if name.startswith("."):
        name = "artifact" + name
    path = os.path.join(run.home, "workspace", name)
    ext = os.path.splitext(name)[1].lower()
    media = MEDIA_TYPES.get(ext, "text/plain")
    data = tiny_png() if ext == ".png" else f"{NOT_AN_AI}\nartifact {name}\n".encode()
    try:
        atomic_write(path, data)
    except HomeError as exc:  # a tool that failed: the turn goes on and says so
        run.notes.append(f"could not write workspace/{name}: {exc}")
        return
    run.artifacts.append(
        {
            "kind": "file",
            "path": path,
            "mediaType": media,
            "tool": "reference",
            "source": "rendered",
        }
    )
    run.notes.append(f"wrote workspace/{name} ({len(data)} bytes)")


def do_cost(run: Run, rest: str) -> None:
    try:
        run.cost = nonneg_float(rest)
    except (ValueError, argparse.ArgumentTypeError):
        run.notes.append(f"ignored !cost {rest!r} (not a non-negative number)")


def do_long(run: Run, rest: str) -> None:
    size = count_arg(rest, 5000, MAX_LONG)
    parts: list[str] = [f"**{NOT_AN_AI}** Here is a long answer of about {size} characters."]
    total = len(parts[0])
    while total < size:
        i = len(parts)
        if i % 4 == 3:
            body = "\n".join(f"line_{i}_{j} = {j}  # pretend code" for j in range(20))
            part = f"```python\n{body}\n```"
        else:
            part = f"Paragraph {i}. " + "The reference runner repeats itself. " * 10
        parts.append(part.strip())
        total += len(parts[-1]) + 2
    run.answer_override = "\n\n".join(parts)


def do_env(run: Run, _rest: str) -> None:
    mask = os.umask(0o077)
    os.umask(mask)
    run.notes.append("environment variables (names only): " + ", ".join(sorted(os.environ)))
    run.notes.append(
        f"uid={os.getuid()} gid={os.getgid()} euid={os.geteuid()} egid={os.getegid()} "
        f"groups={sorted(os.getgroups())} umask={mask:04o}"
    )
    run.notes.append(f"cwd={os.getcwd()} JAZZ_HOME={run.home}")
