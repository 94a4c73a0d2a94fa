"""``jazz-bridge serve`` on an address it cannot listen on: one line naming the port and the
setting, exit 2, and no root made for a gateway that cannot listen."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

Cli = Callable[..., subprocess.CompletedProcess[str]]
ErrorLine = Callable[[subprocess.CompletedProcess[str]], str]


def test_a_taken_port_is_named_before_a_new_root_is_made(
    tmp_path: Path, cli: Cli, error_line: ErrorLine
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        done = cli(tmp_path, "serve", JAZZ_BRIDGE_SERVER__PORT=port)
        assert done.returncode == 2
        line = error_line(done)
        assert line.startswith(f"jazz-bridge: error: port {port} on 127.0.0.1 is already in use")
        assert "server.port (JAZZ_BRIDGE_SERVER__PORT)" in line
        assert not (tmp_path / "root").exists()
        # an existing root: the server's own bind error says the same
        assert cli(tmp_path, "init").returncode == 0
        again = cli(tmp_path, "serve", JAZZ_BRIDGE_SERVER__PORT=port)
        assert again.returncode == 2
        assert "is already in use" in error_line(again), again.stderr[-2000:]
