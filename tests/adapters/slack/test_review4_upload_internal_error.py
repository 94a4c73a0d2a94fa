"""Review: an upload Slack answered ``internal_error`` was uploaded again.

Slack's ``internal_error`` (HTTP 200, ``ok: false``) says "it's possible some aspect of the
operation succeeded before the error was raised": files.completeUploadExternal may have
shared the file into the thread all the same. A post that failed so is looked up by its
reply key before it is sent again; an upload was not: a file message has no metadata,
only an upload marked "in doubt" is looked for by its name and size, and internal_error
did not mark it. The core's retry found nothing and uploaded the file a second time: the
agent's artifact twice in the thread.

The real gateway, bolt and AsyncWebClient against the fake Slack Web API.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway, use_reference_runner, wait_until
from test_slack import CHANNEL, event, mention, sample


@pytest.mark.parametrize("kind", ["internal_error", "5xx"])
async def test_an_upload_answered_internal_error_is_found_not_uploaded_again(
    env: dict[str, str], fake: FakeSlackApi, fake_dir: Path, kind: str
) -> None:
    use_reference_runner(env, fake_dir)
    fake.fail("files.completeUploadExternal", kind, commit=True)  # shared, then the error
    async with running_gateway(env) as (app, _client):
        root = "1764670400.000100"
        assert await event(app.port, mention("Ev0ARTIE", "!artifact plot.png", ts=root)) == 200
        await wait_until(
            lambda: (
                sample(app, "jazz_bridge_replies_total", surface="slack", result="confirmed")
                + sample(app, "jazz_bridge_replies_total", surface="slack", result="sent")
                >= 2
            ),
            30,
            "the answer and the artifact delivered",
        )
        shared = [m for m in fake.thread(CHANNEL, root) if m.get("files")]
        names = [f["name"] for m in shared for f in m["files"]]
        assert names == ["plot.png"], f"the artifact is in the thread {len(names)} times"
        completions = [c for c in fake.calls if c.method == "files.completeUploadExternal"]
        assert len(completions) == 1
