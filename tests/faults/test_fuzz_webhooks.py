"""Hostile input, property-based: both webhooks fuzzed with hypothesis, and thread-key naming.

One real gateway (in process, Slack in HTTP mode and Telegram in webhook mode, against the
fake Slack Web API and the fake Bot API, the tests' fake runner logging every run) serves
every example of this module. Each example starts from a platform vector
(``tests/vectors/``) and mutates it: wrong types, missing keys, huge strings, lists and
objects nested up to 1,000 deep, unicode (lone surrogates, NUL, right-to-left marks, path
pieces), or replaces the body outright with garbage. Slack requests are signed correctly
(events as JSON, interactivity as ``payload=`` forms), Telegram ones carry the right
secret, so every body gets past authentication and reaches bolt/PTB and the adapter.

Which mutations must not run is decided by an oracle written from the platforms' own
documentation, not from the adapters' code: a Slack body runs only if it is an
``event_callback`` whose ``event`` is a person's ``app_mention``/``message`` with string
``user``, ``channel`` and ``ts``; a Telegram update only if its ``message`` has an integer
``message_id``, a chat with an integer id and a person sender with an integer id, and text,
a caption or a file; nothing nested deeper than Slack's or Telegram's payloads ever are.
Everything else must not be accepted (the ``accepted`` counter stays put) and no run may
carry its marker. For every example: no 5xx, no 401/403 (so the body really reached the
adapter), and at the end /healthz is 200 and every home the gateway made is a safe name
directly under ``<root>/chats/``. Each test prints how many cases it tried.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import hmac
import json
import os
import string
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

import aiohttp
import pytest
from accounts_support import free_uid_range, needs_root, remove_accounts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent

from fake_bot_api import FakeBotApi  # noqa: E402
from fake_slack_api import FakeSlackApi  # noqa: E402
from gateway_harness import gateway_env, running_gateway, wait_until  # noqa: E402

from bridge.app import GatewayApp  # noqa: E402
from bridge.model import InboxState  # noqa: E402
from provisioning import naming  # noqa: E402
from provisioning.errors import ThreadKeyError  # noqa: E402

pytestmark = [
    pytest.mark.faults,
    needs_root,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]

SLACK_VECTORS = TESTS / "vectors" / "slack"
TG_VECTORS = TESTS / "vectors" / "telegram"
SLACK_SECRET = "0123456789abcdef0123456789abcdef"
SLACK_TOKEN = "xoxb-0000000000-test-token-for-the-fake"
TG_TOKEN = "999999999:AAtest-token_for-the-fake"
TG_SECRET = "s3cret-webhook_token"
MAX_REAL_DEPTH = 64  # neither platform sends anything nested this deep
PERSON_SUBTYPES = (None, "file_share", "thread_broadcast")  # a tuple: values may be unhashable
T = TypeVar("T")

EXAMPLES = int(os.environ.get("JB_FUZZ_EXAMPLES", "400"))  # per webhook test; keys get 8x


# -- the gateway, on a loop of its own (hypothesis drives examples synchronously) -------------


@dataclass
class Live:
    app: GatewayApp
    base: str
    session: aiohttp.ClientSession
    fake_dir: Path
    root: Path
    loop: asyncio.AbstractEventLoop
    forbidden: set[str] = field(default_factory=set)  # markers of examples that must not run

    def call(self, make: Callable[[], Awaitable[T]], timeout: float = 60) -> T:
        async def run() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)

    def accepted(self) -> float:
        total = 0.0
        for platform in ("slack", "telegram"):
            value = self.app.metrics.registry.get_sample_value(
                "jazz_bridge_messages_total", {"platform": platform, "outcome": "accepted"}
            )
            total += value or 0.0
        return total

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> int:
        async def send() -> int:
            async with self.session.post(self.base + path, data=body, headers=headers) as r:
                await r.read()
                return r.status

        return self.call(send)

    def healthz(self) -> int:
        async def get() -> int:
            async with self.session.get(self.base + "/healthz") as r:
                return r.status

        return self.call(get)

    def run_prompts(self) -> list[str]:
        prompts = []
        for path in self.fake_dir.glob("run-*.log"):
            for line in path.read_text(errors="replace").splitlines():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event.get("event") == "start":
                    prompts.append(str(event.get("prompt")))
        return prompts


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    tmp = tmp_path_factory.mktemp("fuzz")
    for parent in [tmp, *tmp.parents]:  # conversation accounts traverse to the root and log
        if parent in (Path("/tmp"), Path("/")):
            break
        os.chmod(parent, 0o755)
    fake_dir = tmp / "fake"
    fake_dir.mkdir()
    os.chmod(fake_dir, 0o1777)
    root = tmp / "root"
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fuzz-gateway", daemon=True)
    thread.start()
    stack = AsyncExitStack()

    async def start() -> Live:
        slack = FakeSlackApi(SLACK_TOKEN)
        await slack.start()
        stack.push_async_callback(slack.stop)
        bot = FakeBotApi(TG_TOKEN)
        await bot.start()
        stack.push_async_callback(bot.stop)
        env = gateway_env(
            root,
            fake_dir,
            free_uid_range(400),
            JAZZ_BRIDGE_SLACK__BOT_TOKEN=SLACK_TOKEN,
            JAZZ_BRIDGE_SLACK__SIGNING_SECRET=SLACK_SECRET,
            JAZZ_BRIDGE_SLACK__API_URL=slack.api_url,
            JAZZ_BRIDGE_SLACK__ALLOW_EVERYONE="true",
            JAZZ_BRIDGE_TELEGRAM__TOKEN=TG_TOKEN,
            JAZZ_BRIDGE_TELEGRAM__API_URL=bot.api_url,
            JAZZ_BRIDGE_TELEGRAM__MODE="webhook",
            JAZZ_BRIDGE_TELEGRAM__WEBHOOK_SECRET=TG_SECRET,
            JAZZ_BRIDGE_TELEGRAM__ALLOW_EVERYONE="true",
            JAZZ_BRIDGE_TELEGRAM__MIN_SEND_INTERVAL_S="0",
            JAZZ_BRIDGE_PROGRESS__FIRST_AFTER_S="30",
        )
        app, _client = await stack.enter_async_context(running_gateway(env))
        session = await stack.enter_async_context(
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        )
        return Live(app, f"http://127.0.0.1:{app.port}", session, fake_dir, root, loop)

    try:
        gw = asyncio.run_coroutine_threadsafe(start(), loop).result(120)
        yield gw
    finally:
        try:
            asyncio.run_coroutine_threadsafe(stack.aclose(), loop).result(120)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)
            loop.close()
            remove_accounts(root / "state" / "accounts.json")


# -- hostile values and mutations ---------------------------------------------------------------


@dataclass(frozen=True)
class Deep:
    """A list or object nested ``levels`` deep (serialized by hand: json.dumps would recurse)."""

    levels: int
    kind: str

    def text(self) -> str:
        if self.kind == "list":
            return "[" * self.levels + "1" + "]" * self.levels
        return '{"a":' * self.levels + "1" + "}" * self.levels


PATHISH = [
    "",
    " ",
    ".",
    "..",
    "../../../etc/passwd",
    "/etc/shadow",
    "a/b",
    "C0CHAN0001/../..",
    "\x00",
    "U0\x00USER",
    "line\nbreak",
    "\u202etxt.exe",
    "İSTANBUL",
    "ﬀ" * 40,
    "%2e%2e%2f",
    "\ud800",
    "😀" * 10,
]

json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
)
small_json = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)
hostile = st.one_of(
    json_leaf,
    small_json,
    st.sampled_from(PATHISH),
    st.text(alphabet=st.characters(codec=None), max_size=50),  # surrogates included
    st.integers(10_000, 300_000).map(lambda n: "x" * n),
    st.integers(1_000, 60_000).map(lambda n: "😀" * n),
    st.builds(Deep, st.integers(50, 1000), st.sampled_from(["list", "dict"])),
    st.just([]),
    st.just({}),
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON value (the root included)."""
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            found += paths(child, (*prefix, i))
    return found


