"""Files sent with a web chat message (adapters/web/form.py, uploads.py), the real gateway
in process and a real aiohttp client: a file lands in the conversation's home as every
platform's attachment does (``workspace/attachments/<message id>-<name>``, the
conversation's account and 0640 as root with isolation, the gateway's and 0600 without),
the agent is told its path with the message, and the page links it (an image previewed)
through the thread's file route; a file over ``limits.max_attachment_bytes`` is 413 saying
the limit, a name with a control character a clear 400, one with separators and dots cut
to a plain name; without the token 401, a form without ``X-Requested-With`` 403; and
whatever is refused leaves nothing staged and nothing stored."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import full_disk_support as full_disk
import pytest
from accounts_support import remove_accounts
from files_runner import png
from web_support import Client, gateway_env, running_gateway, wait_until

from provisioning.layout import Layout

WEB_TOKEN = "web-token-for-the-upload-tests-0123"
FORM_HEADERS = {"X-Requested-With": "test"}


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def form(fields: dict[str, str], files: list[tuple[str, bytes]]) -> tuple[bytes, str]:
    """A ``multipart/form-data`` body as a browser makes it, and its Content-Type."""
    boundary = "----jbtest" + secrets.token_hex(8)
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in fields.items()
    ]
    for name, data in files:
        # a name with a control character as RFC 5987 has it (raw, it would end the header)
        given = (
            f"filename*=UTF-8''{quote(name)}" if not name.isprintable() else f'filename="{name}"'
        )
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; {given}\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        )
        parts.append(head.encode() + data + b"\r\n")
    end = f"--{boundary}--\r\n".encode()
    return b"".join(parts) + end, f"multipart/form-data; boundary={boundary}"


async def send(
    client: Client,
    thread: str,
    files: list[tuple[str, bytes]],
    text: str = "look at this",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    body, kind = form({"user": "ada", "text": text}, files)
    sent = {"Content-Type": kind, **(FORM_HEADERS if headers is None else headers)}
    url = f"{client.base}/api/threads/{thread}/messages"
    async with client.session.post(url, data=body, headers=sent) as r:
        return r.status, await r.json()


def staged(env: dict[str, str]) -> list[str]:
    """What waits in ``state/web-uploads`` (partials included)."""
    stage = Layout(Path(env["JAZZ_BRIDGE_ROOT"])).state / "web-uploads"
    return sorted(os.listdir(stage)) if stage.exists() else []


async def saved_files(client: Client, thread: str, count: int = 1) -> list[dict[str, Any]]:
    """The files the thread's user messages carry, once ``count`` of them are saved."""
    found: list[dict[str, Any]] = []

    async def linked() -> bool:
        messages = await client.messages(thread)
        found[:] = [f for m in messages if m["role"] == "user" for f in m.get("files", [])]
        return len([f for f in found if f["fileUrl"]]) >= count

    await wait_until(linked, 30, f"{count} saved file(s) in {thread}")
    return found


