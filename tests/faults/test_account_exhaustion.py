"""A uid range filling up with conversation accounts (hostile input: one user opening
thread after thread, as root).

Every new thread makes an account, kept for good (an archived conversation kept its
uid): 960 signed mentions from one allowlisted user took a 1,000-uid range in 93 s, and no
new conversation could start for anyone after that, with no word before it happened. The
gateway now says so as the range passes 80%: in its log, in ``/metrics``
(``jazz_bridge_accounts_used`` of ``jazz_bridge_accounts_capacity``) and in doctor; it
limits new conversations per person and per team; and an archived conversation gives its
account back (its uid returns at restore when still free).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import needs_root, remove_accounts
from faults_support import gateway_env, running_gateway, wait_until
from gateway_harness import run_cli
from plain_surface import INSTANCES, SPEC  # tests/bridge, on the path by faults_support

from bridge.model import Inbound

pytestmark = [pytest.mark.faults, needs_root]

RANGE_SIZE = 5


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    small = (uid_range[0], uid_range[0] + RANGE_SIZE - 1)
    yield gateway_env(tmp_path / "root", fake_dir, small, JAZZ_BRIDGE_ISOLATION="on")
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def gauge(text: str, name: str) -> float:
    (line,) = [ln for ln in text.splitlines() if ln.startswith(name + " ")]
    return float(line.split()[1])


async def test_a_filling_uid_range_is_warned_of_in_the_log_metrics_and_doctor(
    env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="provisioning.accounts")
    async with running_gateway(env) as (_, client):
        for n in range(1, 5):  # one user, four threads: four accounts of five uids
            await client.post(f"t{n}", "hello")
            await client.wait_role(f"t{n}", "assistant")
            warned = [r.getMessage() for r in caplog.records if "uids of" in r.getMessage()]
            # 4 of 5 is 80%: the first warning, not before
            assert len(warned) == (1 if n == 4 else 0), warned
        assert "hold 4 of the 5 uids" in warned[0] and "(80%)" in warned[0], warned
        assert "accounts.uid_min..uid_max" in warned[0]
        async with client.session.get(client.base + "/metrics") as resp:
            metrics = await resp.text()
        assert gauge(metrics, "jazz_bridge_accounts_used") == 4
        assert gauge(metrics, "jazz_bridge_accounts_capacity") == RANGE_SIZE
    doctor = run_cli(env, "doctor")
    (line,) = [ln for ln in doctor.stdout.splitlines() if "uid range" in ln]
    assert line.startswith("WARN") and "4 of 5 held by conversations (80%)" in line, line


def plain_message(n: int, thread: str, sender: str) -> Inbound:
    return Inbound(
        platform="plain", event_id=f"e{n}", thread_key=thread, sender_id=sender, text="hi"
    )


async def test_new_conversations_are_limited_per_person_and_per_team(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Each new thread is an account: one person may start 2 a day here, one team 3;
    the refused are told why and get no account, and threads already running go on."""
    env["JAZZ_BRIDGE_ACCOUNTS__NEW_PER_USER_PER_DAY"] = "2"
    env["JAZZ_BRIDGE_ACCOUNTS__NEW_PER_TEAM_PER_DAY"] = "3"
    env["JAZZ_BRIDGE_ACCOUNTS__UID_MAX"] = str(int(env["JAZZ_BRIDGE_ACCOUNTS__UID_MIN"]) + 50)
    accounts = tmp_path / "root" / "state" / "accounts.json"
    async with running_gateway(env, {"plain": SPEC}) as (app, _):
        surface = INSTANCES[-1].surface
        engine = app.engine
        assert engine is not None

        def said(message_id: int) -> list[str]:
            """What was sent for one message (reply keys are ``<kind>:<message id>...``)."""
            return [m.text for key, m in surface.sent if key.split(":")[1] == str(message_id)]

        async def send(n: int, thread: str, sender: str) -> str:
            result = await engine.submit(plain_message(n, thread, sender))
            assert result.message_id is not None
            message_id = result.message_id
            await wait_until(lambda: bool(said(message_id)), 20, f"an answer in {thread}")
            return said(message_id)[-1]

        assert "fake answer" in await send(1, "plain:teamA:1", "ada")
        assert "fake answer" in await send(2, "plain:teamA:2", "ada")
        refused = await send(3, "plain:teamA:3", "ada")  # ada's third
        assert "You have started 2 new conversations in the last 24 hours" in refused
        assert "accounts.new_per_user_per_day" in refused
        assert "fake answer" in await send(4, "plain:teamA:4", "bob")  # the team's third
        refused = await send(5, "plain:teamA:5", "bob")  # the team's fourth
        assert "This team or chat has started 3 new conversations" in refused
        assert "fake answer" in await send(6, "plain:teamB:1", "bob")  # another team
        # a conversation already started goes on, whoever writes in it
        assert "fake answer" in await send(7, "plain:teamA:1", "ada")
    made = json.loads(accounts.read_text())["accounts"]
    assert len(made) == 4, made  # the refused got no account


async def test_an_archived_conversation_gives_its_account_to_the_next_one(
    env: dict[str, str], tmp_path: Path
) -> None:
    """A full range frees up when a conversation is archived (``homes archive``, while the
    gateway runs): a new thread gets the account's uid, and the metrics count live ones."""
    lo = int(env["JAZZ_BRIDGE_ACCOUNTS__UID_MIN"])
    env["JAZZ_BRIDGE_ACCOUNTS__UID_MAX"] = str(lo + 1)  # two uids
    accounts = tmp_path / "root" / "state" / "accounts.json"
    async with running_gateway(env) as (_, client):
        for thread in ("old", "busy"):
            await client.post(thread, "hello")
            await client.wait_role(thread, "assistant")
        old = json.loads(accounts.read_text())["accounts"]
        (old_home,) = [h for h, e in old.items() if e["threadKey"] == "web:old"]
        old_uid = old[old_home]["uid"]
        archived = await asyncio.to_thread(run_cli, env, "homes", "archive", "web:old")
        assert archived.returncode == 0, archived.stderr
        doc = json.loads(accounts.read_text())
        assert old_home not in doc["accounts"] and doc["archived"][old_home]["uid"] == old_uid
        async with client.session.get(client.base + "/metrics") as resp:
            assert gauge(await resp.text(), "jazz_bridge_accounts_used") == 1
        await client.post("newcomer", "hello")
        (answer,) = await client.wait_role("newcomer", "assistant")
        assert "fake answer" in answer["text"], answer
        live = json.loads(accounts.read_text())["accounts"]
        (entry,) = [e for e in live.values() if e["threadKey"] == "web:newcomer"]
        assert entry["uid"] == old_uid  # the only uid of the range left: the freed one