@dataclass(frozen=True)
class Mutation:
    op: str  # "set" | "delete" | "add"
    pick: int  # which path (modulo how many there are), unless ``target`` names one
    value: Any
    key: str
    target: tuple[Any, ...] | None = None

    def apply(self, doc: Any) -> Any:
        candidates = paths(doc)
        path = self.target if self.target in candidates else None
        if self.target is not None and path is None:  # a named field the vector lacks: add it
            parent_path = self.target[:-1]
            if parent_path not in candidates or not isinstance(_at(doc, parent_path), dict):
                return doc
            _at(doc, parent_path)[self.target[-1]] = copy.deepcopy(self.value)
            return doc
        if path is None:
            path = candidates[self.pick % len(candidates)]
        if not path:
            return copy.deepcopy(self.value) if self.op != "add" else doc
        parent = _at(doc, path[:-1])
        last = path[-1]
        value = copy.deepcopy(self.value)  # never share a drawn object between examples
        if self.op == "delete":
            parent.pop(last)
        elif self.op == "add" and isinstance(parent[last], dict):
            parent[last][self.key] = value
        else:
            parent[last] = value
        return doc


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        doc = doc[step]
    return doc


# strings above all where a field is named: ids and texts are where a path or a key is made
stringy = st.one_of(
    st.sampled_from(PATHISH),
    st.text(alphabet=st.characters(codec=None), max_size=40),
    st.text(max_size=40),
    st.integers(20_000, 200_000).map(lambda n: "C" * n),
    hostile,
)