@pytest.mark.parametrize("isolation", ["auto", "off"])
async def test_a_file_sent_with_a_message_lands_in_the_home_and_reaches_the_agent(
    env: dict[str, str], isolation: str
) -> None:
    env["JAZZ_BRIDGE_ISOLATION"] = isolation
    image = png()
    async with running_gateway(env) as (app, client):
        status, answer = await send(client, "up", [("plot.png", image)])
        assert status == 202, answer
        assert answer["files"] == [{"name": "plot.png", "size": len(image)}], answer
        await client.wait_role("up", "assistant", timeout=30)
        (file,) = await saved_files(client, "up")
        assert app.provisioned is not None
        home = await asyncio.to_thread(app.provisioned.homes.ensure, "web:up")
        saved = home.path / file["file"]
        assert file["file"] == f"workspace/attachments/{answer['id']}-plot.png", file
        assert saved.read_bytes() == image
        st = saved.stat()
        isolated = os.geteuid() == 0 and isolation == "auto"
        assert home.isolated is isolated
        owner = (home.account.uid, home.operator_gid) if isolated else (os.getuid(),)
        assert (st.st_uid, st.st_gid)[: len(owner)] == owner
        assert st.st_mode & 0o7777 == (0o640 if isolated else 0o600)
        # the agent was told its path, from its working directory, with the message
        (start,) = client.starts("web:up")
        assert start["prompt"].startswith("look at this")
        assert f"attachments/{answer['id']}-plot.png" in start["prompt"], start["prompt"]
        assert str(home.path) not in start["prompt"]
        # the page links it and previews it; never a server path
        assert file["fileName"] == "plot.png" and file["preview"] is True, file
        messages = json.dumps(await client.messages("up"))
        assert env["JAZZ_BRIDGE_ROOT"] not in messages
        async with client.session.get(client.base + file["fileUrl"]) as r:
            assert r.status == 200
            assert r.headers["Content-Type"] == "image/png"
            assert r.headers["Content-Disposition"].startswith("inline;")
            assert await r.read() == image
        assert staged(env) == []  # taken by its turn: nothing left waiting


async def test_a_file_over_the_limit_is_413_and_nothing_is_kept(env: dict[str, str]) -> None:
    env["JAZZ_BRIDGE_LIMITS__MAX_ATTACHMENT_BYTES"] = "1000"
    async with running_gateway(env) as (_, client):
        fits = ("small.txt", b"s" * 1000)
        status, answer = await send(client, "big", [fits, ("big.bin", b"b" * 1001)])
        assert status == 413, answer
        assert "big.bin is over the 1,000-byte limit" in answer["error"], answer
        assert "limits.max_attachment_bytes" in answer["error"]
        assert staged(env) == []  # the one that fitted went too
        assert await client.messages("big") == []
        assert client.runs() == []
        async with client.session.get(client.base + "/metrics") as r:
            assert 'platform="web",reason="too_big"} 1.0' in await r.text()
        status, answer = await send(client, "big", [fits])  # at the limit: taken
        assert status == 202, answer


async def test_a_file_larger_than_a_request_body_may_be_is_streamed_in(
    env: dict[str, str],
) -> None:
    """``server.max_body_bytes`` (here 64 KiB) bounds what is held in memory; a form is
    streamed to disk, so a file of 3 MiB (under ``limits.max_attachment_bytes``) is taken."""
    env["JAZZ_BRIDGE_SERVER__MAX_BODY_BYTES"] = str(64 * 1024)
    data = secrets.token_bytes(3 * 1024 * 1024)
    async with running_gateway(env) as (app, client):
        status, answer = await send(client, "large", [("data.bin", data)])
        assert status == 202, answer
        (file,) = await saved_files(client, "large")
        assert app.provisioned is not None
        home = await asyncio.to_thread(app.provisioned.homes.ensure, "web:large")
        assert (home.path / file["file"]).read_bytes() == data
        assert file["preview"] is False


async def test_a_file_the_full_disk_cannot_keep_is_507_and_not_stored(
    env: dict[str, str], tiny_state: Path
) -> None:
    """State on a full tmpfs: the file cannot be staged, so the message is NOT stored (507,
    said so) and no half-written file stays; with room again, the same form is taken."""
    async with running_gateway(env) as (_, client):
        filler = await asyncio.to_thread(full_disk.fill, tiny_state)
        status, answer = await send(client, "full", [("big.bin", b"f" * 256 * 1024)])
        assert status == 507, answer
        assert "disk is full" in answer["error"] and "NOT stored" in answer["error"], answer
        assert env["JAZZ_BRIDGE_ROOT"] not in answer["error"]
        assert staged(env) == []
        filler.unlink()
        assert await client.messages("full") == [] and client.runs() == []
        status, answer = await send(client, "full", [("big.bin", b"f" * 256 * 1024)])
        assert status == 202, answer


