"""Files shared with the bot on Slack: downloaded into the conversation's home (the bot token
as a bearer; Slack's login page instead of the file is refused), a file Slack sends as
``check_file_info`` (its id only) fetched through files.info and saved under its real name,
and files Slack did not make available (deleted, hidden by the storage limit) named to the
agent instead of dropped.

The fake Slack API of some tests here also serves ``files.info`` (the real method) with the
file's URL."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway
from slack_support import (
    BOT_TOKEN,
    CHANNEL,
    DM,
    TEAM,
    event,
    mention,
    message,
    posts,
    vector,
    wait_post,
    with_fake,
)


async def test_a_shared_file_is_downloaded_into_the_home(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        f = fake.add_file("notes.txt", b"incident notes\n")
        body = mention("Ev0FILE", "read this", ts="1764670400.000100", files=[f])
        body["event"]["subtype"] = "file_share"
        assert await event(app.port, body) == 200
        (answer,) = await wait_post(fake, "read this")
        assert "Attachments: 1" in answer.args["markdown_text"]
        (download,) = fake.downloads
        assert download == (f["id"], f"Bearer {BOT_TOKEN}")
        key = f"slack:{TEAM}:{CHANNEL}:1764670400.000100"
        home = await asyncio.to_thread(app.provisioned.homes.ensure, key)
        (saved,) = (home.path / "workspace" / "attachments").glob("*notes.txt")
        assert saved.read_bytes() == b"incident notes\n"
        assert f"attachments/{saved.name}" in answer.args["markdown_text"]
        assert saved.stat().st_uid == home.account.uid

        login = fake.add_file("secret.pdf", b"%PDF", login_page=True)
        body = mention("Ev0LOGIN", "and this", ts="1764670500.000100", files=[login])
        assert await event(app.port, body) == 200
        (error,) = await wait_post(fake, "login page")
        assert error.args["thread_ts"] == "1764670500.000100"
        home2 = await asyncio.to_thread(
            app.provisioned.homes.ensure, f"slack:{TEAM}:{CHANNEL}:1764670500.000100"
        )
        assert not list((home2.path / "workspace" / "attachments").glob("*secret.pdf"))


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


@with_fake(FakeWithFilesInfo)
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


@with_fake(FakeWithFilesInfo)
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


async def test_files_slack_did_not_make_available_are_named_to_the_agent(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        hidden = message("Ev0GONE1", "", ts="1764683000.000100", channel=DM)
        hidden["event"]["subtype"] = "file_share"
        hidden["event"]["files"] = [
            {"id": "F0GONE0001", "mode": "hidden_by_limit", "name": "q3-report.pdf"}
        ]
        assert await event(app.port, hidden) == 200
        (answer,) = await wait_post(fake, "q3-report.pdf", channel=DM, timeout=15)
        assert "did not make available" in answer.args["markdown_text"]
        assert not posts(fake, "`!new`", channel=DM), "answered with the help text"

        asked = message("Ev0GONE2", "what is in it?", ts="1764683100.000100", channel=DM)
        asked["event"]["subtype"] = "file_share"
        asked["event"]["files"] = [{"id": "F0GONE0002", "mode": "tombstone"}]
        assert await event(app.port, asked) == 200
        (answer,) = await wait_post(fake, "what is in it?", channel=DM, timeout=15)
        assert "shared a file, which Slack did not make available" in answer.args["markdown_text"]
