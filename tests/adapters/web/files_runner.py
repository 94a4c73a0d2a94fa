#!/usr/bin/env python3
"""A runner of the web chat's tests (stdlib only), speaking the jazz run contract: for a
prompt with the word ``files`` it writes a few files in its home's workspace and claims
them as artifacts by their absolute paths (as runners do): an image (a real PNG), a page
and an SVG that carry script, a text file, a file in a sub-directory; it also writes
``secret.txt``, which it does not claim. Any other prompt is answered without files."""

import json
import os
import struct
import sys
import zlib

CLAIMED = ("plot.png", "page.html", "drawing.svg", "notes.txt", "sub/deep.txt")


def png(width: int = 24, height: int = 16) -> bytes:
    """A small red PNG, made here (no image library)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\xdc\x26\x26" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


CONTENTS = {
    "plot.png": png(),
    "page.html": b"<html><script>document.title='ran'</script>a page</html>",
    "drawing.svg": b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
    "notes.txt": b"some notes\n",
    "sub/deep.txt": b"deep\n",
    "secret.txt": b"not claimed\n",
}


def main() -> int:
    prompt = json.loads(sys.stdin.readline())["prompt"]
    artifacts = []
    if "files" in prompt.split():
        ws = os.path.join(os.environ["JAZZ_HOME"], "workspace")
        os.makedirs(os.path.join(ws, "sub"), exist_ok=True)
        for name, data in CONTENTS.items():
            with open(os.path.join(ws, name), "wb") as fh:
                fh.write(data)
        artifacts = [
            {"kind": "file", "path": os.path.join(ws, n), "tool": "x", "source": "model"}
            for n in CLAIMED
        ]
    envelope = {
        "ok": True,
        "answer": f"answer to: {prompt}",
        "costUSD": 0.0,
        "costKnown": True,
        "tokenUsage": {"promptTokens": 1, "completionTokens": 1, "totalTokens": 2},
        "toolCalls": [],
        "artifacts": artifacts,
    }
    sys.stdout.write(json.dumps(envelope) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
