"""Reading a CLI run's output (``bridge.runner.cli_streams``): the progress events read
ahead of the turn engine are bounded in bytes too, and none is lost.

The queue between the runner's stderr and the engine held up to 256 events, whatever their
size, each up to 16 MiB (a ``tool_execution_complete`` carrying a tool's whole output, or
a hostile runner): while the engine was busy (posting a prompt to a slow platform) one run
could make the gateway hold 4 GiB, four runs at once 16 GiB. The runner is now made to wait
once the events nobody has read yet add up to ``MAX_QUEUED_BYTES``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from cli_run_support import own_request

from bridge.runner.cli import CliRunner
from bridge.runner.cli_handle import CliRunHandle

BOUND_S = 30
EVENTS = 300
EVENT_BYTES = 512 * 1024
LIMIT_BYTES = 48 * 1024 * 1024  # the bound (16 MiB) plus pipe and reader buffers, with room
STALL_S = 5  # how long a full pipe means the gateway stopped reading

# Writes its events without blocking; once the gateway has taken none of them for
# STALL_S (the pipe stays full: it stopped reading), it writes down how many bytes got
# through, then goes on blocking as a runner would.
RUNNER = r"""
import fcntl, json, os, select, sys
sys.stdin.readline()
poller = select.poll()
poller.register(2, select.POLLOUT)
pad = "A" * EVENT_BYTES
fcntl.fcntl(2, fcntl.F_SETFL, fcntl.fcntl(2, fcntl.F_GETFL) | os.O_NONBLOCK)
sent, noted = 0, False

def note(count):
    with open(sys.argv[1] + ".tmp", "w") as fh:
        fh.write(str(count))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])

for i in range(EVENTS):
    data = memoryview(('{"type":"tool_execution_complete","toolCallId":"%d","result":"%s"}\n'
                       % (i, pad)).encode())
    while data:
        try:
            n = os.write(2, data)
        except BlockingIOError:
            if poller.poll(STALL_S * 1000):
                continue  # the gateway is reading
            note(sent)
            noted = True
            fcntl.fcntl(2, fcntl.F_SETFL, fcntl.fcntl(2, fcntl.F_GETFL) & ~os.O_NONBLOCK)
            continue
        sent += n
        data = data[n:]
if not noted:
    note(sent)
print(json.dumps({"ok": True, "answer": "done"}), flush=True)
"""


async def test_unread_events_hold_a_bounded_amount_of_memory(tmp_path: Path) -> None:
    script = tmp_path / "runner.py"
    script.write_text(
        RUNNER.replace("EVENT_BYTES", str(EVENT_BYTES))
        .replace("EVENTS", str(EVENTS))
        .replace("STALL_S", str(STALL_S))
    )
    marker = tmp_path / "sent"
    runner = CliRunner([sys.executable, str(script), str(marker)], kill_grace_s=0.5)
    request = own_request(tmp_path, "mem", timeout_s=BOUND_S)
    handle = await asyncio.wait_for(runner.start(request), BOUND_S)
    assert isinstance(handle, CliRunHandle)
    try:
        # the engine reads nothing meanwhile (busy with a prompt, say)
        async with asyncio.timeout(BOUND_S):
            while not marker.exists():
                await asyncio.sleep(0.02)
        sent = int(marker.read_text())
        print(f"\nbytes the runner wrote before it had to wait: {sent:,}")
        assert sent < LIMIT_BYTES, f"the gateway took {sent:,} bytes of unread events"

        # and nothing is lost once the engine reads again
        seen = 0

        async def consume() -> None:
            nonlocal seen
            async for event in handle.events():
                assert event.data["toolCallId"] == str(seen)
                seen += 1

        await asyncio.wait_for(consume(), BOUND_S)
        result = await asyncio.wait_for(handle.wait(), BOUND_S)
        assert result.ok and result.answer == "done", result
        assert seen == EVENTS
    finally:
        await handle.stop()
        await asyncio.wait_for(handle.settled(), BOUND_S)
        await runner.close()
