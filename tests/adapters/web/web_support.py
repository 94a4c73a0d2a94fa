"""What the web chat's test modules share: the gateway harness (``tests/bridge``), raw HTTP
requests (bytes a client library would never send); Debian's Chromium is
``tests/browser_support.py``.

Each module builds its ``env`` on ``gateway_env`` itself: the released-CLI session keeps a
test module by what its own text builds on (``tests/conftest.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
from gateway_harness import Client, gateway_env, running_gateway, wait_until

from bridge.runner.command import shared_interpreter

__all__ = ["Client", "gateway_env", "running_gateway", "wait_until"]

JSON_TYPE = b"Content-Type: application/json"
FILES_RUNNER = Path(__file__).with_name("files_runner.py")
# what files_runner.py claims for a prompt with "files" (relative to the home)
SENT_FILES = ("plot.png", "page.html", "drawing.svg", "notes.txt", "sub/deep.txt")


def use_files_runner(env: dict[str, str], fake_dir: Path) -> None:
    """Run ``files_runner.py`` (a copy every account can read) instead of the fake runner."""
    runner = fake_dir / FILES_RUNNER.name
    shutil.copyfile(FILES_RUNNER, runner)
    os.chmod(runner, 0o755)
    env["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps([shared_interpreter(), str(runner)])


async def files_sent(client: Client, thread: str, count: int = len(SENT_FILES)) -> list[dict]:
    """The thread's messages that carry a file, once ``count`` are in (bounded)."""
    found: list[dict] = []

    async def sent() -> bool:
        found[:] = [m for m in await client.messages(thread) if m.get("file")]
        return len(found) >= count

    await wait_until(sent, 30, f"{count} files in {thread}")
    return found


async def raw(client: Client, request: bytes) -> tuple[int, bytes]:
    """Send ``request`` as it is; the status code and body of the answer."""
    host, port = client.base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(65536), 30)
        head, _, body = answer.partition(b"\r\n\r\n")
        return int(head.split()[1]), body
    finally:
        writer.close()


def post(path: str, body: bytes, *headers: bytes, host: bytes = b"127.0.0.1") -> bytes:
    lines = [b"POST " + path.encode() + b" HTTP/1.1", b"Host: " + host, b"Connection: close"]
    lines += [*headers, b"Content-Length: " + str(len(body)).encode()]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body
