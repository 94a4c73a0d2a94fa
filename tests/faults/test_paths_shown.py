"""Red team (issue 21, finding 6): what people are told never names the gateway's root.

A conversation's home lies under the root (``/srv/jazz-bridge/chats/<home>/``). The refusals
the gateway writes into the chat named absolute paths there: an artifact the runner claimed
outside the home (``Artifact `bridge.db` not sent: artifact /srv/jazz-bridge/state/bridge.db
is outside ...``) or one that is a link, a file Telegram named on the gateway's own disk
(the turn's "could not fetch ..." and an album's "Left out: ..."), and the agent's prompt
listed the attachments by their full paths (which the reference runner echoes). People now
see files named relative to the home (``workspace/plot.png``); the log keeps the full path
for operators.

The real gateway (in process) through the web API and through Telegram in webhook mode
against the fake Bot API; a runner of this test's own claims the artifacts. Every wait is
bounded.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from accounts_support import needs_root, remove_accounts
from fake_bot_api import FakeBotApi
from gateway_harness import (
    gateway_env,
    running_gateway,
    use_reference_runner,
    wait_until,
)

from bridge.runner.command import shared_interpreter
from provisioning import naming
from provisioning.layout import Layout

pytestmark = [
    pytest.mark.faults,
    needs_root,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]

TG_TOKEN = "999999999:AApaths-shown_token-for-the-fake"
TG_SECRET = "paths-shown_webhook-secret"
ADA = 111111111

# Claims four artifacts the gateway must refuse and one it sends: the gateway's database
# (outside the home), a link to a file outside, a file through a linked directory, a file
# that is not there; and a file of its own in the workspace.
RUNNER = r"""
import json, os, sys
json.loads(sys.stdin.readline())
home = os.environ["JAZZ_HOME"]
root = os.path.dirname(os.path.dirname(home))
ws = os.path.join(home, "workspace")
for name, target in (("plot.png", "/etc/hostname"), ("figures", "/etc")):
    if not os.path.lexists(os.path.join(ws, name)):
        os.symlink(target, os.path.join(ws, name))
with open(os.path.join(ws, "made.png"), "wb") as fh:
    fh.write(b"\x89PNG made by the run")
claims = [
    os.path.join(root, "state", "bridge.db"),
    os.path.join(ws, "plot.png"),
    os.path.join(ws, "figures", "hostname"),
    os.path.join(ws, "gone.png"),
    os.path.join(ws, "made.png"),
]
env = {"ok": True, "answer": "made five files", "costUSD": 0.0, "costKnown": True,
       "tokenUsage": {"promptTokens": 1, "completionTokens": 1, "totalTokens": 2},
       "toolCalls": [], "artifacts": [{"kind": "file", "path": p, "mediaType": "image/png",
       "tool": "x", "source": "model"} for p in claims]}
