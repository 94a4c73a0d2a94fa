"""Which account is on the other end of a loopback TCP connection.

Without a token the web chat trusts whoever reaches it on loopback: the person at the
keyboard. But a conversation's run is a process on the same host too, under its own
account, and could ask the web chat for another conversation's thread (or post into it,
or press its buttons). A loopback connection's client socket is in this host's socket
table with the uid that opened it (``/proc/net/tcp``, ``tcp6``), so the web chat can tell
a conversation account from a person and refuse it. Linux only; elsewhere (or without
``/proc``) nothing is known and nothing is refused on this ground.

It fails closed: a client socket that is no process's any more (its owner sent the
request and closed at once, leaving a FIN_WAIT2/TIME_WAIT row that the kernel shows as
uid 0 with inode 0) or that the table does not show at all is "unknown", and the web chat
refuses an unknown client rather than take it for the person at the keyboard.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import sys

log = logging.getLogger(__name__)

TABLES = {4: "/proc/net/tcp", 6: "/proc/net/tcp6"}


def _hex_address(host: str, port: int) -> tuple[int, str]:
    """``host:port`` as the socket table prints it (each 32-bit word in host order)."""
    ip = ipaddress.ip_address(host.split("%", 1)[0])
    packed = ip.packed
    words = "".join(
        f"{int.from_bytes(packed[i : i + 4], sys.byteorder):08X}" for i in range(0, len(packed), 4)
    )
    return ip.version, f"{words}:{port:04X}"


def can_tell() -> bool:
    """Whether this host's socket tables can be read at all (Linux with /proc)."""
    return os.access(TABLES[4], os.R_OK)


def peer_uid(peer: tuple[str, int], local: tuple[str, int]) -> int | None:
    """The uid of the process that holds the client end of the TCP connection from
    ``peer`` to ``local`` (as ``getpeername``/``getsockname`` of the server's socket say),
    or None when the table does not show it or no process holds it any more (inode 0: an
    orphaned or TIME_WAIT socket, whose uid column says 0 whoever opened it). Blocking
    (reads /proc): call it off the event loop."""
    try:
        version, want_local = _hex_address(peer[0], peer[1])
        _, want_remote = _hex_address(local[0], local[1])
    except ValueError:
        return None
    try:
        with open(TABLES[version], encoding="ascii") as table:
            next(table, None)  # the header
            for line in table:
                fields = line.split()
                if len(fields) > 9 and fields[1] == want_local and fields[2] == want_remote:
                    return int(fields[7]) if fields[9] != "0" else None
    except OSError as exc:
        log.debug("cannot read %s: %s", TABLES[version], exc)
    return None
