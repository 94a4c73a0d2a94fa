"""A file Slack sends as ``check_file_info`` (its id only) is saved under its real name.

Its name comes from files.info, which the surface called while downloading: the bytes came
back, the name did not, and the file was saved as ``attachments/1-F0FILE0001``: the agent
got no name and no extension to tell a report from a photo.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway, use_reference_runner
from slack_support import APP_TOKEN, BOT_TOKEN
from test_review_file_access import FakeWithFilesInfo
from test_slack import DM, event, vector, wait_post


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


async def test_a_check_file_info_file_is_saved_under_its_name(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    shared = fake.add_file("quarterly report.pdf", b"%PDF-1.7 numbers\n")
    body = copy.deepcopy(vector("direct_message"))
    body["event_id"] = "Ev0RVFILE2"
    body["event"].update(
        subtype="file_share",
        text="summarize the attached report",
        ts="1764700000.000200",
        event_ts="1764700000.000200",
        upload=True,
        files=[{"id": shared["id"], "mode": "file_access", "file_access": "check_file_info"}],
    )
    async with running_gateway(env) as (app, _client):
        assert await event(app.port, body) == 200
        await wait_post(fake, "summarize the attached report", channel=DM)
    saved = [p for p in Path(env["JAZZ_BRIDGE_ROOT"], "chats").rglob("*") if p.is_file()]
    saved = [p for p in saved if p.read_bytes() == b"%PDF-1.7 numbers\n"]
    assert len(saved) == 1, saved
    assert saved[0].name.endswith("quarterly_report.pdf"), f"saved as {saved[0].name}"
