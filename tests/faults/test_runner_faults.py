"""Runner faults against the real gateway: each gets a clear reply, leaves nothing behind.

A runner of the suite's own (``fault_runner.py``) crashes, is killed by a signal, prints
no envelope or garbage, floods 50 MB on stdout, hangs past ``runner.timeout_s``, leaves a
``setsid`` child behind, ignores SIGTERM. For each: the thread gets an error reply naming
what happened (and the exit code where there is one), no process of the run is left
(nor a zombie), and another conversation is served meanwhile.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from accounts_support import IS_ROOT, remove_accounts
from faults_support import (
    gateway_env,
    install_runner,
    leftovers,
    notes,
    nothing_left,
    proc_info,
    reset_peak_rss,
    running_gateway,
    serve,
    status_kib,
    wait_until,
)

pytestmark = pytest.mark.faults
NOBODY = 65534
RUNNER = "fault_runner.py"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    install_runner(e, fake_dir, RUNNER)
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def started(fake_dir: Path, word: str) -> list[dict[str, Any]]:
    return [n for n in notes(fake_dir) if n.get("event") == "start" and n.get("word") == word]


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("exit1", ["printed no envelope", "exit code 1", "RuntimeError: provider down"]),
        ("sigkill", ["printed no envelope (killed by signal 9, SIGKILL)", "about to be killed"]),
        ("abort", ["printed no envelope (killed by signal 6, SIGABRT)"]),
        (
            "noenvelope",
            ["printed no envelope (exit code 0 without an answer)", "finished without saying"],
        ),
        ("garbage", ["printed something that is not an envelope (exit code 0 without an answer)"]),
        ("badjson", ["envelope is not valid", "exit code 0"]),
    ],
)
async def test_a_failed_run_gets_a_clear_reply_and_leaves_nothing(
    env: dict[str, str], fake_dir: Path, word: str, expected: list[str]
) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("f", word)
        errors = await client.wait_role("f", "error")
        text = errors[0]["text"]
        for part in expected:
            assert part in text, text
        await nothing_left(fake_dir)
        await client.post("g", "still there?")
        answers = await client.wait_role("g", "assistant")
        assert answers[0]["text"].startswith("ok: still there?")
    print(f"\n{word}: {text!r}")


@pytest.mark.parametrize(
    ("word", "answer"),
    [("flood", "survived the flood"), ("floodlines", "survived the lines")],
)
async def test_a_50mb_stdout_is_read_in_bounded_memory(
    env: dict[str, str], fake_dir: Path, word: str, answer: str
) -> None:
    """The gateway (in this process) reads 50 MB of stdout without holding it.

    The peak resident set is reset just before the run; its rise during the run must stay
    below the size of the output (a backend that buffered the stdout would hold all of it).
    """
    async with running_gateway(env) as (_, client):
        await client.post("warm", "warm up")  # imports, the first account, the first run
        await client.wait_role("warm", "assistant")
        before = status_kib("VmRSS")
        reset_peak_rss()
        await client.post("f", word)
        answers = await client.wait_role("f", "assistant", timeout=50)
        peak = status_kib("VmHWM")
        assert answers[0]["text"].startswith(answer)
        await nothing_left(fake_dir)
    rise_mib = (peak - before) / 1024
    print(f"\n{word}: RSS {before / 1024:.0f} MiB before, peak rise {rise_mib:.1f} MiB")
    assert rise_mib < 48, f"the gateway's memory rose by {rise_mib:.0f} MiB for 50 MB of stdout"


async def test_a_hang_past_the_timeout_is_stopped_while_others_are_served(
    env: dict[str, str], fake_dir: Path
) -> None:
    env["JAZZ_BRIDGE_RUNNER__TIMEOUT_S"] = "1"
    async with running_gateway(env) as (_, client):
        await client.post("h", "hang")
        await wait_until(lambda: bool(started(fake_dir, "hang")), what="the hanging run")
        hung_pid = int(started(fake_dir, "hang")[0]["pid"])
        await client.post("g", "meanwhile")
        answers = await client.wait_role("g", "assistant")
        assert answers[0]["text"].startswith("ok: meanwhile")
        # served while the first one still hangs
        info = proc_info(hung_pid)
        assert info is not None and info.state != "Z", "the hung run ended before the answer"
        assert not [m for m in await client.messages("h") if m["role"] == "error"]
        errors = await client.wait_role("h", "error", timeout=30)
        text = errors[0]["text"]
        assert "took longer than 1s" in text, text
        await nothing_left(fake_dir)
        await client.post("h", "after the hang")
        await client.wait_role("h", "assistant")
    print(f"\nhang: {text!r}")


# "off": one account for every run (the non-root path), where no uid tells runs apart
# how a run is contained: its own account or not (isolation), and its own cgroup (where
# the host lets the gateway make one: root here) or only the sweeps and the reaper
ISOLATION = pytest.mark.parametrize("isolation", ["auto", "off", "auto/no-cgroup", "off/no-cgroup"])


def contain(env: dict[str, str], isolation: str) -> None:
    """Set ``env`` for one of ISOLATION's ways of containing a run."""
    setting, _, cgroup = isolation.partition("/")
    env["JAZZ_BRIDGE_ISOLATION"] = setting
    if cgroup == "no-cgroup":
        env["JAZZ_BRIDGE_LIMITS__RUN_CGROUP"] = "false"


