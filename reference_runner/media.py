"""What an artifact is made of: its media type, and a real PNG written by hand.

Why it exists: ``!artifact`` must leave files the gateway can upload and a chat can show
(an image that is a valid PNG, not a name ending ``.png``) without any imaging library:
the runner is stdlib-only.
"""

from __future__ import annotations

import struct
import zlib

MEDIA_TYPES = {
    ".png": "image/png",
    ".txt": "text/plain",
    ".md": "text/markdown",
    ".json": "application/json",
    ".csv": "text/csv",
    ".html": "text/html",
}


def tiny_png(width: int = 8, height: int = 8) -> bytes:
    """A valid RGB PNG, written by hand."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    rows = b"".join(
        b"\x00" + b"".join(bytes((32 * x % 256, 32 * y % 256, 192)) for x in range(width))
        for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )
