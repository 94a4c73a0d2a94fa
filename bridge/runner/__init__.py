"""Runner backends: the CLI (``jazz run --json``) and the Jazz daemon, behind one interface."""

from .base import PROMPT_EVENTS, RunHandle, RunnerBackend, RunnerEvent, RunRequest, RunResult
from .cli import CliRunner
from .command import default_command

__all__ = [
    "PROMPT_EVENTS",
    "CliRunner",
    "RunHandle",
    "RunRequest",
    "RunResult",
    "RunnerBackend",
    "RunnerEvent",
    "default_command",
]
