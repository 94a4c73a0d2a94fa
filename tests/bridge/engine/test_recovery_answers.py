"""A question's answer across a crash: start-up recovery applies the rule the running
gateway applies. One message, the first typed after the question, answers it (on a surface
without buttons: a number is a choice only there); an answer already passed on to the agent
is not run again as a new message, nor is a typed secret; ``/new <question>`` starts the
fresh conversation; whatever else was typed runs after.

The crash is a store seeded as a kill -9 leaves it; then the real gateway in process, the
web chat or the tests' plain surface, the fake runner as a real subprocess; every wait is
bounded.
"""

from __future__ import annotations

import time
from pathlib import Path

import plain_surface
from gateway_harness import install_fake_runner, running_gateway, wait_until
from gateway_harness import run_starts as starts

from bridge.model import Inbound, InboxState
from bridge.store import MessageRecord, PromptRecord, SqliteStore
from provisioning import naming


def database(env: dict[str, str]) -> Path:
    return Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"


async def asked_a_question(
    store: SqliteStore, message: Inbound, created_at: float
) -> MessageRecord:
    """``message`` accepted and running, its run waiting on a question (input kind: any text
    its sender types is the answer) asked at ``created_at``, as the gateway writes them."""
    ask, _ = await store.accept(
        message, home=naming.home_name(message.thread_key), is_command=False
    )
    run = await store.begin_run(ask.id, message.sender_id)
    assert run is not None
    await store.add_prompts(
        [
            PromptRecord(
                token="tok1",
                run_id=run.id,
                conversation_id=ask.conversation_id,
                requester=message.sender_id,
                kind="input",
                request_id="q1",
                payload={"question": "colour?"},
                created_at=created_at,
            )
        ]
    )
    return ask


def plain(key: str, event_id: str, text: str, at: float | None = None) -> Inbound:
    """A message of the plain surface's ``key`` (received ``at``, or now)."""
    when = {} if at is None else {"received_at": at}
    return Inbound(
        platform="plain", event_id=event_id, thread_key=key, sender_id="u1", text=text, **when
    )


async def test_an_answer_passed_on_before_a_crash_is_not_run_as_a_new_message(
    env: dict[str, str],
) -> None:
    """A typed answer to a question, passed on to the agent just before a crash, must not be
    run again after the restart as a new message of its own.

    The crash point: ``Engine._typed_answer`` wrote the prompt's answer (``resolve_prompt``,
    committed) and the runner got it on stdin; the answering message itself was closed only
    in a later write (``complete_message``) and the gateway died in between. The store is left
    with the question ``answered`` and the answering message still ``accepted``. Start-up
    recovery looks only at ``pending`` prompts to recognise such answers, so it requeues the
    answer as a fresh turn: the agent is handed "blue" (or "2", or a redacted secret) as a new
    prompt, the message being consumed twice."""
    async with running_gateway(env):  # creates the root and the database
        pass
    db = Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"
    key = "web:pq"
    store = SqliteStore(db)
    await store.open()
    try:
        now = time.time()
        # the run asked a question (input kind: any text ada types is the answer) ...
        ask = await asked_a_question(
            store,
            Inbound(
                platform="web",
                event_id="e-ask",
                thread_key=key,
                sender_id="ada",
                sender_name="ada",
                text="which colour do you like",
                target={"thread": "pq"},
                received_at=now - 5,
            ),
            now - 4,
        )
        # ... ada typed "blue": accepted, then passed on (the prompt answered, noting the
        # answering message, as the gateway writes it) ...
        answering, _ = await store.accept(
            Inbound(
                platform="web",
                event_id="e-answer",
                thread_key=key,
                sender_id="ada",
                sender_name="ada",
                text="blue",
                target={"thread": "pq"},
                received_at=now - 3,
            ),
            home=naming.home_name(key),
            is_command=False,
        )
        assert await store.resolve_prompt("tok1", {"response": "blue", "byMessage": answering.id})
        # ... and the gateway died before the answering message was closed (kill -9)
    finally:
        await store.close()

    async with running_gateway(env) as (_, client):
        # the cut-off run gets its one "interrupted" notice
        await client.wait_role("pq", "status")

        async def answer_settled() -> bool:
            msgs = await client.messages("pq")
            ran = [s for s in client.starts(key) if s["prompt"] == "blue"]
            replied = [m for m in msgs if m["role"] != "user" and m.get("messageId") != ask.id]
            return bool(ran or replied)

        await wait_until(answer_settled, 20, "the typed answer to be dealt with")
        ran = [s["prompt"] for s in client.starts(key)]
        assert "blue" not in ran, (
            f"the typed answer, already handed to the agent, was run again as a new turn: {ran}"
        )