@ISOLATION
async def test_a_setsid_child_is_swept_after_the_answer(
    env: dict[str, str], fake_dir: Path, isolation: str
) -> None:
    contain(env, isolation)
    async with running_gateway(env) as (_, client):
        await client.post("s", "setsid")
        answers = await client.wait_role("s", "assistant", timeout=30)
        assert answers[0]["text"].startswith("answered, children left behind")
        children = next(n["children"] for n in notes(fake_dir) if n.get("event") == "children")
        assert len(children) == 2
        await nothing_left(fake_dir)
        await client.post("s", "next turn")
        answers = await client.wait_role("s", "assistant", count=2)
        assert answers[1]["text"].startswith("ok: next turn")
        assert not [m for m in await client.messages("s") if m["role"] == "error"]


@ISOLATION
async def test_a_daemon_with_an_empty_environment_is_swept(
    env: dict[str, str], fake_dir: Path, isolation: str
) -> None:
    """Double fork, setsid, fds closed, no environment: neither group nor tag finds it."""
    contain(env, isolation)
    async with running_gateway(env) as (_, client):
        await client.post("d", "daemon")
        answers = await client.wait_role("d", "assistant", timeout=30)
        assert answers[0]["text"].startswith("answered, a daemon left behind")
        await nothing_left(fake_dir)  # the daemon's pid is among the noted children
        await client.post("d", "next turn")
        answers = await client.wait_role("d", "assistant", count=2)
        assert answers[1]["text"].startswith("ok: next turn")


@pytest.mark.skipif(not IS_ROOT, reason="needs root to start the gateway as nobody")
async def test_a_gateway_without_root_leaves_no_daemon_behind(
    env: dict[str, str], fake_dir: Path, tmp_path: Path
) -> None:
    """The non-root path for real: ``serve`` as nobody, every run as nobody too."""
    work = tmp_path / "nobody"
    work.mkdir()
    os.chown(work, NOBODY, NOBODY)
    env["JAZZ_BRIDGE_ROOT"] = str(work / "root")
    async with serve(env, work, as_uid=NOBODY) as (_, client):
        await client.post("d", "daemon")
        await client.wait_role("d", "assistant", count=1, timeout=30)
        await client.post("d", "setsid")
        await client.wait_role("d", "assistant", count=2, timeout=30)
        await client.post("d", "noterm")
        await wait_until(lambda: len(children(fake_dir)) == 3, what="noterm's child")
        await client.post("d", "/stop")
        await client.wait_role("d", "error", timeout=30)
        runs = [n for n in notes(fake_dir) if n.get("event") == "start"]
        assert {int(n["uid"]) for n in runs} == {NOBODY}
        pids = {int(n["pid"]) for n in runs} | {p for c in children(fake_dir) for p in c}
        await wait_until(lambda: not leftovers(pids=pids), 15, "the runs' processes to be gone")


def children(fake_dir: Path) -> list[list[int]]:
    """What each run noted it left behind, oldest first."""
    return [[int(p) for p in n["children"]] for n in notes(fake_dir) if "children" in n]


@ISOLATION
async def test_a_fork_chain_is_swept(env: dict[str, str], fake_dir: Path, isolation: str) -> None:
    """A leftover that forks and exits in a loop: each generation lives microseconds, so a
    sweep that looks a process up and then kills it is always one generation late."""
    contain(env, isolation)
    # A /proc scan cannot prove the chain gone (it misses it as the gateway's scan did):
    # every generation holds this FIFO's write end, so end-of-file here is exact.
    fifo = fake_dir / "chain.fifo"
    os.mkfifo(fifo)
    fifo.chmod(0o666)  # the run's account opens it
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        async with running_gateway(env) as (_, client):
            await client.post("c", "forkchain")
            answers = await client.wait_role("c", "assistant", timeout=30)
            assert answers[0]["text"].startswith("answered, a fork chain left behind")
            await wait_until(lambda: any(n.get("event") == "chain" for n in notes(fake_dir)))
            await wait_until(lambda: not_held(reader), 15, "the fork chain to be gone")
            await nothing_left(fake_dir)  # nor anything else of the run
    finally:
        os.close(reader)


