"""Chat commands the core answers at once, never behind a run.

``/help``, ``/start``, ``/new``, ``/status``, ``/stop`` (also as ``/cmd@botname``). Any
other ``/word`` is not a command: it goes to the agent as text.

The help names each command in the form the asker's surface lets through (its
``Capabilities.command_sigil``): a surface whose platform keeps ``/`` for itself takes
another sigil and its adapter turns it into the command here.
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

Write a message and the agent answers here. Commands:
- `{s}new`: start a fresh conversation (the agent forgets earlier messages; files stay); \
`{s}new <message>` starts it with that message
- `{s}status`: what is running, how many messages wait, the last run's cost
- `{s}stop`: stop the current run (the person who started it, or an operator)
- `{s}help`: this text"""


def help_text(sigil: str = "/") -> str:
    """The help, naming each command in the form the surface lets through (``sigil``: its
    :attr:`~bridge.ports.Capabilities.command_sigil`)."""
    return HELP_TEXT.format(s=sigil)
