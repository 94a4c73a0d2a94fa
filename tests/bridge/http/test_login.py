"""The shared login's limit on wrong tokens (``bridge/http/login.py``, :class:`FailedLogins`),
by itself with a clock of the test's: a sliding window per address, a right token never
counted, and a bounded memory however many addresses fail."""

from __future__ import annotations

from bridge.http import login
from bridge.http.login import FailedLogins


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


def test_an_address_is_limited_after_its_wrong_tries_until_the_oldest_leaves_the_window() -> None:
    clock = Clock()
    limit = FailedLogins(allowed=3, window_s=60, clock=clock)
    for _ in range(3):
        assert limit.retry_after("10.0.0.1") is None
        limit.failed("10.0.0.1")
        clock.now += 10
    assert limit.retry_after("10.0.0.1") == 30  # the first of the three is 30 s old
    assert limit.retry_after("10.0.0.2") is None  # another address is not held up
    clock.now += 30
    assert limit.retry_after("10.0.0.1") is None  # one try back, not three
    limit.failed("10.0.0.1")
    assert limit.retry_after("10.0.0.1") == 10


def test_the_addresses_remembered_are_bounded() -> None:
    clock = Clock()
    limit = FailedLogins(allowed=1, window_s=60, clock=clock)
    for n in range(login.LOGIN_ADDRESSES_KEPT + 10):
        limit.failed(f"2001:db8::{n:x}")
    assert len(limit._failures) == login.LOGIN_ADDRESSES_KEPT
    assert limit.retry_after("2001:db8::0") is None  # the oldest forgotten
    assert limit.retry_after(f"2001:db8::{login.LOGIN_ADDRESSES_KEPT + 9:x}") == 60
