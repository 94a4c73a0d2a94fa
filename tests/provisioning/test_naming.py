"""A thread key's home name: safe, deterministic, and hostile keys refused clearly."""

from __future__ import annotations

import pytest

from provisioning import naming
from provisioning.errors import ThreadKeyError


def test_home_names_are_safe_and_deterministic() -> None:
    keys = [
        "slack:T0TEAM:C0CHAN:1764669600.000100",
        "telegram:-1001234567890:42",
        "web:demo",
        "..",
        "../../etc/passwd",
        "/",
        "é" * 5000,
        "web:" + "x" * 3000,
        "A B\tC".replace("\t", " "),
    ]
    names = set()
    for key in keys:
        name = naming.home_name(key)
        assert name == naming.home_name(key)
        assert naming.is_home_name(name), name
        assert len(name) <= 65
        assert all(c in "abcdefghijklmnopqrstuvwxyz0123456789._-" for c in name)
        assert "/" not in name and name not in (".", "..")
        names.add(name)
    assert len(names) == len(keys)
    assert naming.home_name("web:demo").startswith("web-demo-")


@pytest.mark.parametrize("key", ["", "   ", "a\0b", "line\nbreak", "x" * 20000, "\ud800"])
def test_hostile_keys_are_refused_clearly(key: str) -> None:
    with pytest.raises(ThreadKeyError):
        naming.home_name(key)
