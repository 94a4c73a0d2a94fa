"""``jazz-bridge config check`` printed a secret that also sat in a setting not itself secret.

The classic Telegram set-up puts the bot token in the webhook's path
(``https://host/telegram/webhook/<token>``, a proxy maps it): ``telegram.token`` was
masked, but ``telegram.webhook_url`` printed the same token in full, to a terminal, a
pasted support ticket or a CI log. The log lines and doctor already mask every configured
secret wherever it appears; ``config check``'s output now does too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOKEN = "123456:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"


def test_a_token_inside_another_setting_is_masked(tmp_path: Path) -> None:
    config = tmp_path / "jazz-bridge.toml"
    config.write_text(
        "[telegram]\n"
        f'token = "{TOKEN}"\n'
        "allowed_users = [111111111]\n"
        f'webhook_url = "https://bridge.example.com/telegram/webhook/{TOKEN}"\n'
        'webhook_secret = "0123456789abcdef0123456789abcdef"\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "config", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(REPO),
            "JAZZ_BRIDGE_ISOLATION": "off",
            "JAZZ_BRIDGE_ROOT": str(tmp_path / "root"),
        },
    )
    assert done.returncode == 0, done.stderr
    assert TOKEN not in done.stdout + done.stderr
    shown = json.loads(done.stdout)["telegram"]
    assert shown["webhook_url"].startswith("https://bridge.example.com/telegram/webhook/")
    assert shown["allowed_users"] == [111111111]  # the rest as it is
