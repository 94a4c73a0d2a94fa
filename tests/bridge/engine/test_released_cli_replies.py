"""Replies to what the released Jazz CLI (0.14.2) does, through the real gateway.

Its provider failure has no ``error`` event: a stack trace on stderr (recording
10 in docs/runner-contract.md, replayed here line for line) and a short
error in an envelope without ``code``. Its ``ask_user_question`` tool cannot ask the person
and hands the agent an empty answer (recording 12); the runner layer flags the question
(``RunResult.flags["unasked_question"]``) and the reply says so after the answer.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import plain_surface
import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, install_fake_runner, running_gateway, wait_until

from bridge.model import Inbound, ReplyKind
from bridge.runner.command import shared_interpreter

ERROR = "Server error (500): fake upstream exploded"
WARNING = (
    '{"type":"warning","agentName":"default","message":"No context window is pinned for this '
    'llamacpp agent, so Jazz is compacting against a 128,000-token estimate."}'
)
# recording 10's stderr after the warning event, as printed (<dir> stood for the bundle's path)
FAIL500_STDERR = [
    '370 | `);continue}let c=`; filename="${NBt(s.filename??"blob")}"`,I=(s.mediaType??'
    '"application/octet-stream").replace(/[\\r\\n]/g,"");if(yield n.encode(`${l}${c}\\r',
    "371 | Content-Type: ${I}\\r",
    "372 | \\r",
    "373 | `),s.content instanceof Uint8Array)yield s.content;else{let d=s.content.getReader()",
    "374 | `)}yield n.encode(`--${t}--\\r",
    "375 | `)}return{stream:ef(i()),async dispose(s){if(r)return;r=!0;let l=a;}",
    "",
    "AI_APICallError: fake upstream exploded",
    "      cause: undefined,",
    '        url: "http://127.0.0.1:18801/v1/chat/completions",',
    " requestBodyValues: {",
    '  model: "fake-model",',
    "  user: undefined,",
    "  max_tokens: undefined,",
    "  temperature: undefined,",
    "  top_p: undefined,",
    "  frequency_penalty: undefined,",
    "  presence_penalty: undefined,",
    "  response_format: undefined,",
    "  stop: undefined,",
    "  seed: undefined,",
    "  reasoning_budget: 0,",
    "  chat_template_kwargs: [Object ...],",
    "  messages: [Array ...],",
    "  tools: [Array ...],",
    '  tool_choice: "auto",',
    "  stream: true,",
    "  stream_options: undefined,",
    "},",
    " statusCode: 500,",
    " responseHeaders: {",
    '  "content-length": "72",',
    '  "content-type": "application/json",',
    '  date: "Fri, 04 Dec 2026 20:32:35 GMT",',
    '  server: "BaseHTTP/0.6 Python/3.11.7",',
    "},",
    ' responseBody: "{\\"error\\": {\\"message\\": \\"fake upstream exploded\\", \\"type\\": '
    '\\"server_error\\"}}",',
    " isRetryable: true,",
    "       data: {",
    "  error: [Object ...],",
    "},",
    " vercel.ai.error: true,",
    " vercel.ai.error.AI_APICallError: true,",
    "",
    "      at <anonymous> (/opt/jazz/jazz:375:22456)",
    "      at async <anonymous> (/opt/jazz/jazz:375:21051)",
    "      at async <anonymous> (/opt/jazz/jazz:375:20335)",
    "      at async doStream (/opt/jazz/jazz:7797:10332)",
    "      at async <anonymous> (/opt/jazz/jazz:411:51988)",
    "",
]
# the same failure with a short error object: what is left of it fits the tail
SHORT_STDERR = [
    "375 | `)}return{stream:ef(i()),async dispose(s){if(r)return;r=!0;let l=a;}",
    "",
    "AI_APICallError: fake upstream exploded",
    " statusCode: 500,",
    '        url: "http://127.0.0.1:18801/v1/chat/completions",',
    "},",
    "      at <anonymous> (/opt/jazz/jazz:375:22456)",
    "      at async doStream (/opt/jazz/jazz:7797:10332)",
    "",
]

RUNNER = """\
import json, sys
prompt = json.loads(sys.stdin.readline())["prompt"]
replay = json.loads(open(sys.argv[1]).read())
sys.stderr.write("\\n".join(replay[prompt.split()[0]]) + "\\n")
sys.stderr.flush()
print(json.dumps({"ok": False, "error": replay["error"], "costUSD": 0}), flush=True)
sys.exit(1)
"""


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def use_failing_runner(env: dict[str, str], fake_dir: Path) -> None:
    runner = fake_dir / "fail500_runner.py"
    runner.write_text(RUNNER)
    stderr = fake_dir / "fail500_stderr.json"
    stderr.write_text(
        json.dumps(
            {
                "error": ERROR,
                "fail500": [WARNING, *FAIL500_STDERR],
                "short": [WARNING, *SHORT_STDERR],
            }
        )
    )
    for path in (runner, stderr):
        os.chmod(path, 0o755)
    env["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps(
        [shared_interpreter(), str(runner), str(stderr)]
    )


def code_block(text: str) -> list[str]:
    found = re.search(r"\n```\n(.*?)\n```", text, re.S)
    assert found, f"no stderr in the reply: {text!r}"
    return found.group(1).split("\n")


async def test_a_released_provider_failure_shows_what_is_left_of_its_stack_trace(
    env: dict[str, str], fake_dir: Path
) -> None:
    """Code "failed" (an envelope without code) showed the short error only; its stderr is
    shown too, without stack frames, source lines, brackets, blanks or the error again."""
    use_failing_runner(env, fake_dir)
    async with running_gateway(env) as (_, client):
        await client.post("f", "fail500 please")
        (reply,) = await client.wait_role("f", "error")
        text = reply["text"]
        assert text.startswith(f"❌ The agent could not answer: {ERROR}."), text
        tail = code_block(text)
        # what is worth showing of the whole trace (cli.py keeps its last 60 lines): no
        # nested property dumps (requestBodyValues, responseHeaders, data), no flags
        assert tail == [
            'url: "http://127.0.0.1:18801/v1/chat/completions",',
            "statusCode: 500,",
            'responseBody: "{\\"error\\": {\\"message\\": \\"fake upstream exploded\\", '
            '\\"type\\": \\"server_error\\"}}",',
        ], text

        await client.post("s", "short please")
        (reply,) = await client.wait_role("s", "error")
        assert code_block(reply["text"]) == [
            "statusCode: 500,",
            'url: "http://127.0.0.1:18801/v1/chat/completions",',
        ], reply["text"]


KEY = "plain:room"
QUESTION = "Which colour?"


async def test_a_question_the_cli_could_not_ask_is_noted_after_the_answer(
    env: dict[str, str], fake_dir: Path
) -> None:
    """The released CLI's ask tool got "" back and the agent answered without it (recording
    12, the released CLI's fake): the person is told what it wanted to ask, in a reply kept
    within the surface's length; a run that asked nothing gets no note."""
    env["JAZZ_BRIDGE_ISOLATION"] = "off"
    env.update(install_fake_runner(fake_dir, released=True))
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        engine = app.engine
        assert engine is not None

        def answer(message_id: int) -> list[str]:
            return [
                m.text
                for key, m in surface.sent
                if m.kind is ReplyKind.ANSWER and key.split(":")[1] == str(message_id)
            ]

        async def ask(n: int, prompt: str) -> str:
            result = await engine.submit(
                Inbound(
                    platform="plain",
                    event_id=f"e{n}",
                    thread_key=f"{KEY}{n}",
                    sender_id="u1",
                    text=prompt,
                )
            )
            assert result.message_id is not None
            message_id = result.message_id
            await wait_until(lambda: bool(answer(message_id)), 20, f"the answer to {prompt!r}")
            (text,) = answer(message_id)
            return text

        text = await ask(1, "askuser")
        note = (
            f"❓ The agent wanted to ask “{QUESTION}” but this Jazz CLI cannot ask in the chat, "
            "so it went on without an answer. You can reply with your answer in a new message."
        )
        assert text.startswith(f"User answered: 'User responded: '\n\n{note}\n\n_"), text

        text = await ask(2, "plain")  # asked nothing: no note
        assert "wanted to ask" not in text, text

        text = await ask(3, "asklong")  # one line, cut (by the CLI, then the note): short
        assert "“Which colour for part 0 of the long chart? Which colour for part 1" in text
        assert "…” but this Jazz CLI cannot ask" in text and len(text) < 1000, len(text)
        limit = surface.capabilities.max_length
        assert all(len(m.text) <= limit for _, m in surface.sent)


