"""Review: an artifact Slack refuses to take for good must be named in the thread.

The agent says "here is report.csv" and makes the file; the gateway uploads it with
files_upload_v2. When Slack refuses the upload for good (the app was installed without
``files:write``: ``missing_scope``; an admin turned file uploads off), the reply was
recorded as failed and logged, and the person saw nothing at all: an answer pointing at a
file that never came. The thread must get a note naming the file and why it is missing.

The real gateway, bolt and AsyncWebClient against the fake Slack Web API, the bundled
reference runner making the artifact.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway, use_reference_runner, wait_until
from slack_support import APP_TOKEN, BOT_TOKEN
from test_slack import CHANNEL, event, mention, posts, sample, wait_post

ROOT = "1764670300.000100"


class NoUploadsSlack(FakeSlackApi):
    """Slack refusing every upload for good, as it does for an app without files:write."""

    def _m_files_getUploadURLExternal(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": False, "error": "missing_scope", "needed": "files:write"}


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlackApi]:
    api = NoUploadsSlack(BOT_TOKEN, app_token=APP_TOKEN)
    await api.start()
    yield api
    await api.stop()


@pytest.fixture
def env(env: dict[str, str], fake_dir: Path) -> dict[str, str]:
    use_reference_runner(env, fake_dir)
    return env


async def test_an_artifact_slack_refuses_is_named_in_the_thread(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        assert await event(app.port, mention("Ev0NOUP", "!artifact report.csv", ts=ROOT)) == 200
        await wait_post(fake, "wrote workspace/report.csv")  # the answer itself
        failed = 0.0

        def settled() -> bool:  # the artifact's reply: failed, or a note in the thread
            nonlocal failed
            failed = sample(app, "jazz_bridge_replies_total", surface="slack", result="failed")
            return failed >= 1 or len(posts(fake, "report.csv")) >= 2

        await wait_until(settled, 20, "the artifact's reply settled")
        shown = [str(c.args.get("markdown_text"))[:70] for c in posts(fake)]
        assert len(posts(fake, "report.csv")) == 2, (
            f"the upload of report.csv was refused (missing_scope) and the thread got no note "
            f"about it: replies recorded failed: {failed:.0f}; posts in the thread: {shown}"
        )
        note = posts(fake, "report.csv")[1]
        body = str(note.args.get("markdown_text") or note.args.get("text"))
        assert "missing_scope" in body and "files:write" in body
        assert note.args["channel"] == CHANNEL and note.args["thread_ts"] == ROOT
        assert not fake.called("files.completeUploadExternal")