def _inbound(key: str, event: str, text: str, at: float) -> Inbound:
    return Inbound(
        platform="web",
        event_id=event,
        thread_key=key,
        sender_id="ada",
        sender_name="ada",
        text=text,
        target={"thread": key.split(":", 1)[1]},
        received_at=at,
    )


async def test_a_number_typed_while_an_approval_waited_on_buttons_runs_after_a_restart(
    env: dict[str, str],
) -> None:
    """A number typed while an approval waited on a surface with buttons is a new message,
    and stays one across a restart.

    The running gateway takes a typed number as a choice only on numbered surfaces (no
    buttons): on the web chat (buttons) "2" typed while an approval waits is queued as a new
    message and run after the approval's run (commit bc18465). Start-up recovery
    (``_answered_prompt``) says it applies "the rule the running gateway applies", but still
    takes any all-digit text as the answer to a pending prompt: after a crash with such a "2"
    accepted, the message is never run; its sender is told that "the question this answered
    ended", a question they never answered.

    The real gateway (web chat, fake runner as a real subprocess); the crash is a store seeded
    as a kill -9 leaves it."""
    async with running_gateway(env):  # creates the root and the database
        pass
    db = Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"
    key = "web:nums"
    home = naming.home_name(key)
    store = SqliteStore(db)
    await store.open()
    try:
        now = time.time()
        ask, _ = await store.accept(
            _inbound(key, "e-ask", "deploy it", now - 5), home=home, is_command=False
        )
        run = await store.begin_run(ask.id, "ada")
        assert run is not None
        await store.add_prompts(  # the run waits on an approval, shown with buttons
            [
                PromptRecord(
                    token="ApPrOvAlToKeN01",
                    run_id=run.id,
                    conversation_id=ask.conversation_id,
                    requester="ada",
                    kind="approval",
                    request_id="call-1",
                    payload={"toolName": "bash", "message": "deploy"},
                    created_at=now - 4,
                )
            ]
        )
        # ada sends "2" (how many replicas, say): on the web chat a new message, queued
        await store.accept(_inbound(key, "e-two", "2", now - 3), home=home, is_command=False)
        # ... and the gateway dies (kill -9): the approval still pending, "2" accepted
    finally:
        await store.close()

    async with running_gateway(env) as (_, client):
        await client.wait_role("nums", "status")  # the cut-off run's "interrupted" notice

        async def settled() -> bool:
            ran = [s for s in client.starts(key) if s["prompt"] == "2"]
            told = [
                m
                for m in await client.messages("nums")
                if "ended when the gateway restarted" in m["text"]
            ]
            return bool(ran or told)

        await wait_until(settled, 20, "the message '2' to be dealt with")
        ran = [s["prompt"] for s in client.starts(key)]
        texts = [m["text"] for m in await client.messages("nums")]
        assert "2" in ran, (
            "a number typed on a surface with buttons (a new message while running) was "
            f"taken as an answer at the restart and never run; runs: {ran}; chat: {texts}"
        )


