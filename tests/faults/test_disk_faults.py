"""Disk faults: an unreadable or too-new state database at start, a full state directory.

* garbage in ``<root>/state/bridge.db`` -> moved aside to ``bridge.db.corrupt-<stamp>``
  (bytes kept) with a warning naming both paths; the gateway starts and answers;
* ``user_version`` newer than this code -> ``jazz-bridge serve`` refuses to start with a
  clear error and leaves the file byte for byte as it was;
* a tiny tmpfs mounted over ``<root>/state`` and filled (root) -> posting gets a clear 507
  and nothing is acknowledged that was not stored; once space is freed it works again. The
  same for Slack's and Telegram's webhooks: a refused delivery is a 507 (not a 500), so the
  platform delivers it again, and that delivery runs once space is back.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from accounts_support import remove_accounts
from faults_support import (
    gateway_env,
    install_runner,
    notes,
    nothing_left,
    running_gateway,
    wait_until,
)
from full_disk_support import fill
from platforms_support import (
    Outcome,
    deliver_slack,
    deliver_telegram,
    platform_settings,
    running_fakes,
    slack_event,
    slack_shown,
    telegram_shown,
    tg_update,
)

from bridge.store import SCHEMA_VERSION

pytestmark = pytest.mark.faults


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    install_runner(e, fake_dir, "fault_runner.py")
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def state_dir(env: dict[str, str]) -> Path:
    return Path(env["JAZZ_BRIDGE_ROOT"]) / "state"


async def first_life(env: dict[str, str]) -> None:
    """Start, answer one message, stop: a real database with a conversation in it."""
    async with running_gateway(env) as (_, client):
        await client.post("one", "first life")
        await client.wait_role("one", "assistant")


def corrupt_pages(db: Path) -> bytes:
    """Keep SQLite's header page, overwrite every later page with garbage."""
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big") or 65536
    assert len(data) > page, "the database has a single page"
    data[page:] = (b"\xde\xad\xbe\xef" * (len(data) // 4 + 1))[: len(data) - page]
    return bytes(data)


@pytest.mark.parametrize("damage", ["garbage", "pages"])
async def test_an_unreadable_database_is_moved_aside_and_the_gateway_starts(
    env: dict[str, str], damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    await first_life(env)
    db = state_dir(env) / "bridge.db"
    assert not (state_dir(env) / "bridge.db-wal").exists()
    bad = os.urandom(8192) if damage == "garbage" else corrupt_pages(db)
    db.write_bytes(bad)
    caplog.set_level(logging.WARNING)
    async with running_gateway(env) as (_, client):
        moved = sorted(state_dir(env).glob("bridge.db.corrupt-*"))
        assert [p.name for p in moved if not p.name.endswith(("-wal", "-shm"))] == [moved[0].name]
        assert moved[0].read_bytes() == bad  # kept as evidence, byte for byte
        assert moved[0].stat().st_mode & 0o007 == 0
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        named = [w for w in warnings if str(db) in w and str(moved[0]) in w]
        assert named, warnings
        await client.post("two", "second life")
        answers = await client.wait_role("two", "assistant")
        assert answers[0]["text"].startswith("ok: second life")
    print(f"\n{damage}: {named[0]}")


async def test_a_database_from_a_newer_version_is_refused_and_left_untouched(
    env: dict[str, str], tmp_path: Path
) -> None:
    await first_life(env)
    db = state_dir(env) / "bridge.db"
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    stat_before = db.stat()
    listing = sorted(p.name for p in state_dir(env).iterdir())
    done = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "serve"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    print(f"\nexit {done.returncode}: {done.stderr.strip()[-400:]}")
    assert done.returncode != 0
    assert f"schema version {SCHEMA_VERSION + 1}, newer than {SCHEMA_VERSION}" in done.stderr
    assert str(db) in done.stderr and "untouched" in done.stderr
    assert "Traceback" not in done.stderr
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert db.stat().st_mtime_ns == stat_before.st_mtime_ns
    assert sorted(p.name for p in state_dir(env).iterdir()) == listing


async def test_a_full_state_disk_refuses_clearly_and_recovers(
    env: dict[str, str], tiny_state: Path
) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("warm", "before the disk fills")
        await client.wait_role("warm", "assistant")
        filler = fill(tiny_state)
        statuses: list[int] = []
        acked: list[dict[str, Any]] = []
        refusal = ""
        for i in range(40):  # SQLite may still have room in pages it holds: bounded
            async with client.session.post(
                f"{client.base}/api/threads/full/messages",
                json={"user": "ada", "text": f"while full {i}"},
            ) as resp:
                statuses.append(resp.status)
                if resp.status == 202:
                    acked.append({"i": i, **await resp.json()})
                    continue
                refusal = await resp.text()
                break
        print(f"\nfull disk: statuses {statuses}, refusal {refusal!r}")
        assert statuses[-1] == 507, (statuses, refusal)
        assert "disk" in refusal.lower() and "full" in refusal.lower(), refusal
        # nothing acknowledged that was not stored
        stored = {m["messageId"] for m in await client.messages("full") if m["role"] == "user"}
        assert {a["id"] for a in acked} <= stored
        filler.unlink()
        await client.post("full", "space again")
        texts = [
            a["text"] for a in await client.wait_role("full", "assistant", count=1 + len(acked))
        ]
        assert any(t.startswith("ok: space again") for t in texts), texts
        await client.post("after", "a new conversation")
        answers = await client.wait_role("after", "assistant")
        assert answers[0]["text"].startswith("ok: a new conversation")
        # the refused message was not stored behind the client's back: never shown, never run
        refused_text = f"while full {len(statuses) - 1}"
        assert refused_text not in [m["text"] for m in await client.messages("full")]
        assert refused_text not in [n.get("prompt") for n in notes(client.fake_dir)]


async def test_a_run_that_ends_while_the_disk_is_full_is_answered_once_space_is_back(
    env: dict[str, str], tiny_state: Path, fake_dir: Path
) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("w", "wait W")
        await wait_until(lambda: any(n.get("word") == "wait" for n in notes(fake_dir)))
        filler = fill(tiny_state)
        (fake_dir / "release-W").touch()
        await nothing_left(fake_dir)  # the run is over (its outcome met a full disk)
        filler.unlink()

        async def replied() -> bool:
            msgs = await client.messages("w")
            return any(m["role"] in ("assistant", "error") for m in msgs)

        await wait_until(replied, 10, "a reply to the run that ended on a full disk")
        # the conversation's next answer comes after every earlier reply: a second copy of
        # the first would be there by then
        await client.post("w", "after the disk")
        await client.wait_role("w", "assistant", count=2)
        replies = [m for m in await client.messages("w") if m["role"] in ("assistant", "error")]
        assert [(m["role"], m["text"].split("\n")[0]) for m in replies] == [
            ("assistant", "ok: wait W"),
            ("assistant", "ok: after the disk"),
        ]
        assert len([n for n in notes(fake_dir) if n.get("word") == "wait"]) == 1  # ran once


async def test_a_run_that_cannot_start_on_a_full_disk_starts_once_space_is_back(
    env: dict[str, str], tiny_state: Path, fake_dir: Path
) -> None:
    """Y was accepted and waits for the one run slot; the disk fills; X ends and gives the
    slot to Y, whose start write fails: Y is kept (not dropped) and runs when space is back."""
    env["JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS"] = "1"
    async with running_gateway(env) as (_, client):
        await client.post("x", "wait X")
        await wait_until(lambda: any(n.get("word") == "wait" for n in notes(fake_dir)))
        await client.post("y", "hello from y")
        await client.wait_role("y", "status")  # told it waits for the gateway's limit
        filler = fill(tiny_state)
        (fake_dir / "release-X").touch()
        await nothing_left(fake_dir)  # X is over; its outcome and Y's start meet a full disk
        filler.unlink()
        answer = (await client.wait_role("y", "assistant", timeout=30))[0]["text"]
        assert answer.startswith("ok: hello from y"), answer
        await client.wait_role("x", "assistant", timeout=30)
        starts = [n for n in notes(fake_dir) if n.get("event") == "start"]
        assert [n["prompt"] for n in starts].count("hello from y") == 1


async def test_a_full_state_disk_refuses_platform_deliveries_until_space_is_back(
    env: dict[str, str], tiny_state: Path, fake_dir: Path
) -> None:
    channel, thread, chat = "C0DISKFULL", "1764669600.000100", 700_000_001
    async with running_fakes() as (slack, telegram):
        penv = {**env, **platform_settings(slack, telegram)}
        async with running_gateway(penv) as (_, client):
            session, base = client.session, client.base
            sent: dict[str, dict[str, Any]] = {}  # the Slack events, by event id
            updates: dict[int, dict[str, Any]] = {}

            def slack_body(n: int, text: str) -> dict[str, Any]:
                event_id = f"Ev0DISK{n:04d}"
                ts = thread if n == 0 else f"1764669600.{100 + n:06d}"
                sent[event_id] = slack_event(
                    event_id, text, channel=channel, ts=ts, thread_ts=None if n == 0 else thread
                )
                return sent[event_id]

            def tg_body(n: int, text: str) -> dict[str, Any]:
                updates[n] = tg_update(1000 + n, chat, 10 + n, text)
                return updates[n]

            def answered(shown: list[Any], text: str) -> int:
                return sum(1 for s in shown if s.text.startswith(f"ok: {text}"))

            async def both_answered(texts: list[str]) -> bool:
                on_slack = slack_shown(slack, channel, thread)
                on_telegram = telegram_shown(telegram, chat)
                return all(answered(on_slack, f"slack {t}") >= 1 for t in texts) and all(
                    answered(on_telegram, f"telegram {t}") >= 1 for t in texts
                )

            assert (await deliver_slack(session, base, slack_body(0, "slack warm"), 0))[0] is (
                Outcome.ACKED
            )
            assert (await deliver_telegram(session, base, tg_body(0, "telegram warm")))[0] is (
                Outcome.ACKED
            )
            await wait_until(lambda: both_answered(["warm"]), 30, "both warm-up answers")

            filler = fill(tiny_state)
            acked: list[str] = []  # texts acknowledged while the disk was full
            refused: dict[str, tuple[int, Any]] = {}  # platform -> (status, the delivery)
            for i in range(1, 41):  # SQLite may still have room in pages it holds: bounded
                outcome, status = await deliver_slack(
                    session, base, slack_body(i, f"slack full {i}"), 0
                )
                if outcome is Outcome.ACKED:
                    acked.append(f"slack full {i}")
                    continue
                refused["slack"] = (status, sent[f"Ev0DISK{i:04d}"])
                break
            for i in range(1, 41):
                outcome, status = await deliver_telegram(
                    session, base, tg_body(i, f"telegram full {i}")
                )
                if outcome is Outcome.ACKED:
                    acked.append(f"telegram full {i}")
                    continue
                refused["telegram"] = (status, updates[i])
                break
            print(f"\nfull disk: acked {acked}, refused {[(k, v[0]) for k, v in refused.items()]}")
            assert {k: v[0] for k, v in refused.items()} == {"slack": 507, "telegram": 507}

            filler.unlink()
            # the platforms deliver the refused ones again (Slack with its retry header)
            slack_again = await deliver_slack(session, base, refused["slack"][1], 1)
            tg_again = await deliver_telegram(session, base, refused["telegram"][1])
            assert slack_again[0] is Outcome.ACKED and tg_again[0] is Outcome.ACKED
            again = [
                refused["slack"][1]["event"]["text"],
                refused["telegram"][1]["message"]["text"],
            ]

            async def all_answered() -> bool:
                on_slack = slack_shown(slack, channel, thread)
                on_telegram = telegram_shown(telegram, chat)
                shown = on_slack + on_telegram
                return all(answered(shown, t) >= 1 for t in acked + again)

            await wait_until(all_answered, 30, "answers to everything acknowledged")
            await nothing_left(fake_dir)
            shown = slack_shown(slack, channel, thread) + telegram_shown(telegram, chat)
            assert all(answered(shown, t) == 1 for t in acked + again), [s.text for s in shown]
            prompts = [n.get("prompt") for n in notes(fake_dir) if n.get("event") == "start"]
            assert all(prompts.count(t) == 1 for t in acked + again), prompts