def not_held(reader: int) -> bool:
    """True once no process holds the FIFO's write end (end-of-file on the read end)."""
    try:
        return os.read(reader, 1) == b""
    except BlockingIOError:
        return False  # a writer still has it open


@ISOLATION
@pytest.mark.parametrize("how", ["timeout", "stop"])
async def test_a_runner_that_ignores_sigterm_is_killed(
    env: dict[str, str],
    fake_dir: Path,
    how: str,
    isolation: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    contain(env, isolation)
    env["JAZZ_BRIDGE_RUNNER__TIMEOUT_S"] = "1" if how == "timeout" else "60"
    caplog.set_level(logging.WARNING, logger="bridge.runner")
    async with running_gateway(env) as (_, client):
        await client.post("n", "noterm")
        await wait_until(
            lambda: any(n.get("event") == "children" for n in notes(fake_dir)),
            what="the run and its child",
        )
        if how == "stop":
            await client.post("n", "/stop")
        await client.post("g", "meanwhile")
        await client.wait_role("g", "assistant")
        errors = await client.wait_role("n", "error", timeout=30)
        text = errors[0]["text"]
        if how == "timeout":
            assert "took longer than 1s" in text, text
        else:
            assert "Stopped by ada" in text, text
        await nothing_left(fake_dir)
        assert any("ignored SIGTERM" in r.getMessage() for r in caplog.records)
        await client.post("n", "again")
        await client.wait_role("n", "assistant")
    print(f"\nnoterm ({how}): {text!r}")


@pytest.mark.skipif(not IS_ROOT, reason="needs root (a uid per conversation)")
async def test_no_process_of_the_conversations_account_survives_a_fault_series(
    env: dict[str, str], fake_dir: Path
) -> None:
    """One conversation through every fault in a row; afterwards its uid owns no process."""
    env["JAZZ_BRIDGE_RUNNER__TIMEOUT_S"] = "1"
    words = ["exit1", "sigkill", "setsid", "noterm", "garbage"]
    async with running_gateway(env) as (_, client):
        for i, word in enumerate(words):
            await client.post("series", word)

            async def replied(n: int = i + 1) -> bool:
                msgs = await client.messages("series")
                return len([m for m in msgs if m["role"] in ("error", "assistant")]) >= n

            await wait_until(replied, 30, f"a reply to {word}")
        uids = {int(n["uid"]) for n in notes(fake_dir)}
        assert len(uids) == 1 and 0 not in uids
        await nothing_left(fake_dir)


async def test_an_answer_that_beats_the_shutdown_is_kept_not_interrupted(
    env: dict[str, str], fake_dir: Path
) -> None:
    """The gateway stops while a run works; the runner finishes its answer on SIGTERM: that
    answer is delivered (now or at the next start), not replaced by "send it again"."""
    async with running_gateway(env) as (app, client):
        await client.post("g", "graceful")
        await wait_until(
            lambda: any(n.get("event") == "working" for n in notes(fake_dir)), what="the run"
        )
        await app.stop()
    async with running_gateway(env) as (_, client):
        answers = await client.wait_role("g", "assistant", timeout=30)
        assert answers[0]["text"].startswith("finished on SIGTERM")
        notices = [m["text"] for m in await client.messages("g") if m["role"] != "user"]
        assert not [t for t in notices if "send" in t and "again" in t], notices


async def test_a_key_the_runner_prints_is_masked_in_the_chat(
    env: dict[str, str], fake_dir: Path, tmp_path: Path
) -> None:
    """The reply to a failed run shows the runner's last stderr lines; a key the gateway
    gave the run (``runner.extra_env``) is masked there as in the logs."""
    key = "sk-test-0123456789abcdef"
    extra = json.loads(env["JAZZ_BRIDGE_RUNNER__EXTRA_ENV"])
    env["JAZZ_BRIDGE_RUNNER__EXTRA_ENV"] = json.dumps({**extra, "PROVIDER_API_KEY": key})
    async with serve(env, tmp_path) as (_, client):
        await client.post("k", "leak")
        (error,) = await client.wait_role("k", "error", timeout=30)
    assert "auth failed with key" in error["text"], error["text"]
    assert key not in error["text"], error["text"]
