"""A platform of the tests' own with no buttons and no edits (how the core degrades)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict

from bridge.model import Attachment, Outgoing, ReplyTarget
from bridge.ports import Adapter, AdapterContext, AdapterSpec, Capabilities, DeliveryError


class PlainSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool = True


class PlainSurface:
    name = "plain"
    capabilities = Capabilities(edit=False, buttons=False, upload=False, max_length=2000)

    def __init__(self) -> None:
        self.sent: list[tuple[str, Outgoing]] = []
        self.changed = asyncio.Event()
        self.unreachable = UNREACHABLE_AT_START  # the platform is down: every send fails

    async def send(self, target: ReplyTarget, message: Outgoing, *, reply_key: str) -> str:
        if self.unreachable:
            raise DeliveryError("plain: the platform is unreachable")
        self.sent.append((reply_key, message))
        self.changed.set()
        return reply_key

    async def edit(self, target: ReplyTarget, ref: str, message: Outgoing) -> None:
        raise AssertionError("the core edited on a surface that cannot edit")

    async def upload(
        self, target: ReplyTarget, name: str, data: bytes, media_type: str | None, *, reply_key: str
    ) -> str:
        raise AssertionError("the core uploaded on a surface that cannot upload")

    async def typing(self, target: ReplyTarget) -> None:
        return None

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        return b""

    def texts(self) -> list[str]:
        return [m.text for _, m in self.sent]


class PlainAdapter:
    name = "plain"

    def __init__(self, ctx: AdapterContext) -> None:
        self.ctx = ctx
        self.surface = PlainSurface()
        INSTANCES.append(self)

    def add_routes(self, app: web.Application) -> None:
        return None

    async def initialize(self) -> None:
        return None

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def shutdown(self) -> None:
        return None

    def health(self) -> str | None:
        return None


INSTANCES: list[PlainAdapter] = []
UNREACHABLE_AT_START = False  # a test sets it for the next gateway it starts


def _factory(ctx: AdapterContext) -> Adapter:
    return PlainAdapter(ctx)


def _enabled(settings: Any) -> bool:
    return bool(settings.enabled)


SPEC = AdapterSpec("plain", "plain", PlainSettings, _factory, _enabled)


# -- a surface that can tell whether a reply landed (like Slack's reply-key metadata) ---------


class Platform:
    """What the platform itself holds: it outlives gateway restarts, as a real one does."""

    def __init__(self) -> None:
        self.landed: dict[str, str] = {}  # reply key -> the platform's reference
        self.posts: list[str] = []  # every reply key posted, duplicates included
        self.lookups: list[str] = []
        # reply-key prefixes: the gateway "dies" after the post, before its mark / the post
        # lands but its answer is lost (a timeout), once
        self.hang_after_landing: tuple[str, ...] = ()
        self.fail_after_landing: tuple[str, ...] = ()
        self.hanging = asyncio.Event()


PLATFORM = Platform()


class ConfirmingSurface(PlainSurface):
    name = "confirm"
    capabilities = Capabilities(max_length=2000, confirm_delivery=True)

    async def send(self, target: ReplyTarget, message: Outgoing, *, reply_key: str) -> str:
        ref = f"ts-{len(PLATFORM.posts) + 1}"
        PLATFORM.posts.append(reply_key)
        PLATFORM.landed[reply_key] = ref
        await super().send(target, message, reply_key=reply_key)
        if reply_key.startswith(PLATFORM.hang_after_landing):
            PLATFORM.hanging.set()
            await asyncio.Event().wait()  # never returns: the process dies here
        if reply_key.startswith(PLATFORM.fail_after_landing):
            PLATFORM.fail_after_landing = ()
            raise TimeoutError("the platform's answer never came")
        return ref

    async def find_sent(self, target: ReplyTarget, reply_key: str) -> str | None:
        PLATFORM.lookups.append(reply_key)
        return PLATFORM.landed.get(reply_key)


class ConfirmingAdapter(PlainAdapter):
    name = "confirm"

    def __init__(self, ctx: AdapterContext) -> None:
        self.ctx = ctx
        self.surface = ConfirmingSurface()
        CONFIRMING.append(self)


CONFIRMING: list[ConfirmingAdapter] = []


def _confirming(ctx: AdapterContext) -> Adapter:
    return ConfirmingAdapter(ctx)


CONFIRM_SPEC = AdapterSpec("confirm", "confirm", PlainSettings, _confirming, _enabled)