def mutations(fields: list[tuple[Any, ...]]) -> st.SearchStrategy[list[Mutation]]:
    anywhere = st.builds(
        Mutation,
        st.sampled_from(["set", "set", "delete", "add"]),
        st.integers(0, 10_000),
        hostile,
        st.text(max_size=12),
    )
    named = st.builds(
        Mutation,
        st.sampled_from(["set", "set", "set", "delete"]),
        st.just(0),
        stringy,
        st.just(""),
        st.sampled_from(fields),
    )
    return st.lists(st.one_of(named, anywhere), min_size=1, max_size=3)


SLACK_FIELDS: list[tuple[Any, ...]] = [
    ("event", "text"),
    ("event", "channel"),
    ("event", "user"),
    ("event", "ts"),
    ("event", "thread_ts"),
    ("event", "team"),
    ("event", "subtype"),
    ("event", "channel_type"),
    ("event", "bot_id"),
    ("event", "files"),
    ("event", "blocks"),
    ("event",),
    ("team_id",),
    ("event_id",),
    ("type",),
    ("authorizations",),
    ("challenge",),
]
SLACK_ACTION_FIELDS: list[tuple[Any, ...]] = [
    ("user",),
    ("user", "id"),
    ("actions",),
    ("actions", 0),
    ("actions", 0, "value"),
    ("container",),
    ("container", "channel_id"),
    ("container", "message_ts"),
    ("channel",),
    ("team",),
    ("message",),
    ("type",),
]
TELEGRAM_FIELDS: list[tuple[Any, ...]] = [
    ("update_id",),
    ("message",),
    ("message", "text"),
    ("message", "caption"),
    ("message", "message_id"),
    ("message", "date"),
    ("message", "chat"),
    ("message", "chat", "id"),
    ("message", "chat", "type"),
    ("message", "from"),
    ("message", "from", "id"),
    ("message", "from", "first_name"),
    ("message", "from", "username"),
    ("message", "from", "is_bot"),
    ("message", "message_thread_id"),
    ("message", "is_topic_message"),
    ("message", "entities"),
    ("message", "document"),
    ("message", "document", "file_name"),
    ("message", "document", "file_size"),
    ("message", "photo"),
    ("message", "reply_to_message"),
    ("callback_query", "data"),
    ("callback_query", "from"),
    ("callback_query", "message"),
]


def depth(value: Any) -> int:
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, Deep):
            deepest = max(deepest, level + item.levels)
        elif isinstance(item, dict):
            deepest = max(deepest, level + 1)
            stack += [(v, level + 1) for v in item.values()]
        elif isinstance(item, list):
            deepest = max(deepest, level + 1)
            stack += [(v, level + 1) for v in item]
    return deepest


def dumps(doc: Any) -> bytes:
    """JSON text of ``doc`` with its Deep parts spliced in (ensure_ascii: surrogates survive)."""
    deeps: dict[str, Deep] = {}

    def default(obj: Any) -> Any:
        if isinstance(obj, Deep):
            marker = f"@@deep{len(deeps)}@@"
            deeps[marker] = obj
            return marker
        raise TypeError(type(obj).__name__)

    text = json.dumps(doc, default=default)
    for marker, deep in deeps.items():
        text = text.replace(json.dumps(marker), deep.text(), 1)
    return text.encode()


