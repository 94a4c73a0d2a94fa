"""``jazz-bridge serve``: run the gateway until SIGTERM or SIGINT.

Before anything is made or recovered, the address is probed, so a gateway that cannot
listen says why in one line naming the settings (and touches no root, no store).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import os
import signal
import socket

from ..config import CoreSettings
from ..errors import AdapterError, BridgeError, ConfigError
from ..ports import AdapterSpec
from .init import refuse_foreign_directory
from .served import record_served


def _bind_problem(exc: OSError, host: str, port: int) -> str | None:
    """One line for an address ``serve`` cannot listen on, naming the settings; None when
    ``exc`` is not about the address."""
    where = "server.host/server.port (JAZZ_BRIDGE_SERVER__HOST, JAZZ_BRIDGE_SERVER__PORT)"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} on {host} is already in use: stop what listens there (ss -ltnp "
            f"'sport = :{port}') or pick another server.port (JAZZ_BRIDGE_SERVER__PORT)"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{host} is not an address of this machine: fix {where}"
    if exc.errno == errno.EACCES:
        return (
            f"not allowed to listen on port {port} (below 1024 needs CAP_NET_BIND_SERVICE): "
            "pick a server.port from 1024 up (JAZZ_BRIDGE_SERVER__PORT)"
        )
    return None


def _unresolvable(host: str, exc: Exception) -> str:
    return (
        f"server.host {host!r} is no address this machine can listen on ({exc}): fix "
        "server.host (JAZZ_BRIDGE_SERVER__HOST), e.g. 127.0.0.1 or 0.0.0.0"
    )


def _check_address(host: str, port: int) -> None:
    """Refuse an address already taken before anything is made (a new root included); the
    server binds it again, as asyncio does (SO_REUSEADDR, IPv6 only on v6 sockets)."""
    try:
        found = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (socket.gaierror, UnicodeError) as exc:
        raise BridgeError(_unresolvable(host, exc)) from None
    if port == 0:
        return  # any free port: nothing to probe
    for family, kind, proto, _name, address in found:
        try:
            probe = socket.socket(family, kind, proto)
        except OSError:
            continue
        with probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                problem = _bind_problem(exc, host, port)
                if problem is not None:
                    raise BridgeError(problem) from None


def cmd_serve(
    args: argparse.Namespace, settings: CoreSettings, specs: dict[str, AdapterSpec]
) -> int:
    from provisioning.layout import Layout

    from .. import rules
    from ..app import lock_root, serve

    broken = rules.problems(settings, specs)
    if broken:  # what the configuration breaks is a configuration error (exit 78); serve's
        try:  # own check logs the warnings when it starts, so only a refusal logs them here
            rules.require(settings, specs)
        except AdapterError as exc:
            raise ConfigError(str(exc)) from None
    refuse_foreign_directory(settings)
    host, port = settings.server.host, settings.server.port
    state = Layout(settings.root.absolute()).state
    if state.is_dir():
        # a second serve is told by the root's lock, which names the gateway holding it,
        # rather than by the port that gateway holds
        os.close(lock_root(state))
    # No root made, and no store touched, for a gateway that cannot listen: the recovery
    # would requeue the messages left accepted, and the failed start's stop tell each one
    # "shutting down, send again" before a single run of it (at every systemd restart).
    _check_address(host, port)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(settings, specs, stop, on_locked=lambda: record_served(settings, os.environ))

    try:
        asyncio.run(main())
    except socket.gaierror as exc:  # an existing root: the server resolved it first
        raise BridgeError(_unresolvable(host, exc)) from None
    except OSError as exc:  # taken meanwhile, or an address the probe could not tell
        # asyncio: "error while attempting to bind on address ...", the errno kept
        problem = _bind_problem(exc, host, port) if "bind" in str(exc) else None
        if problem is None:
            raise
        raise BridgeError(problem) from None
    return 0