async def test_a_file_name_is_made_plain_or_refused_clearly(env: dict[str, str]) -> None:
    async with running_gateway(env) as (app, client):
        for bad in ("notes\n.txt", "a\x00b.txt", "tab\there.txt", "..", "/"):
            status, answer = await send(client, "names", [(bad, b"x")])
            assert status == 400, (bad, status, answer)
            reason = answer["error"]
            clear = ("control character", "names no file", "needs a file name")
            assert any(why in reason for why in clear), (bad, reason)
        assert staged(env) == [] and await client.messages("names") == []
        status, answer = await send(client, "names", [("../../etc/pass wd.txt", b"climb")])
        assert status == 202, answer
        assert answer["files"] == [{"name": "pass_wd.txt", "size": 5}], answer
        (file,) = await saved_files(client, "names")
        assert file["file"] == f"workspace/attachments/{answer['id']}-pass_wd.txt", file
        assert app.provisioned is not None
        home = await asyncio.to_thread(app.provisioned.homes.ensure, "web:names")
        assert (home.path / file["file"]).read_bytes() == b"climb"


async def test_a_form_needs_the_token_and_its_header(env: dict[str, str]) -> None:
    env["JAZZ_BRIDGE_WEB__TOKEN"] = WEB_TOKEN
    bearer = {"Authorization": f"Bearer {WEB_TOKEN}"}
    async with running_gateway(env) as (_, client):
        status, answer = await send(client, "auth", [("a.txt", b"a")])
        assert status == 401, answer
        status, answer = await send(client, "auth", [("a.txt", b"a")], headers=bearer)
        assert status == 403 and "X-Requested-With" in answer["error"], answer
        assert staged(env) == [] and client.runs() == []
        status, answer = await send(
            client, "auth", [("a.txt", b"a")], headers={**bearer, **FORM_HEADERS}
        )
        assert status == 202, answer


async def test_a_repeated_form_is_one_message_and_keeps_no_second_copy(
    env: dict[str, str],
) -> None:
    """The page sends a form again with its Idempotency-Key when the first answer was lost:
    the duplicate's files are dropped at once, the first message's run gets its own."""
    headers = {**FORM_HEADERS, "Idempotency-Key": "k-1"}
    async with running_gateway(env) as (_, client):
        first = await send(client, "again", [("a.txt", b"hold AGAIN")], "hold AGAIN", headers)
        second = await send(client, "again", [("a.txt", b"hold AGAIN")], "hold AGAIN", headers)
        assert first[0] == second[0] == 202 and second[1]["duplicate"], (first, second)
        assert second[1]["id"] == first[1]["id"]
        assert len(staged(env)) <= 1  # the duplicate's copy is gone; the first's waits
        client.release("AGAIN")
        await client.wait_role("again", "assistant", timeout=30)
        assert staged(env) == []


async def test_staged_uploads_no_message_takes_are_swept(env: dict[str, str]) -> None:
    async with running_gateway(env) as (app, _client):
        (web,) = [a for a in app.adapters if a.name == "web"]
        uploads = web.uploads  # type: ignore[attr-defined]
        upload_id, fd = await asyncio.to_thread(uploads.open_partial)
        await asyncio.to_thread(uploads.write, fd, b"orphan")
        await asyncio.to_thread(uploads.finish, upload_id, fd)
        assert staged(env) == [upload_id]
        assert await web.sweep_uploads() == 0  # too young: its message may be on its way
        stage = Layout(Path(env["JAZZ_BRIDGE_ROOT"])).state / "web-uploads"
        assert (stage.stat().st_mode & 0o7777, (stage / upload_id).stat().st_mode & 0o7777) == (
            0o700,
            0o600,
        )
        old = time.time() - 3600
        os.utime(stage / upload_id, (old, old))
        assert await web.sweep_uploads() == 1
        assert staged(env) == []
