"""A platform of the tests' own with no buttons and no edits (how the core degrades)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict

from bridge.model import Attachment, Outgoing, ReplyTarget
from bridge.ports import Adapter, AdapterContext, AdapterSpec, Capabilities


class PlainSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool = True


class PlainSurface:
    name = "plain"
    capabilities = Capabilities(edit=False, buttons=False, upload=False, max_length=2000)

    def __init__(self) -> None:
        self.sent: list[tuple[str, Outgoing]] = []
        self.changed = asyncio.Event()

    async def send(self, target: ReplyTarget, message: Outgoing, *, reply_key: str) -> str:
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


def _factory(ctx: AdapterContext) -> Adapter:
    return PlainAdapter(ctx)


def _enabled(settings: Any) -> bool:
    return bool(settings.enabled)


SPEC = AdapterSpec("plain", "plain", PlainSettings, _factory, _enabled)
