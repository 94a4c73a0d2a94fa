"""bridge/http/peers.py: the uid on the other end of a loopback TCP connection, from the host's
socket table, over IPv4 and IPv6, for a client of our own uid and (as root) another's."""

from __future__ import annotations

import os
import pwd
import socket
import subprocess
import sys

import pytest
from accounts_support import needs_root

from bridge.http.peers import peer_uid


def _server(family: int, host: str) -> socket.socket:
    try:
        srv = socket.socket(family, socket.SOCK_STREAM)
        srv.bind((host, 0))
    except OSError as exc:
        pytest.skip(f"no {host} here: {exc}")
    srv.listen(1)
    srv.settimeout(30)
    return srv


@pytest.mark.parametrize(
    ("family", "host"), [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")], ids=["v4", "v6"]
)
def test_a_client_of_our_own_uid(family: int, host: str) -> None:
    srv = _server(family, host)
    with srv, socket.socket(family, socket.SOCK_STREAM) as client:
        client.connect(srv.getsockname()[:2])
        conn, _ = srv.accept()
        with conn:
            assert peer_uid(conn.getpeername()[:2], conn.getsockname()[:2]) == os.getuid()


@needs_root
def test_a_client_of_another_account() -> None:
    nobody = pwd.getpwnam("nobody").pw_uid
    srv = _server(socket.AF_INET, "127.0.0.1")
    port = srv.getsockname()[1]
    code = (
        "import socket, sys\n"
        f"s = socket.create_connection(('127.0.0.1', {port}), timeout=30)\n"
        "sys.stdin.read()\n"  # holds the connection until the test closes stdin
    )
    switch = ["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups", "--"]
    with (
        srv,
        subprocess.Popen([*switch, sys.executable, "-c", code], stdin=subprocess.PIPE) as child,
    ):
        try:
            conn, _ = srv.accept()
            with conn:
                assert peer_uid(conn.getpeername()[:2], conn.getsockname()[:2]) == nobody
        finally:
            assert child.stdin is not None
            child.stdin.close()
            child.wait(30)


def test_no_such_connection_is_none() -> None:
    assert peer_uid(("127.0.0.1", 1), ("127.0.0.1", 2)) is None
    assert peer_uid(("not an address", 1), ("127.0.0.1", 2)) is None


def test_a_client_that_closed_is_no_ones() -> None:
    """Its FIN_WAIT2 row says uid 0 and inode 0 whoever opened it: not a uid to trust."""
    srv = _server(socket.AF_INET, "127.0.0.1")
    with srv:
        client = socket.create_connection(srv.getsockname()[:2], timeout=30)
        conn, _ = srv.accept()
        with conn:
            peer, local = conn.getpeername()[:2], conn.getsockname()[:2]
            assert peer_uid(peer, local) == os.getuid()
            client.close()  # the server end stays open: the client's row lingers, orphaned
            assert conn.recv(1) == b""  # its FIN has arrived
            assert peer_uid(peer, local) is None
