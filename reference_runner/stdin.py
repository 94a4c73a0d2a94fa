"""stdin: the first line (the prompt), then answer frames that may come at any time.

Why it exists: the contract puts the prompt on stdin, never on argv, and answers for the
prompts a person is asked come on the same stream while the turn goes on; one reader thread
keeps every answer until the prompt it answers waits for it, and a line nobody can use
(not JSON, nested past the decoder's stack, an unknown frame) is ignored, never fatal.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from .contract import ANSWER_KEYS, BadInput
from .home import valid_history
from .output import Output

READ_CHUNK = 1024 * 1024  # stdin is read this much at a time
MAX_PERSON_WAIT_S = 3600.0  # a prompt nobody answers for this long counts as unanswered


class Stdin:
    """Lines from fd 0 read with ``os.read`` (no buffered-reader lock a daemon thread holds)."""

    def __init__(self, fd: int = 0) -> None:
        self.fd = fd
        self.buf = b""
        self.cond = threading.Condition()
        self.frames: dict[tuple[str, str], dict[str, Any]] = {}
        self.eof = False

    def readline(self) -> bytes | None:
        """One line; in linear time (only new bytes are searched, joined once at the end)."""
        chunks = [self.buf]
        found = b"\n" in self.buf
        while not found:
            try:
                chunk = os.read(self.fd, READ_CHUNK)
            except OSError:
                chunk = b""
            if not chunk:
                rest = b"".join(chunks)
                self.buf = b""
                return rest or None
            chunks.append(chunk)
            found = b"\n" in chunk
        line, self.buf = b"".join(chunks).split(b"\n", 1)
        return line

    def pump(self, out: Output) -> None:
        """The reader thread: keep every answer frame until someone waits for it."""
        try:
            while (raw := self.readline()) is not None:
                line = raw.strip()
                if not line:
                    continue
                try:
                    frame = json.loads(line)
                except (ValueError, RecursionError):  # nested past the stack is no frame either
                    out.stderr(
                        f"reference runner: ignored a stdin line that is not JSON: {line[:80]!r}"
                    )
                    continue
                kind = frame.get("type") if isinstance(frame, dict) else None
                key = ANSWER_KEYS.get(kind) if isinstance(kind, str) else None
                ident = frame.get(key) if key else None
                if not isinstance(kind, str) or not isinstance(ident, str):
                    out.stderr("reference runner: ignored a stdin frame it has no use for")
                    continue
                with self.cond:
                    self.frames[(kind, ident)] = frame
                    self.cond.notify_all()
        finally:
            with self.cond:
                self.eof = True
                self.cond.notify_all()

    def wait(self, kind: str, ident: str) -> dict[str, Any] | None:
        """The answer frame of one prompt; None at EOF or after MAX_PERSON_WAIT_S."""
        deadline = time.monotonic() + MAX_PERSON_WAIT_S
        with self.cond:
            while (kind, ident) not in self.frames and not self.eof:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(min(left, 1.0))
            return self.frames.pop((kind, ident), None)


def read_first_line(stdin: Stdin, ephemeral: bool) -> dict[str, Any]:
    """The first stdin line, checked: ``{"prompt": ...}`` (history only when ephemeral)."""
    raw = stdin.readline()
    if raw is None:
        raise BadInput('no first stdin line (expected {"prompt": "..."})')
    try:
        frame = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise BadInput(f'the first stdin line must be {{"prompt": "..."}}: {exc}') from exc
    if not isinstance(frame, dict) or not isinstance(frame.get("prompt"), str):
        raise BadInput('the first stdin line must be a JSON object {"prompt": "..."}')
    if "history" in frame:
        if not ephemeral:
            raise BadInput('"history" on stdin is only accepted with --ephemeral')
        if not valid_history(frame["history"]):
            raise BadInput('"history" must be a list of {"role": "user"|"assistant", "content"}')
    attachments = frame.get("attachments", [])
    if not isinstance(attachments, list) or not all(isinstance(a, str) for a in attachments):
        raise BadInput('"attachments" must be a list of paths')
    return frame
