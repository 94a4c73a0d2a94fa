"""Retention: old records pruned (never an undelivered reply or an unanswered message), the
log size-capped, idle homes archived by the sweep and restored by the next message."""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway, use_reference_runner, wait_until

from bridge.cli import setup_logging
from bridge.config import load_settings
from bridge.model import Inbound, InboxState, Outgoing, ReplyKind, ReplyState, ReplyTarget
from bridge.store import NewReply, PromptRecord, RunOutcome, SqliteStore
from provisioning import naming
from provisioning.archive import is_archived, tarball_path

DONE = RunOutcome(ok=True, exit_code=0, envelope_code=None)


def _inbound(key: str, event: str, text: str = "hi") -> Inbound:
    return Inbound(platform="web", event_id=event, thread_key=key, sender_id="ada", text=text)


def _reply(conv: int, msg: int | None, key: str, thread: str) -> NewReply:
    return NewReply(
        dedupe_key=key,
        conversation_id=conv,
        outgoing=Outgoing(ReplyKind.ANSWER, f"reply {key}"),
        target=ReplyTarget(surface="web", thread_key=thread, context={}),
        message_id=msg,
    )


async def test_prune_keeps_what_is_not_finished(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "bridge.db")
    await store.open()
    try:
        key = "web:old"
        home = naming.home_name(key)

        async def msg(event: str) -> int:
            rec, _ = await store.accept(_inbound(key, event), home=home, is_command=False)
            return rec.id

        # answered, reply sent: all of it goes
        done = await msg("done")
        run = await store.start_run(done, "ada", 1)
        [sent] = await store.finish_run(
            run.id, DONE, InboxState.DONE, [_reply(run.conversation_id, done, "sent", key)]
        )
        await store.mark_reply(sent.id, ReplyState.SENT)
        # answered, reply not delivered yet: the reply and its message stay
        waiting = await msg("waiting")
        run2 = await store.start_run(waiting, "ada", 1)
        [pending] = await store.finish_run(
            run2.id, DONE, InboxState.DONE, [_reply(run.conversation_id, waiting, "pend", key)]
        )
        # a finished run with an answered prompt: both go
        await store.add_prompts(
            [PromptRecord("tok-old", run.id, run.conversation_id, "ada", "approval", "c1")]
        )
        await store.resolve_prompt("tok-old", {"approved": True})
        # never answered: stays; in flight with a pending prompt: stays
        queued = await msg("queued")
        running = await msg("running")
        run3 = await store.start_run(running, "ada", 1)
        await store.add_prompts(
            [PromptRecord("tok-live", run3.id, run.conversation_id, "ada", "approval", "c2")]
        )

        counts = await store.prune(time.time() + 3600)
        assert counts == {"prompts": 1, "replies": 1, "runs": 2, "messages": 1}
        assert await store.get_message(done) is None
        assert await store.get_reply(sent.id) is None
        kept = await store.get_reply(pending.id)
        assert kept is not None and kept.state is ReplyState.PENDING
        assert [r.id for r in await store.undelivered_replies()] == [pending.id]
        assert (await store.get_message(waiting)) is not None
        assert (await store.get_message(queued)).state is InboxState.ACCEPTED  # type: ignore[union-attr]
        assert [r.id for r in await store.runs(run.conversation_id)] == [run3.id]
        assert [p.token for p in await store.pending_prompts(run.conversation_id)] == ["tok-live"]
        assert await store.get_prompt("tok-old") is None
        # a cut-off in the past prunes nothing
        assert set((await store.prune(0)).values()) == {0}
        # once delivered, the reply and then its message go too
        await store.mark_reply(pending.id, ReplyState.SENT)
        again = await store.prune(time.time() + 3600)
        assert again["replies"] == 1 and again["messages"] == 1
        assert await store.get_message(waiting) is None
    finally:
        await store.close()


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_the_gateway_sweeps_old_records(env: dict[str, str]) -> None:
    env["JAZZ_BRIDGE_RETENTION__RECORDS_DAYS"] = str(1 / 86400)  # one second
    env["JAZZ_BRIDGE_RETENTION__SWEEP_EVERY_S"] = "0.2"
    async with running_gateway(env) as (app, client):
        await client.post("sweep", "hello")
        await client.wait_role("sweep", "assistant")
        assert app.store is not None and app.sweeper is not None
        conv = await app.store.conversation_by_key("web:sweep")
        assert conv is not None and await app.store.runs(conv.id)
        store = app.store

        async def pruned() -> bool:
            return not await store.runs(conv.id) and not await store.transcript("web:sweep")

        await wait_until(pruned, what="the run and the transcript pruned")
        # the conversation itself (and its home) stays
        assert await app.store.conversation_by_key("web:sweep") is not None
        sweeper = app.sweeper
    assert sweeper._task is None  # stopped and awaited with the gateway


def test_the_log_file_is_size_capped(tmp_path: Path) -> None:
    log_file = tmp_path / "logs" / "jazz-bridge.log"
    settings = load_settings(
        None,
        environ={
            "JAZZ_BRIDGE_LOG__FILE": str(log_file),
            "JAZZ_BRIDGE_LOG__MAX_BYTES": "4096",
            "JAZZ_BRIDGE_LOG__BACKUPS": "2",
        },
    )
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        setup_logging(settings)
        for i in range(2000):
            logging.getLogger("jazz_bridge.test").info("line %d of a long log", i)
        for handler in root.handlers:
            handler.flush()
        files = sorted(p.name for p in log_file.parent.iterdir())
        assert files == ["jazz-bridge.log", "jazz-bridge.log.1", "jazz-bridge.log.2"]
        assert all((log_file.parent / f).stat().st_size <= 4096 for f in files)
        assert "line 1999 " in log_file.read_text()
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


async def test_idle_homes_are_archived_and_a_new_message_restores_them(
    env: dict[str, str], fake_dir: Path
) -> None:
    use_reference_runner(env, fake_dir)
    env["JAZZ_BRIDGE_RETENTION__ARCHIVE_IDLE_DAYS"] = str(1 / 86400)  # one second
    env["JAZZ_BRIDGE_RETENTION__SWEEP_EVERY_S"] = "0.2"
    root = Path(env["JAZZ_BRIDGE_ROOT"])
    async with running_gateway(env) as (app, client):
        await client.post("nap", "first")
        [first] = await client.wait_role("nap", "assistant")
        assert "Earlier turns in this conversation: 0" in first["text"]
        assert app.provisioned is not None
        layout = app.provisioned.root.layout
        name = naming.home_name("web:nap")
        home = layout.home(name)
        await wait_until(lambda: is_archived(layout, name), what="the idle home archived")
        assert not home.exists()
        st = os.stat(tarball_path(layout, name))
        assert stat.S_IMODE(st.st_mode) == 0o640
        listed = await _listing(app)
        assert listed["archived"] is True and listed["sizeBytes"] == st.st_size

        await client.post("nap", "second")
        answers = await client.wait_role("nap", "assistant", count=2)
        # restored before the run: the runner found the history the first run left
        assert "Earlier turns in this conversation: 0" not in answers[1]["text"]
        assert "Earlier turns in this conversation:" in answers[1]["text"]
    assert (root / "archive").is_dir()


async def _listing(app: object) -> dict[str, object]:
    from bridge.operators import Operators

    assert app.store is not None and app.provisioned is not None  # type: ignore[attr-defined]
    ops = Operators(app.store, app.provisioned.root.layout, app.provisioned.isolated)  # type: ignore[attr-defined]
    rows = await ops.listing()
    return next(r for r in rows if r["threadKey"] == "web:nap")