def sign(body: bytes) -> dict[str, str]:
    ts = str(int(time.time()))
    digest = hmac.new(SLACK_SECRET.encode(), b"v0:" + ts.encode() + b":" + body, hashlib.sha256)
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": "v0=" + digest.hexdigest()}


def vector(directory: Path, name: str) -> Any:
    return json.loads((directory / f"{name}.json").read_text())


# -- the oracles: what the platforms' documentation says could be a person's message -----------


def _str(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _opt(value: Any, kind: type | tuple[type, ...]) -> bool:
    return value is None or (isinstance(value, kind) and not isinstance(value, bool))


def slack_may_run(body: Any) -> bool:
    if not isinstance(body, dict) or depth(body) > MAX_REAL_DEPTH:
        return False
    event = body.get("event")
    if body.get("type") != "event_callback" or not isinstance(event, dict):
        return False
    if event.get("type") not in ("app_mention", "message") or event.get("bot_id"):
        return False
    if event.get("subtype") not in PERSON_SUBTYPES:
        return False
    if not all(_str(event.get(k)) for k in ("user", "channel", "ts")):
        return False
    strings = [event.get(k) for k in ("thread_ts", "text", "channel_type")]
    strings += [body.get("team_id") or event.get("team"), body.get("event_id")]
    return all(_opt(v, str) for v in strings) and _opt(event.get("files"), list)


def telegram_may_run(update: Any) -> bool:
    if not isinstance(update, dict) or depth(update) > MAX_REAL_DEPTH:
        return False
    message = update.get("message")
    if type(update.get("update_id")) is not int or not isinstance(message, dict):
        return False
    chat, sender = message.get("chat"), message.get("from")
    if not isinstance(chat, dict) or type(chat.get("id")) is not int:
        return False
    if not isinstance(sender, dict) or type(sender.get("id")) is not int or sender.get("is_bot"):
        return False
    if type(message.get("message_id")) is not int or not isinstance(chat.get("type"), str):
        return False
    text, caption = message.get("text"), message.get("caption")
    if not (_opt(text, str) and _opt(caption, str)):
        return False
    has_file = any(message.get(k) for k in ("document", "photo", "voice", "audio"))
    return bool((text or caption or "").strip()) or has_file


# -- bookkeeping ---------------------------------------------------------------------------------


@dataclass
class Tally:
    name: str
    cases: int = 0
    may_run: int = 0
    statuses: Counter[int] = field(default_factory=Counter)

    def line(self) -> str:
        codes = ", ".join(f"{code}: {n}" for code, n in sorted(self.statuses.items()))
        return (
            f"[fuzz] {self.name}: {self.cases} cases tried ({self.may_run} still a valid "
            f"message, {self.cases - self.may_run} must not run); statuses {codes}"
        )


def check_one(
    gw: Live, tally: Tally, status: int, may_run: bool, before: float, marker: str
) -> None:
    tally.cases += 1
    tally.statuses[status] += 1
    assert status < 500, f"the gateway answered {status}"
    assert status not in (401, 403), f"{status}: the body never reached the adapter"
    if may_run:
        tally.may_run += 1
    else:
        gw.forbidden.add(marker)
        assert gw.accepted() == before, "a payload that is not a message was accepted"


def settle_and_check(gw: Live, tally: Tally, capsys: pytest.CaptureFixture[str]) -> None:
    """Runs drained, the gateway healthy, no forbidden marker in any run, homes in chats/."""
    store = gw.app.store
    assert store is not None

    async def idle() -> bool:
        for state in (InboxState.ACCEPTED, InboxState.RUNNING):
            if await store.messages_in_state(state):
                return False
        return True

    gw.call(lambda: wait_until(idle, 120, "every accepted message finished"), timeout=130)
    assert gw.healthz() == 200
    prompts = gw.run_prompts()
    leaked = [m for m in gw.forbidden if any(m in p for p in prompts)]
    assert not leaked, f"payloads that must not run ran: {leaked[:5]}"
    chats = gw.root / "chats"
    for conv in gw.call(store.conversations):
        assert naming.is_home_name(conv.home), conv.home
        home = (chats / conv.home).resolve()
        assert home.parent == chats.resolve()
    for entry in chats.iterdir():
        assert naming.is_home_name(entry.name) and not entry.is_symlink(), entry
    with capsys.disabled():
        print("\n" + tally.line() + f"; {len(prompts)} runs in total so far")


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- Slack -----------------------------------------------------------------------------------------


def test_slack_controls_run(live: Live) -> None:
    """Unmutated vectors do run: the pipeline under the fuzz is live (else the rest is moot)."""
    for name in ("app_mention", "direct_message"):
        body = vector(SLACK_VECTORS, name)
        body["event_id"] = f"Ev{name}Control"
        body["event"]["text"] += f" control-{name}"
        raw = dumps(body)
        assert (
            live.post("/slack/events", raw, {"Content-Type": "application/json", **sign(raw)})
            == 200
        )

    def ran() -> bool:
        prompts = live.run_prompts()
        return all(
            any(f"control-{n}" in p for p in prompts) for n in ("app_mention", "direct_message")
        )

    live.call(lambda: wait_until(ran, 60, "both control messages to run"), timeout=70)


def test_slack_events_fuzz(live: Live, capsys: pytest.CaptureFixture[str]) -> None:
    tally = Tally("POST /slack/events (JSON events)")
    names = [
        "app_mention",
        "direct_message",
        "thread_reply",
        "bot_message_ignored",
        "url_verification",
    ]

    @FUZZ
    @given(name=st.sampled_from(names), muts=mutations(SLACK_FIELDS))
    def one(name: str, muts: list[Mutation]) -> None:
        marker = f"fzsq{tally.cases}q"
        doc: Any = vector(SLACK_VECTORS, name)
        doc["event_id"] = f"EvFz{marker}"
        if isinstance(doc.get("event"), dict) and isinstance(doc["event"].get("text"), str):
            doc["event"]["text"] += f" {marker}"
            # a message is named by its channel and ts: each case a message of its own
            doc["event"]["ts"] = f"1764671000.{tally.cases:06d}"
        for m in muts:
            doc = m.apply(doc)
        raw = dumps(doc)
        before = live.accepted()
        status = live.post("/slack/events", raw, {"Content-Type": "application/json", **sign(raw)})
        check_one(live, tally, status, slack_may_run(doc), before, marker)

    one()
    settle_and_check(live, tally, capsys)


def test_slack_interactivity_fuzz(live: Live, capsys: pytest.CaptureFixture[str]) -> None:
    """Button presses (``payload=`` forms) never start a run, mutated or not."""
    tally = Tally("POST /slack/events (payload= interactivity)")

    @FUZZ
    @given(muts=mutations(SLACK_ACTION_FIELDS), as_text=st.booleans(), junk=st.text(max_size=40))
    def one(muts: list[Mutation], as_text: bool, junk: str) -> None:
        doc: Any = vector(SLACK_VECTORS, "block_actions")
        for m in muts:
            doc = m.apply(doc)
        payload = dumps(doc).decode() if not as_text else junk + dumps(doc).decode()[:200]
        raw = urlencode({"payload": payload}).encode()
        before = live.accepted()
        headers = {"Content-Type": "application/x-www-form-urlencoded", **sign(raw)}
        status = live.post("/slack/events", raw, headers)
        check_one(live, tally, status, False, before, f"never-{tally.cases}")

    one()
    settle_and_check(live, tally, capsys)


def test_slack_raw_bodies_fuzz(live: Live, capsys: pytest.CaptureFixture[str]) -> None:
    """Bytes that are not JSON at all (bad UTF-8, truncated, odd content types), signed."""
    tally = Tally("POST /slack/events (raw bodies)")
    content_types = [
        "application/json",
        "application/x-www-form-urlencoded",
        "text/plain",
        "application/json; charset=no-such-charset",
        "multipart/form-data",
    ]

    @FUZZ
    @given(
        raw=st.binary(max_size=2000), ctype=st.sampled_from(content_types), cut=st.integers(0, 400)
    )
    def one(raw: bytes, ctype: str, cut: int) -> None:
        if cut % 3 == 0:  # a real vector, truncated
            raw = (SLACK_VECTORS / "app_mention.json").read_bytes()[:cut] + raw[:20]
        before = live.accepted()
        status = live.post("/slack/events", raw, {"Content-Type": ctype, **sign(raw)})
        check_one(live, tally, status, False, before, f"never-{tally.cases}")

    one()
    settle_and_check(live, tally, capsys)


# -- Telegram --------------------------------------------------------------------------------------


def test_telegram_control_runs(live: Live) -> None:
    body = vector(TG_VECTORS, "private_message")
    body["update_id"] = 1
    body["message"]["text"] += " control-telegram"
    raw = dumps(body)
    headers = {"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": TG_SECRET}
    assert live.post("/telegram/webhook", raw, headers) == 200

    def ran() -> bool:
        return any("control-telegram" in p for p in live.run_prompts())

    live.call(lambda: wait_until(ran, 60, "the control message to run"), timeout=70)


def test_telegram_webhook_fuzz(live: Live, capsys: pytest.CaptureFixture[str]) -> None:
    tally = Tally("POST /telegram/webhook")
    names = [
        "private_message",
        "group_mention",
        "forum_topic",
        "document",
        "callback_query",
        "edited_message",
    ]
    headers = {"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": TG_SECRET}

    @FUZZ
    @given(
        name=st.sampled_from(names),
        muts=mutations(TELEGRAM_FIELDS),
        raw=st.none() | st.binary(max_size=300),
    )
    def one(name: str, muts: list[Mutation], raw: bytes | None) -> None:
        marker = f"fztq{tally.cases}q"
        doc: Any = vector(TG_VECTORS, name)
        doc["update_id"] = 10_000 + tally.cases  # fresh: a duplicate is never run anyway
        message = doc.get("message")
        if isinstance(message, dict):
            key = "text" if "text" in message else "caption"
            if isinstance(message.get(key), str):
                message[key] += f" {marker}"
        for m in muts:
            doc = m.apply(doc)
        body = dumps(doc) if raw is None else raw
        before = live.accepted()
        status = live.post("/telegram/webhook", body, headers)
        may = raw is None and telegram_may_run(doc)
        check_one(live, tally, status, may, before, marker)

    one()
    settle_and_check(live, tally, capsys)


# -- thread keys -----------------------------------------------------------------------------------

SAFE = set(string.ascii_lowercase + string.digits + "._-")
keys = st.one_of(
    st.text(max_size=200),
    st.text(alphabet=st.characters(codec=None), max_size=100),
    st.sampled_from(PATHISH),
    st.lists(
        st.sampled_from(["..", "/", ".", "slack:", "T0:", "\x00", "İ", "-", "_"]), max_size=30
    ).map("".join),
    st.integers(1, 40_000).map(lambda n: "k" * n),
)


def test_home_names_are_safe_for_any_thread_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chats = tmp_path / "chats"
    tried = Counter[str]()
    named: dict[str, str] = {}  # every name made so far -> the key it was made of

    @settings(max_examples=EXAMPLES * 8, deadline=None, database=None)
    @given(key=keys)
    def one(key: str) -> None:
        try:
            name = naming.home_name(key)
        except ThreadKeyError as exc:
            tried["refused"] += 1
            assert str(exc)  # says why
            return
        tried["named"] += 1
        assert set(name) <= SAFE and name not in (".", "..") and not name.startswith(".")
        assert len(name) <= naming.PREFIX_MAX + 1 + naming.HASH_HEX
        assert naming.is_home_name(name)
        assert naming.home_name(key) == name  # deterministic
        # different keys, different homes: a name two keys share gives one conversation
        # another's files (the hash is of the whole key, not of the cleaned-up prefix)
        assert named.setdefault(name, key) == key, f"{key!r} and {named[name]!r} share {name}"
        assert (chats / name).resolve().parent == chats.resolve()
        account = naming.account_name(f"{tmp_path}\0{name}")
        assert naming.ACCOUNT_NAME_RE.match(account) and len(account) <= naming.ACCOUNT_NAME_MAX

    one()
    # different keys, different names, also where their cleaned-up prefixes are the same
    assert naming.home_name("slack:T:C:1.2") != naming.home_name("slack:T:C:1-2")
    with capsys.disabled():
        print(
            f"\n[fuzz] thread keys: {sum(tried.values())} cases tried ({tried['named']} named, "
            f"{tried['refused']} refused with a reason)"
        )
