"""Helpers of the daemon backend's tests: settings for the fake daemon, a run request, and
reading a run through (``fake_daemon`` is the daemon; the fixtures are in ``conftest``)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fake_daemon import OPERATOR, TOKEN, WAIT, FakeDaemon, FakeRun

from bridge.config import RunnerSettings
from bridge.runner.base import RunHandle, RunnerEvent, RunRequest, RunResult
from provisioning.homes import Home
from provisioning.sandbox import RunIdentity
from provisioning.system_accounts import Account


def settings(url: str, **overrides: Any) -> RunnerSettings:
    values: dict[str, Any] = {
        "backend": "daemon",
        "daemon_url": url,
        "daemon_token": TOKEN,
        "daemon_operator_token": OPERATOR,
        "daemon_poll_s": 0.02,
        **overrides,
    }
    return RunnerSettings(**values)


def make_request(tmp_path: Path, timeout_s: float = 30.0) -> RunRequest:
    home = Home(
        thread_key="web:local:c1",
        name="web-local-c1",
        path=tmp_path,
        account=Account("me", os.getuid(), os.getgid()),
        operator_gid=os.getgid(),
        isolated=False,
    )
    return RunRequest(
        home=home,
        identity=RunIdentity(home=home, env={}, umask=0o077),
        conversation="web:local:c1#1",
        prompt="say hello",
        agent="default",
        approval_policy="low-risk",
        timeout_s=timeout_s,
    )


async def collect(
    handle: RunHandle, on_event: Callable[[RunnerEvent], Any] | None = None
) -> tuple[list[RunnerEvent], RunResult]:
    """Every event of the run (each handed to ``on_event`` first), then its result."""

    async def go() -> tuple[list[RunnerEvent], RunResult]:
        events = []
        async for event in handle.events():
            events.append(event)
            if on_event is not None:
                await on_event(event)
        return events, await handle.wait()

    return await asyncio.wait_for(go(), WAIT)


async def polls_or_cancel(daemon: FakeDaemon, polls: int) -> None:
    """``polls`` more polls of the run, or its cancel (a timeout), whichever comes first."""
    waits = [
        asyncio.ensure_future(daemon.wait_polls(polls)),
        asyncio.ensure_future(daemon.cancelled.wait()),
    ]
    try:
        await asyncio.wait(waits, timeout=WAIT, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
        await asyncio.gather(*waits, return_exceptions=True)


def park_on(pending: dict[str, Any]) -> Callable[[FakeRun], None]:
    """A daemon run that parks at once, waiting on ``pending``."""

    def park(run: FakeRun) -> None:
        run.state = "input-required"
        run.pending = pending

    return park


def approve(handle: RunHandle) -> Callable[[RunnerEvent], Any]:
    """Answer the approval prompt ``tc-1`` with an approval, as a person in the chat would."""

    async def on_event(event: RunnerEvent) -> None:
        if event.type == "approval_required":
            await handle.answer(
                {"type": "approval_decision", "toolCallId": "tc-1", "approved": True}
            )

    return on_event
