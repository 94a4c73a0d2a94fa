"""What a prompt can ask the runner to pretend: the directives, and how they are read.

Why it exists: the runner has no model; a person (or a test) steers it from the chat with
directives, one per line or inline, each starting a word with ``!``; an argument runs to
the end of the line or the next directive. This table is what ``!directives`` answers with
and what this docstring documents; the arguments are read as typed in a chat, so an odd
one (``!tools ²``, thousands of digits, ``nan``) falls back to a default instead of
crashing the runner. The handlers live in :mod:`.pretend`, :mod:`.people` and
:mod:`.faults`.

  !directives      list the directives (``!help`` too, where the chat lets it through:
                   Slack's adapter takes ``!help`` for the gateway's own ``/help``)
  !tools N         N pretend tool calls (tool events and the envelope's toolCalls)
  !subagent        a sub-agent start/complete pair
  !delay S         work S seconds (float), a text_chunk/usage_update every 0.2 s
  !approve TOOL    ask to approve TOOL and wait for the decision
  !approve2 TOOL   two approvals (TOOL and write), both pending before either is answered
  !ask QUESTION    ask a question with suggestions and wait for the response
  !secret NAME     ask for a secret (never echoed: only its length is reported)
  !artifact NAME   write $JAZZ_HOME/workspace/NAME (a real PNG if NAME ends .png), list it
  !cost X          report a known cost of X US dollars (default: unpriced, 0)
  !long N          an answer of about N characters: paragraphs and fenced code blocks
  !env             list the environment's variable names (not values), ids and umask
  !fail [MSG]      a failure envelope, code "failed", exit 1
  !empty           a failure envelope, code "empty_response", exit 1
  !crash           exit 3 with no envelope (traceback-like noise on stderr)
  !garbage         non-JSON garbage on stdout, no envelope, exit 1
  !big-stdout MB   MB megabytes of junk on stdout before the envelope
  !spawn S         leave a child (same group) and a setsid grandchild running S seconds
  !ignore-term     ignore SIGTERM and hang (at most 300 s) until killed
"""

from __future__ import annotations

import math
import re

DIRECTIVES = (
    ("directives", "", "list the directives (also `!help`, except on Slack)"),
    ("tools", "N", "N pretend tool calls (events and the envelope's toolCalls)"),
    ("subagent", "", "a sub-agent start/complete pair"),
    ("delay", "S", "work S seconds, with progress events every 0.2 s"),
    ("approve", "TOOL", "ask to approve TOOL and wait for the decision"),
    ("approve2", "TOOL", "two approvals at once (TOOL and write)"),
    ("ask", "QUESTION", "ask a question with suggestions and wait for the response"),
    ("secret", "NAME", "ask for a secret (only its length is reported)"),
    ("artifact", "NAME", "write workspace/NAME (a PNG if it ends .png) and list it"),
    ("cost", "X", "report a known cost of X US dollars"),
    ("long", "N", "an answer of about N characters with code blocks"),
    ("env", "", "list environment variable names, uid, gid, groups and umask"),
    ("fail", "[MSG]", "a failure envelope (exit 1)"),
    ("empty", "", "an empty_response failure (exit 1)"),
    ("crash", "", "exit 3 without an envelope"),
    ("garbage", "", "garbage on stdout, no envelope (exit 1)"),
    ("big-stdout", "MB", "MB megabytes of junk on stdout before the envelope"),
    ("spawn", "S", "leave a child and a setsid grandchild running S seconds"),
    ("ignore-term", "", "ignore SIGTERM and hang until killed (at most 300 s)"),
)
DIRECTIVE_RE = re.compile(
    r"(?<!\S)!([a-z][a-z0-9-]*)(?![\w-])(?:[ \t]+(?!![a-z])((?:(?![ \t]+![a-z])[^\n])*))?",
    re.IGNORECASE,
)
COUNT_RE = re.compile(r"[0-9]+")
MAX_SELF_S = 300.0  # nothing this runner does on its own lasts longer (delays, hangs, spawns)
MAX_TOOLS = 100
MAX_LONG = 1_000_000
MAX_BIG_STDOUT_MB = 256.0


def directives(prompt: str) -> list[tuple[str, str]]:
    """``!name argument`` directives in order (the argument ends at a newline or directive)."""
    return [(m.group(1).lower(), (m.group(2) or "").strip()) for m in DIRECTIVE_RE.finditer(prompt)]


def count_arg(rest: str, default: int, limit: int) -> int:
    """A directive's count typed in a chat: ASCII digits, capped at ``limit``; else default.

    (``str.isdigit`` accepts superscripts ``int`` refuses, and ``int`` refuses thousands of
    digits: either was a runner crash.)"""
    if not COUNT_RE.fullmatch(rest):
        return default
    return limit if len(rest) > len(str(limit)) else min(int(rest), limit)


def amount_arg(rest: str, default: float, limit: float) -> float:
    """A directive's amount (seconds, megabytes) in ``[0, limit]``; default if not a number."""
    try:
        value = float(rest) if rest else default
    except ValueError:
        return default
    if math.isnan(value):
        return default
    return min(max(value, 0.0), limit)
