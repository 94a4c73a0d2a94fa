"""Review: a platform address the client library cannot read is a clear error, not a trace.

``telegram.api_url = "http://[::1/bot"`` (an IPv6 address missing its closing bracket):
the Telegram library raised a ValueError nothing expected, and ``jazz-bridge serve`` died
with a 40-line Python traceback (exit status 1) that named neither Telegram nor the setting.
Now the address is checked with the configuration (``config check`` names it too); an
adapter failing at start in a way nobody foresaw is still one line (``app._adapter_step``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BOT_TOKEN = "123456:AAE-real-looking-bot-token_xyz"


def test_an_unreadable_platform_address_is_named_not_a_traceback(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "JAZZ_BRIDGE_ROOT": str(tmp_path / "root"),
        "JAZZ_BRIDGE_SERVER__PORT": "0",
        "JAZZ_BRIDGE_ISOLATION": "off",
        "JAZZ_BRIDGE_TELEGRAM__TOKEN": BOT_TOKEN,
        "JAZZ_BRIDGE_TELEGRAM__MODE": "polling",
        "JAZZ_BRIDGE_TELEGRAM__ALLOW_EVERYONE": "true",
        "JAZZ_BRIDGE_TELEGRAM__API_URL": "http://[::1/bot",
    }
    done = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "serve"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = done.stderr.strip().splitlines()
    print(f"\nexit status {done.returncode}; last line: {lines[-1] if lines else ''!r}")
    assert not [line for line in lines if line.startswith("Traceback")], done.stderr[-3000:]
    assert done.returncode == 2
    error = done.stderr[done.stderr.index("jazz-bridge: error: ") :]
    assert "telegram.api_url" in error and "Invalid IPv6 URL" in error, error
    assert BOT_TOKEN not in done.stderr
