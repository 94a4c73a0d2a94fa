"""What the web chat's test modules share: the gateway harness (``tests/bridge``), raw HTTP
requests (bytes a client library would never send); Debian's Chromium is
``tests/browser_support.py``.

Each module builds its ``env`` on ``gateway_env`` itself: the released-CLI session keeps a
test module by what its own text builds on (``tests/conftest.py``).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
from gateway_harness import Client, gateway_env, running_gateway, wait_until

__all__ = ["Client", "gateway_env", "running_gateway", "wait_until"]

JSON_TYPE = b"Content-Type: application/json"


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