sys.stdout.write(json.dumps(env) + "\n")
sys.stdout.flush()
"""


def root_paths(root: Path) -> set[str]:
    """The root as it may be spelled in a text: as configured, and its real location."""
    return {str(root), os.path.realpath(root)}


def naming_root(texts: list[str], root: Path) -> list[str]:
    return [t for t in texts if any(p in t for p in root_paths(root))]


@pytest.fixture
def web_env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    env = gateway_env(tmp_path / "root", fake_dir, uid_range)
    runner = fake_dir / "paths_runner.py"
    runner.write_text(RUNNER)
    os.chmod(runner, 0o755)
    env["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps([shared_interpreter(), str(runner)])
    yield env
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_artifact_refusals_name_files_relative_to_the_home(
    web_env: dict[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "root"
    home = Layout(root).home(naming.home_name("web:paths"))
    caplog.set_level(logging.WARNING, logger="bridge")
    async with running_gateway(web_env) as (_app, client):
        await client.post("paths", "make some files")
        await client.wait_role("paths", "assistant", 2)  # the answer and the one file sent

        async def refused() -> bool:
            notes = [m for m in await client.messages("paths") if "not sent" in m["text"]]
            return len(notes) >= 4

        await wait_until(refused, 20, "four artifact refusals")
        messages = await client.messages("paths")
    shown = [str(m["text"]) for m in messages] + [str(m.get("file") or "") for m in messages]
    print("\n" + "\n".join(f"{m['role']}: {m['text']!r} file={m.get('file')!r}" for m in messages))
    assert not naming_root(shown, root), naming_root(shown, root)
    notes = "\n".join(t for t in shown if "not sent" in t)
    for name in ("workspace/plot.png", "workspace/figures/hostname", "workspace/gone.png"):
        assert name in notes, (name, notes)  # named, relative to the home
    assert "bridge.db" in notes, notes
    (sent,) = [m for m in messages if m.get("file")]
    assert sent["file"] == "workspace/made.png", sent
    # the operators' log keeps the full paths
    logged = caplog.text
    assert f"{home}/workspace/plot.png" in logged, logged[-2000:]
    assert f"{root}/state/bridge.db" in logged, logged[-2000:]


# -- an attachment refused: Telegram names a file on the gateway's own disk ----------------------


@pytest.fixture
def tg_env(
    tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int], bot_api: FakeBotApi
) -> Iterator[dict[str, str]]:
    env = gateway_env(
        tmp_path / "root",
        fake_dir,
        uid_range,
        JAZZ_BRIDGE_WEB__ENABLED="false",
        JAZZ_BRIDGE_TELEGRAM__TOKEN=TG_TOKEN,
        JAZZ_BRIDGE_TELEGRAM__API_URL=bot_api.api_url,
        JAZZ_BRIDGE_TELEGRAM__WEBHOOK_URL="https://bridge.example/telegram/webhook",
        JAZZ_BRIDGE_TELEGRAM__WEBHOOK_SECRET=TG_SECRET,
        JAZZ_BRIDGE_TELEGRAM__ALLOW_EVERYONE="true",
        JAZZ_BRIDGE_TELEGRAM__MIN_SEND_INTERVAL_S="0",
    )
    use_reference_runner(env, fake_dir)  # its answer lists the files it was given
    yield env
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def tg_message(update_id: int, **fields: Any) -> dict[str, Any]:
    person = {"id": ADA, "is_bot": False, "first_name": "Ada"}
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id % 100000,
            "from": person,
            "chat": {"id": ADA, "type": "private", "first_name": "Ada"},
            "date": 1764669660,
            **fields,
        },
    }


async def deliver(port: int, update: dict[str, Any]) -> int:
    headers = {"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": TG_SECRET}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"http://127.0.0.1:{port}/telegram/webhook", data=json.dumps(update), headers=headers
        ) as resp,
    ):
        return resp.status


def sent(api: FakeBotApi) -> list[str]:
    return [
        str(c.params.get("text") or "")
        for c in api.called("sendMessage")
        if int(c.params["chat_id"]) == ADA
    ]


async def test_an_attachment_refusal_names_no_path_of_the_root(
    tg_env: dict[str, str], bot_api: FakeBotApi, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    local = str(root / "state" / "bridge.db")  # on the gateway's disk: refused, never read
    bot_api.add_file("doc-local", local, b"never fetched")
    bot_api.add_file("ph-local", local, b"never fetched")
    bot_api.add_file("ph-ok", "photos/file_1.jpg", b"\xff\xd8 a photo")
    async with running_gateway(tg_env) as (app, _client):
        document = {
            "file_id": "doc-local",
            "file_unique_id": "udoc-local",
            "file_name": "report.pdf",
            "mime_type": "application/pdf",
        }
        update = tg_message(740000001, document=document, caption="summarize this")
        assert await deliver(app.port, update) == 200

        async def failed() -> bool:
            return any(t.startswith("❌") for t in sent(bot_api))

        await wait_until(failed, 30, "the refusal of the document")
        # an album of two: the run gets the photo that came, the person hears of the other
        for i, file_id in enumerate(("ph-ok", "ph-local")):
            size = {"file_id": file_id, "file_unique_id": f"u{file_id}", "width": 9, "height": 9}
            item = tg_message(740000002 + i, photo=[size], media_group_id="13589170000000007")
            if i == 0:
                item["message"]["caption"] = "compare these"
            assert await deliver(app.port, item) == 200

        async def answered() -> bool:
            texts = sent(bot_api)
            return any("Left out" in t for t in texts) and any("compare these" in t for t in texts)

        await wait_until(answered, 30, "the album's answer and its left-out notice")
    texts = sent(bot_api)
    print("\n" + "\n---\n".join(texts))
    assert not naming_root(texts, root), naming_root(texts, root)
    (answer,) = [t for t in texts if "compare these" in t]
    assert "Attachments: 1." in answer, answer
    assert TG_TOKEN not in "\n".join(texts)
