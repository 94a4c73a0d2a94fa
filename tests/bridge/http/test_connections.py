"""PeerConnections: the count of open connections per address behind the per-peer limit."""

from __future__ import annotations

from bridge.http.connections import PeerConnections


def test_a_peer_is_refused_at_its_limit_and_others_are_not() -> None:
    refused: list[str] = []
    peers = PeerConnections(2, refused.append)
    assert peers.take("10.0.0.1") and peers.take("10.0.0.1")
    assert not peers.take("10.0.0.1")
    assert peers.take("10.0.0.2")
    assert refused == ["10.0.0.1"]
    assert peers.open == {"10.0.0.1": 2, "10.0.0.2": 1}


def test_a_closed_connection_gives_its_place_back_and_a_peer_with_none_is_forgotten() -> None:
    peers = PeerConnections(1)
    assert peers.take("a")
    assert not peers.take("a")
    peers.give_back("a")
    assert peers.open == {}
    assert peers.take("a")


def test_a_limit_of_zero_is_no_limit() -> None:
    peers = PeerConnections(0)
    assert all(peers.take("proxy") for _ in range(10_000))
    assert peers.open == {"proxy": 10_000}