async def test_a_message_typed_after_the_answer_runs_after_a_crash(
    env: dict[str, str], fake_dir: Path
) -> None:
    """After a crash, only one message answers a question that was waiting.

    The agent asked a question; the person typed their answer and then another message, and
    the gateway died before the answer was passed on. Running, the gateway takes the first
    for the answer and queues the second to run after; the start took every message typed
    after the question for its answer: the second was never run ("If it was a new message,
    send it again")."""
    env["JAZZ_BRIDGE_ISOLATION"] = "off"  # one account for every conversation
    env.update(install_fake_runner(fake_dir))
    key = "plain:oneanswer"
    async with running_gateway(env, {"plain": plain_surface.SPEC}):  # the root, the database
        pass
    store = SqliteStore(Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db")
    await store.open()
    try:
        now = time.time()
        home = naming.home_name(key)
        ask, _ = await store.accept(
            plain(key, "e1", "which colour", now - 5), home=home, is_command=False
        )
        run = await store.begin_run(ask.id, "u1")
        assert run is not None
        await store.add_prompts(
            [
                PromptRecord(
                    token="tok1",
                    run_id=run.id,
                    conversation_id=ask.conversation_id,
                    requester="u1",
                    kind="input",
                    request_id="q1",
                    payload={"question": "colour?"},
                    created_at=now - 4,
                )
            ]
        )
        answer, _ = await store.accept(
            plain(key, "e2", "blue", now - 3), home=home, is_command=False
        )
        later, _ = await store.accept(
            plain(key, "e3", "and now tell me about owls", now - 2), home=home, is_command=False
        )
    finally:
        await store.close()  # the gateway died here (kill -9): nothing passed on yet
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        assert app.store is not None

        async def closed(message_id: int) -> bool:
            msg = await app.store.get_message(message_id)  # type: ignore[union-attr]
            return msg is not None and msg.state not in (InboxState.ACCEPTED, InboxState.RUNNING)

        await wait_until(lambda: closed(answer.id), 20, "the answer dealt with")
        await wait_until(lambda: closed(later.id), 20, "the later message dealt with")
        await wait_until(lambda: len(surface.texts()) >= 3, 20, "three replies")
        texts = surface.texts()
        assert any("fake answer to: and now tell me about owls" in t for t in texts), (
            f"the message typed after the answer was not run after the restart: {texts}"
        )
        assert not any("fake answer to: blue" in t for t in texts), texts


async def test_new_with_a_question_left_by_a_crash_beside_a_question_runs_after_it(
    env: dict[str, str], fake_dir: Path
) -> None:
    """ "/new <question>" typed while the agent waits for that person's answer, cut off by a
    crash: the question after /new was accepted while the run's question waited, and the
    gateway died. The start took it for the typed answer to that
    question ("The question this answered ended..."): never run."""
    env["JAZZ_BRIDGE_ISOLATION"] = "off"  # one account for every conversation
    env["JAZZ_BRIDGE_LIMITS__PROMPT_WAIT_S"] = "2"  # the old run's question ends unanswered
    key = "plain:newq"
    env.update(install_fake_runner(fake_dir))
    async with running_gateway(env, {"plain": plain_surface.SPEC}):  # the root, the database
        pass
    store = SqliteStore(Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db")
    await store.open()
    try:
        now = time.time()
        await asked_a_question(
            store,
            Inbound(
                platform="plain",
                event_id="e-ask",
                thread_key=key,
                sender_id="u1",
                text="which colour",
                received_at=now - 5,
            ),
            now - 4,
        )
        # "/new tell me about owls", accepted as submit accepts it: the question, a fresh epoch
        fresh, _ = await store.accept(
            Inbound(
                platform="plain",
                event_id="e-new",
                thread_key=key,
                sender_id="u1",
                text="tell me about owls",
                received_at=now - 3,
            ),
            home=naming.home_name(key),
            is_command=False,
            starts_epoch=True,
        )
    finally:
        await store.close()
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        assert app.store is not None

        async def done() -> bool:
            msg = await app.store.get_message(fresh.id)  # type: ignore[union-attr]
            return msg is not None and msg.state not in (InboxState.ACCEPTED, InboxState.RUNNING)

        await wait_until(done, 30, "the fresh conversation's first message answered")
        await wait_until(
            lambda: any("owls" in t for t in surface.texts()), 20, "its reply delivered"
        )
        assert any("fake answer to: tell me about owls" in t for t in surface.texts()), (
            surface.texts()
        )


async def test_a_typed_secret_the_gateway_stopped_before_passing_on_is_not_run(
    env: dict[str, str], fake_dir: Path
) -> None:
    """The gateway stopped (a crash) with a run waiting on a secret and the person's typed
    answer accepted but not yet passed on. At the next start that run is over: the answer
    must not run as a new message (the secret would go to the agent as its prompt); it is
    redacted and the person told."""
    env["JAZZ_BRIDGE_ISOLATION"] = "off"  # one account for every conversation
    async with running_gateway(env, {"plain": plain_surface.SPEC}):
        pass  # the root and its store
    store = SqliteStore(database(env))
    await store.open()
    try:
        key = "plain:room"
        home = naming.home_name(key)
        ask, _ = await store.accept(plain(key, "q1", "log in for me"), home=home, is_command=False)
        run = await store.begin_run(ask.id, "u1")
        assert run is not None
        await store.add_prompts(
            [
                PromptRecord(
                    token="SeCrEtPrOmPtToKeN",
                    run_id=run.id,
                    conversation_id=ask.conversation_id,
                    requester="u1",
                    kind="secret",
                    request_id="r1",
                    created_at=time.time(),
                )
            ]
        )
        typed, _ = await store.accept(plain(key, "q2", "hunter2-pass"), home=home, is_command=False)
    finally:
        await store.close()
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        await wait_until(
            lambda: any("ended when the gateway restarted" in t for t in surface.texts()),
            20,
            "the typed answer told its question ended",
        )
        assert app.store is not None
        record = await app.store.get_message(typed.id)
        assert record is not None and record.state is InboxState.DONE
        assert record.text == "[redacted]"
    assert not starts(fake_dir)  # nothing ran: not the interrupted run, not the secret
