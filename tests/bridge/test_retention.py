"""Retention: old records pruned (never an undelivered reply or an unanswered message, nor
the runs today's spend cap counts), idle homes archived by the sweep (only those still idle
when their turn comes; one that does not fit leaves the others archived) and restored by the
next message. (The log file's size cap: test_logging.py.)"""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import IS_ROOT, remove_accounts
from gateway_harness import Client, gateway_env, running_gateway, use_reference_runner, wait_until

from bridge.config import RetentionSettings
from bridge.model import Inbound, InboxState, Outgoing, ReplyKind, ReplyState, ReplyTarget
from bridge.operators import Operators
from bridge.retention import Sweeper
from bridge.store import NewReply, PromptRecord, RunOutcome, SqliteStore
from provisioning import naming
from provisioning.archive import is_archived, tarball_path
from provisioning.archive_lock import LOCKS_DIR, home_lock

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


# -- the records today's spend cap counts ----------------------------------------------------


LIMIT_TEXT = "Today's spending limit for this gateway is reached"


async def _outcome_of(client: Client, thread: str, text: str) -> str:
    """Post ``text``; the first line after it: the refusal, or the agent's answer."""
    await client.post(thread, text)
    found: list[str] = []

    async def check() -> bool:
        lines = await client.messages(thread)
        mine = [i for i, m in enumerate(lines) if m["role"] == "user" and m["text"] == text]
        if not mine:
            return False
        after = lines[mine[-1] + 1 :]
        found[:] = [
            m["text"]
            for m in after
            if m["role"] == "assistant" or (LIMIT_TEXT in m["text"] and not m.get("live"))
        ]
        return bool(found)

    await wait_until(check, what=f"an answer or a refusal to {text!r}")
    return found[0]


async def test_a_sweep_within_the_day_does_not_reopen_the_spend_cap(
    env: dict[str, str], fake_dir: Path
) -> None:
    """The retention sweep keeps the runs the daily spend cap counts.

    ``retention.records_days`` takes fractions (``gt=0``) and ``limits.daily_cost_usd`` sums
    the costs of the runs finished since midnight UTC from the ``runs`` table. With records kept
    less than a day (an operator keeping little for privacy), the sweep deleted today's runs
    and with them today's spend: the cap stopped holding hours before midnight, and a gateway
    that said "new messages run again after midnight UTC" ran them again at once."""
    use_reference_runner(env, fake_dir)
    env["JAZZ_BRIDGE_LIMITS__DAILY_COST_USD"] = "0.05"
    env["JAZZ_BRIDGE_RETENTION__RECORDS_DAYS"] = "0.005"  # 7.2 minutes of records
    async with running_gateway(env) as (app, client):
        await client.post("pay", "expensive !cost 0.06")
        await client.wait_role("pay", "assistant")
        first = await _outcome_of(client, "pay", "one more")
        assert LIMIT_TEXT in first  # the cap holds: $0.06 spent of $0.05
        # ten minutes later, the same UTC day: the periodic sweep passes
        assert app.sweeper is not None
        report = await app.sweeper.sweep(now=time.time() + 600)
        assert app.engine is not None
        spent, _ = await app.store.cost_since(time.time() - 3600)  # type: ignore[union-attr]
        later = await _outcome_of(client, "pay", "and now?")
        assert LIMIT_TEXT in later, (
            f"after the sweep ({report['pruned']}), today's spend reads ${spent:.2f} and a "
            f"new message ran: {later!r}"
        )


# -- a sweep while a conversation is written to ----------------------------------------------


LOCK_WAIT_S = 20.0


def _someone_waits_for(lock_file: Path) -> bool:
    """A process is blocked on ``lock_file``'s flock (Linux lists waiters with ``->``)."""
    inode = os.stat(lock_file).st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields and fields[-3].endswith(f":{inode}"):
            return True
    return False


