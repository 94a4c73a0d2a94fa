"""A run's prompts (approvals, questions, secrets) and the person's answers, while the run
waits: pressed or typed, by the asker only, on surfaces with buttons or numbered choices
(no secret is ever collected in a shared chat); a typed reply to buttons is told to use
them, and ``/new <question>`` is the fresh conversation's first message, not an answer.

The real gateway in process, the web chat or the tests' plain surface, the fake runner or
the bundled reference runner as real subprocesses; every wait is bounded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import plain_surface
from gateway_harness import Client, running_gateway, use_reference_runner, wait_until

from bridge.model import Inbound, InboxState


async def test_a_prompt_is_answered_by_the_asker_and_refused_to_others(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("p", "approve")
        prompt = (await client.wait_role("p", "prompt"))[0]
        tokens = {c["label"]: c["token"] for c in prompt["choices"]}
        assert set(tokens) >= {"Approve", "Reject"}
        status, body = await client.press("p", tokens["Approve"], "mallory")
        assert status == 403 and "Only ada" in body["text"]
        status, body = await client.press("p", tokens["Approve"], "ada")
        assert status == 200, body
        answer = await client.wait_role("p", "assistant")
        assert "the tool was approved" in answer[0]["text"]
        status, body = await client.press("p", tokens["Reject"], "ada")
        assert status == 410 and "expired" in body["text"]


async def test_approve_all_answers_every_pending_approval(
    env: dict[str, str], fake_dir: Path
) -> None:
    use_reference_runner(env, fake_dir)
    async with running_gateway(env) as (_, client):
        await client.post("two", "!approve2 deploy")
        prompts = await client.wait_role("two", "prompt", 2)
        labels = [c["label"] for c in prompts[1]["choices"]]
        assert "Approve all (2)" in labels
        token = next(
            c["token"] for c in prompts[1]["choices"] if c["label"].startswith("Approve all")
        )
        status, _ = await client.press("two", token, "ada")
        assert status == 200
        answer = (await client.wait_role("two", "assistant"))[0]["text"]
        assert "deploy was approved" in answer and "write was approved" in answer
        first = prompts[0]["choices"][0]["token"]
        status, _body = await client.press("two", first, "ada")
        assert status == 410


async def test_a_question_and_a_private_secret(env: dict[str, str], fake_dir: Path) -> None:
    use_reference_runner(env, fake_dir)
    async with running_gateway(env) as (_, client):
        await client.post("q", "!ask favourite colour?")
        prompt = (await client.wait_role("q", "prompt"))[0]
        blue = next(c["token"] for c in prompt["choices"] if c["label"] == "Blue")
        assert (await client.press("q", blue, "ada"))[0] == 200
        assert "you answered: blue" in (await client.wait_role("q", "assistant"))[0]["text"]
        await client.post("q", "!secret API token")
        await client.wait_role("q", "prompt", 2)
        await client.post("q", "hunter2-very-secret")
        answer = (await client.wait_role("q", "assistant", 2))[1]["text"]
        assert "got a secret of 19 characters" in answer
        everything = " ".join(m["text"] for m in await client.messages("q"))
        assert "hunter2-very-secret" not in everything  # redacted from the record


async def test_a_typed_number_answers_a_free_question_shown_with_buttons(
    env: dict[str, str], fake_dir: Path
) -> None:
    """The web chat shows the question with buttons (Red, Blue, Skip) and "or reply with
    your own answer"; no numbers are shown. Asked "how many replicas?", the person types
    "3": the agent must get "3", not a silent Skip (choice number 3)."""
    use_reference_runner(env, fake_dir)
    async with running_gateway(env) as (_, client):
        await client.post("q", "!ask how many replicas?")
        prompt = (await client.wait_role("q", "prompt"))[0]
        assert prompt["choices"], "the web chat shows buttons"
        assert "**3**" not in prompt["text"]  # nothing tells the person 3 means Skip
        await client.post("q", "3")
        answer = (await client.wait_role("q", "assistant"))[0]["text"]
        assert "you answered: 3" in answer, answer


async def test_degrades_to_numbered_choices_and_never_collects_a_secret_in_a_group(
    env: dict[str, str], fake_dir: Path
) -> None:
    use_reference_runner(env, fake_dir)
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        adapter = plain_surface.INSTANCES[-1]
        surface = adapter.surface
        gw = app.engine
        assert gw is not None

        def inbound(event: str, text: str, shared: bool) -> Inbound:
            return Inbound(
                platform="plain",
                event_id=event,
                thread_key="plain:room",
                sender_id="u1",
                sender_name="Ada",
                text=text,
                shared_chat=shared,
            )

        await gw.submit(inbound("e1", "!approve bash", True))
        await wait_until(
            lambda: any("Reply with **1** (Approve)" in t for t in surface.texts()),
            15,
            "a numbered prompt",
        )
        await gw.submit(inbound("e2", "1", True))
        await wait_until(
            lambda: any("bash was approved" in t for t in surface.texts()),
            15,
            "the approved answer",
        )
        await gw.submit(inbound("e3", "!secret DB password", True))
        await wait_until(
            lambda: any("no secret is available here (shared-chat)" in t for t in surface.texts()),
            15,
            "the secret refused",
        )
        assert any("never collected in a shared chat" in t for t in surface.texts())


async def test_a_typed_answer_to_a_prompt_answered_meanwhile_is_told_so(
    env: dict[str, str], fake_dir: Path
) -> None:
    use_reference_runner(env, fake_dir)
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        gw = app.engine
        assert gw is not None

        def inbound(event: str, text: str) -> Inbound:
            return Inbound(
                platform="plain", event_id=event, thread_key="plain:one", sender_id="u1", text=text
            )

        await gw.submit(inbound("e1", "!approve bash"))
        await wait_until(
            lambda: any("Reply with **1**" in t for t in surface.texts()), 15, "the prompt"
        )
        await gw.submit(inbound("e2", "1"))  # both typed before either is handled
        await gw.submit(inbound("e3", "1"))
        await wait_until(
            lambda: any("already answered" in t for t in surface.texts()), 15, "the second told"
        )
        await wait_until(
            lambda: any("bash was approved" in t for t in surface.texts()), 15, "the answer"
        )
        assert await app.store.messages_in_state(InboxState.ACCEPTED) == []


async def _approval_shown(client: Client, thread: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    async def shown() -> bool:
        nonlocal found
        found = [m for m in await client.messages(thread) if m["role"] == "prompt"]
        found = [m for m in found if m.get("choices")]
        return bool(found)

    await wait_until(shown, 20, "the approval with its buttons")
    return found[0]


async def _first_notice(client: Client, thread: str) -> str:
    """The first status line the thread got (not a live progress bubble)."""
    found: list[str] = []

    async def told() -> bool:
        nonlocal found
        found = [
            str(m["text"])
            for m in await client.messages(thread)
            if m["role"] == "status" and not m.get("live")
        ]
        return bool(found)

    await wait_until(told, 20, "a status line answering the typed reply")
    return found[0]


async def test_a_reply_typed_to_an_approval_with_buttons_is_told_to_use_them(
    env: dict[str, str],
) -> None:
    env["JAZZ_BRIDGE_ISOLATION"] = "off"  # one account for every conversation
    async with running_gateway(env) as (_app, client):
        await client.post("ask", "approve please")
        prompt = await _approval_shown(client, "ask")
        await client.post("ask", "yes")
        told = await _first_notice(client, "ask")
        try:
            assert "button" in told.lower() or "answer" in told.lower(), (
                f"'yes' typed to the approval (buttons shown) was answered {told!r} while "
                "the run waits for this very person to press a button"
            )
        finally:  # the run ends now, not at the gateway's stop
            await client.press("ask", prompt["choices"][0]["token"], "ada")


KEY = "plain:newq"


async def test_new_with_a_question_while_a_question_waits_starts_the_fresh_conversation(
    env: dict[str, str], fake_dir: Path
) -> None:
    """ "/new <question>" typed while the agent waits for that person's answer: the question
    is the fresh conversation's first message (the gateway says so: "what you wrote after
    /new is its first message"). It was taken instead as the typed answer to the question
    of the run in progress, in the conversation /new had just closed: the old run went on
    with it as its answer, and the fresh conversation's first message never ran."""
    use_reference_runner(env, fake_dir)
    env["JAZZ_BRIDGE_ISOLATION"] = "off"  # one account for every conversation
    env["JAZZ_BRIDGE_LIMITS__PROMPT_WAIT_S"] = "2"  # the old run's question ends unanswered
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        gw = app.engine
        assert gw is not None and app.store is not None
        await gw.submit(
            Inbound(
                platform="plain",
                event_id="e1",
                thread_key=KEY,
                sender_id="u1",
                text="!ask Which colour?",
            )
        )
        await wait_until(
            lambda: any("Which colour?" in t for t in surface.texts()), 20, "the question shown"
        )
        fresh = await gw.submit(
            Inbound(
                platform="plain",
                event_id="e2",
                thread_key=KEY,
                sender_id="u1",
                text="/new tell me about owls",
            )
        )

        async def done() -> bool:
            msg = await app.store.get_message(fresh.message_id or 0)
            return msg is not None and msg.state not in (InboxState.ACCEPTED, InboxState.RUNNING)

        await wait_until(done, 30, "the fresh conversation's first message answered")
        texts = surface.texts()
        assert not any("you answered: tell me about owls" in t for t in texts), (
            f"the question after /new went to the old run as its answer: {texts}"
        )
        msg = await app.store.get_message(fresh.message_id or 0)
        assert msg is not None
        runs = [r for r in await app.store.runs(msg.conversation_id) if r.message_id == msg.id]
        assert len(runs) == 1 and runs[0].epoch == 2, runs
