"""Review: a file Slack sends as ``file_access: "check_file_info"`` is silently dropped.

Slack sends some shared files without their URLs (Slack Connect, and DMs as in the payload
below, taken from a real ``file_share`` event): only ``id`` and ``"file_access":
"check_file_info"``, meaning "call files.info for the rest". ``_attachments`` skips any file
without ``url_private(_download)``, so the agent runs on the text alone ("summarize the
attached report") and nobody is told the file never reached it; a message with only such a
file is answered with the help text.

The fake Slack API here also serves ``files.info`` (the real method) with the file's URL.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway, use_reference_runner
from slack_support import APP_TOKEN, BOT_TOKEN
from test_slack import DM, TEAM, event, vector, wait_post


class FakeWithFilesInfo(FakeSlackApi):
    def _m_files_info(self, args: dict[str, Any]) -> dict[str, Any]:
        file_id = str(args.get("file") or "")
        if file_id not in self.files:
            return {"ok": False, "error": "file_not_found"}
        name, data, _login = self.files[file_id]
        url = f"{self.base}/files-pri/{self.team}-{file_id}/download/{name}"
        return {
            "ok": True,
            "file": {
                "id": file_id,
                "name": name,
                "title": name,
                "mimetype": "text/plain",
                "size": len(data),
                "url_private": url,
                "url_private_download": url,
            },
        }


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlackApi]:
    api = FakeWithFilesInfo(BOT_TOKEN, app_token=APP_TOKEN)
    await api.start()
    yield api
    await api.stop()


@pytest.fixture
def env(env: dict[str, str], fake_dir: Path) -> dict[str, str]:
    use_reference_runner(env, fake_dir)
    return env


async def test_a_check_file_info_file_reaches_the_agent_or_the_person_is_told(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    shared = fake.add_file("report.txt", b"quarterly numbers\n")
    body = copy.deepcopy(vector("direct_message"))
    body["event_id"] = "Ev0RVFILE1"
    body["event"].update(
        subtype="file_share",
        text="summarize the attached report",
        ts="1764700000.000100",
        event_ts="1764700000.000100",
        upload=True,
        files=[  # as Slack sends it: no name, no URL
            {
                "id": shared["id"],
                "mode": "file_access",
                "file_access": "check_file_info",
                "created": 0,
                "timestamp": 0,
                "user": "",
            }
        ],
    )
    assert body["team_id"] == TEAM
    async with running_gateway(env) as (app, _client):
        assert await event(app.port, body) == 200
        (answer,) = await wait_post(fake, "summarize the attached report", channel=DM)
        text = str(answer.args.get("markdown_text"))
        told = [
            c
            for c in fake.called("chat.postMessage")
            if c.args.get("channel") == DM and shared["id"] in str(c.args)
        ]
        assert "Attachments: 1" in text or told, (
            "the file was dropped without a word; the agent saw only: " + text[:300]
        )
