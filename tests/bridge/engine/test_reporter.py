"""The progress reporter's bubble when its send fails: at most one bubble, never a guess.

A surface of the test's own (the port, not the gateway's code) lands or refuses each send
as told. A send that may have landed is looked up where the surface can tell (adopted when
found, sent again only when the surface says it is not there); a refusal is simply tried
again. Telegram's side (no lookup: no second bubble) is in tests/adapters/telegram.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from gateway_harness import wait_until

from bridge.config import ProgressSettings
from bridge.engine.progress import ProgressState
from bridge.engine.reporter import ProgressReporter
from bridge.model import Attachment, Outgoing, ReplyTarget
from bridge.ports import Capabilities, DeliveryError

TARGET = ReplyTarget(surface="lossy", thread_key="lossy:1", context={})


class LossySurface:
    """Sends land unless told otherwise; ``faults`` say how the next sends fail, and whether
    the failed send landed all the same (its answer lost)."""

    name = "lossy"

    def __init__(self, faults: list[tuple[DeliveryError, bool]], lookup_faults: int = 0) -> None:
        self.capabilities = Capabilities(
            edit=True, buttons=True, edit_interval_s=0.2, confirm_delivery=True
        )
        self.faults = faults
        self.lookup_faults = lookup_faults
        self.landed: dict[str, str] = {}  # reply key -> ref
        self.sends = 0
        self.lookups = 0
        self.edits: list[tuple[str, str]] = []  # (ref, text)

    async def send(self, target: ReplyTarget, message: Outgoing, *, reply_key: str) -> str:
        self.sends += 1
        fault, landed = self.faults.pop(0) if self.faults else (None, True)
        ref = f"m{self.sends}"
        if landed:
            self.landed[reply_key] = ref
        if fault is not None:
            raise fault
        return ref

    async def find_sent(self, target: ReplyTarget, reply_key: str) -> str | None:
        self.lookups += 1
        if self.lookup_faults:
            self.lookup_faults -= 1
            raise DeliveryError("lossy: cannot tell now")
        return self.landed.get(reply_key)

    async def edit(self, target: ReplyTarget, ref: str, message: Outgoing) -> None:
        self.edits.append((ref, message.text))

    async def upload(
        self, target: ReplyTarget, name: str, data: bytes, media_type: str | None, *, reply_key: str
    ) -> str:
        raise AssertionError("no uploads here")

    async def typing(self, target: ReplyTarget) -> None:
        return None

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        return b""


@asynccontextmanager
async def reporting(surface: LossySurface) -> AsyncIterator[ProgressReporter]:
    reporter = ProgressReporter(
        surface,
        TARGET,
        ProgressState(),
        ProgressSettings(first_after_s=0),
        run_id=7,
        requester="ada",
        stop_token="tok.stop",
    )
    reporter.start()
    try:
        yield reporter
    finally:
        await asyncio.wait_for(reporter.finish(), timeout=5)


async def test_a_bubble_that_landed_unseen_is_found_and_adopted_not_sent_again() -> None:
    surface = LossySurface([(DeliveryError("lossy: connection reset"), True)], lookup_faults=1)
    async with reporting(surface) as reporter:
        await wait_until(lambda: bool(surface.edits), 5, "the adopted bubble edited")
        assert surface.sends == 1 and surface.lookups == 2  # the first lookup could not tell
        assert reporter.bubble_ref == "m1" and surface.edits[0][0] == "m1"
    await reporter.close("✓ done")
    assert surface.edits[-1] == ("m1", "✓ done")
    assert list(surface.landed.values()) == ["m1"]


async def test_a_bubble_the_surface_says_is_not_there_is_sent_again_once() -> None:
    surface = LossySurface([(DeliveryError("lossy: 502 before the work"), False)])
    async with reporting(surface) as reporter:
        await wait_until(lambda: reporter.bubble_ref is not None, 5, "the bubble shown")
        assert surface.sends == 2 and surface.lookups == 1
        assert surface.landed == {"progress:7": "m2"}


async def test_a_rate_limited_bubble_is_tried_again_and_a_permanent_refusal_is_not() -> None:
    limited = LossySurface([(DeliveryError("lossy: 429", retry_after=0.1), False)])
    async with reporting(limited) as reporter:
        await wait_until(lambda: reporter.bubble_ref is not None, 5, "the bubble shown")
        assert limited.sends == 2 and limited.lookups == 0
    refused = LossySurface([(DeliveryError("lossy: blocked", permanent=True), False)])
    async with reporting(refused) as reporter:
        await wait_until(lambda: reporter.no_bubble, 5, "the bubble given up")
        assert refused.sends == 1 and reporter.bubble_ref is None