async def test_a_conversation_written_to_during_the_sweep_is_not_archived(
    env: dict[str, str],
) -> None:
    """The idle sweep archives only homes still idle when their turn comes.

    The sweep lists the idle conversations once, then archives them one after another; packing
    a big home takes minutes. A conversation listed as idle that someone writes to meanwhile
    (its message run and answered before the sweep reaches it) is not idle any more: archiving
    it anyway packs away a home in use, and the person's next message waits for a restore.

    Here the sweep waits on the first home's lock (held as a long archive or a restore of it
    would) while the second conversation gets a message and its answer."""
    async with running_gateway(env) as (app, client):
        for thread in ("first", "later"):  # "first" is the older: the sweep starts there
            await client.post(thread, "hello")
            await client.wait_role(thread, "assistant")
        assert app.store is not None and app.provisioned is not None
        root, store = app.provisioned.root, app.store
        first, later = (naming.home_name(f"web:{t}") for t in ("first", "later"))
        ops = Operators(store, root.layout, app.provisioned.isolated)

        held, release = threading.Event(), threading.Event()

        def hold_first_home() -> None:
            with home_lock(root, first, exclusive=True):
                held.set()
                release.wait(LOCK_WAIT_S)

        holder = asyncio.create_task(asyncio.to_thread(hold_first_home))
        try:
            await wait_until(held.is_set, what="the first home's lock held")
            sweep = asyncio.create_task(ops.archive_idle(root, 1e-9))  # both idle now
            lock_file = root.layout.state / LOCKS_DIR / first
            await wait_until(lambda: _someone_waits_for(lock_file), what="the sweep waiting")

            await client.post("later", "back again")  # listed idle, now in use
            await client.wait_role("later", "assistant", count=2)

            async def delivered() -> bool:
                return not await store.undelivered_replies()

            await wait_until(delivered, what="the answer delivered")
        finally:
            release.set()
            await holder
        rows = {row["home"]: row for row in await asyncio.wait_for(sweep, LOCK_WAIT_S)}

        assert rows[first]["archived"] is True
        assert rows[later]["archived"] is False, rows[later]
        assert "active" in rows[later]["reason"], rows[later]
        assert root.layout.home(later).is_dir() and not is_archived(root.layout, later)


# -- a home that does not fit the archive's disk ---------------------------------------------


ARCHIVE_DISK = "256k"  # a tmpfs mounted on <root>/archive: the small home fits, the big not

BIG_FILE_BYTES = 2 * 1024 * 1024  # random, so gzip cannot shrink it below the disk


@pytest.fixture
def small_archive_disk(env: dict[str, str]) -> Iterator[Path]:
    if not IS_ROOT:
        pytest.skip("mounting a small file system needs root")
    archive = Path(env["JAZZ_BRIDGE_ROOT"]) / "archive"
    archive.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={ARCHIVE_DISK}", "tmpfs", str(archive)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield archive
    finally:
        subprocess.run(["umount", "-l", str(archive)], check=False, timeout=30)


async def test_a_home_that_does_not_fit_leaves_the_others_archived(
    env: dict[str, str], small_archive_disk: Path
) -> None:
    """The idle-home sweep goes on past a home it cannot archive.

    The archive disk fills up exactly when archiving is needed: the oldest idle home (a big
    one, tried first) fails with "No space left on device". That home stays (its tarball is
    removed, its directory untouched); the sweep must go on to the other idle homes (a small
    one fits), say which home failed and why, and not end the whole pass with an OSError
    (which it did, every pass, so no idle home was ever archived again)."""
    async with running_gateway(env) as (app, client):
        for thread in ("big", "small"):  # "big" is the older: the sweep tries it first
            await client.post(thread, "hello")
            await client.wait_role(thread, "assistant")
        assert app.store is not None and app.provisioned is not None
        root = app.provisioned.root
        big, small = (naming.home_name(f"web:{t}") for t in ("big", "small"))
        filler = root.layout.home(big) / "workspace" / "big.bin"
        filler.write_bytes(os.urandom(BIG_FILE_BYTES))
        ops = Operators(app.store, root.layout, app.provisioned.isolated)
        sweeper = Sweeper(RetentionSettings(archive_idle_days=1e-9), app.store, ops, root)

        try:
            report = await sweeper.sweep()
        except OSError as exc:
            pytest.fail(f"the sweep ended at the home that did not fit: {exc!r}")

        rows = {row["home"]: row for row in report["archived"]}
        assert rows[big]["archived"] is False
        assert "No space left on device" in rows[big]["reason"], rows[big]
        assert root.layout.home(big).is_dir() and filler.stat().st_size == BIG_FILE_BYTES
        assert rows[small]["archived"] is True, rows[small]
        assert is_archived(root.layout, small)
        assert sorted(p.name for p in small_archive_disk.iterdir()) == [f"{small}.tar.gz"]