@pytest.mark.parametrize("isolation", ["auto", "off"])
async def test_a_conversation_cannot_read_another_ones_message_in_proc(
    tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int], isolation: str
) -> None:
    """The released CLI takes approvals only with the message as its argument, and
    /proc/<pid>/cmdline is world-readable: A's agent read B's message (and B's thread key,
    once the --conversation) there while B ran. Each such run now has a PID namespace and a
    /proc of its own, isolated (one account per conversation) or not (one account)."""
    env = gateway_env(tmp_path / "root", fake_dir, uid_range, JAZZ_BRIDGE_ISOLATION=isolation)
    env.update(install_fake_runner(fake_dir, released=True))
    try:
        async with running_gateway(env) as (app, client):
            assert app.engine is not None
            assert getattr(app.engine.backend, "private_proc", False), "no namespace here"
            await client.post("b", "hold B1 the-secret-of-b")
            await wait_until(lambda: len(client.starts("web:b")) == 1, 20, "B running")
            (b_run,) = client.starts("web:b")
            # the message is on B's command line, as the host sees it: this could be read
            host_view = Path(f"/proc/{b_run['pid']}/cmdline").read_bytes().replace(b"\0", b" ")
            assert b"the-secret-of-b" in host_view
            await client.post("a", "readprocs")
            await client.wait_role("a", "assistant")
            (procs,) = [e for e in client.runs() if e["event"] == "procs"]
            seen = procs["cmdlines"]
            assert any("readprocs" in line for line in seen), seen  # its own: it can read
            assert not any("the-secret-of-b" in line for line in seen), seen
            assert not any("web:b" in line or "web:a" in line for line in seen), seen
            assert "hold" not in " ".join(seen)
            client.release("B1")
            await client.wait_role("b", "assistant")
    finally:
        remove_accounts(tmp_path / "root" / "state" / "accounts.json")
