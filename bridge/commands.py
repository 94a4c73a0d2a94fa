"""Chat commands the core answers at once, never behind a run.

``/help``, ``/start``, ``/new``, ``/status``, ``/stop`` (also as ``/cmd@botname``). Any
other ``/word`` is not a command: it goes to the agent as text.

The help is one text for every surface, so it names the form each one lets through: Slack
keeps a message that starts with ``/`` for its own slash commands (in a thread or a DM
``/new`` is refused by Slack's client and never sent), and its adapter takes ``!new`` for
``/new``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class Command(StrEnum):
    HELP = "help"
    START = "start"
    NEW = "new"
    STATUS = "status"
    STOP = "stop"


_COMMAND = re.compile(r"^\s*/([A-Za-z]+)(?:@[A-Za-z0-9_.-]+)?(?:\s+(.*))?$", re.DOTALL)


@dataclass(frozen=True)
class ParsedCommand:
    command: Command
    argument: str


def parse_command(text: str) -> ParsedCommand | None:
    match = _COMMAND.match(text)
    if not match:
        return None
    try:
        command = Command(match.group(1).lower())
    except ValueError:
        return None
    return ParsedCommand(command, (match.group(2) or "").strip())


HELP_TEXT = """\
**jazz-bridge**: this thread is one conversation with a Jazz agent, with its own files.

Write a message and the agent answers here. Commands (on Slack, which keeps every \
message starting with `/` for its own, start them with `!` instead: `!new`, `!status`, \
`!stop`, `!help`):
- `/new`: start a fresh conversation (the agent forgets earlier messages; files stay); \
`/new <message>` starts it with that message
- `/status`: what is running, how many messages wait, the last run's cost
- `/stop`: stop the current run (the person who started it, or an operator)
- `/help`: this text"""
