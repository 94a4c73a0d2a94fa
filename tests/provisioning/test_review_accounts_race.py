"""Two gateways on one host (two roots) whose uid ranges overlap, each creating an account
for a new conversation at the same moment.

``AccountRegistry.ensure`` promises that a uid another account took "by then" is replaced
while the home has no files yet; its file lock only serialises one root, so two roots pick
the same free uid and the loser's ``groupadd --gid`` fails: that conversation's first
message fails with "groupadd: GID ... already exists" instead of getting the next uid.
"""

from __future__ import annotations

import grp
import threading
from pathlib import Path

from accounts_support import OperatorGroup, needs_root, remove_accounts

from provisioning.accounts import AccountRegistry
from provisioning.errors import AccountError
from provisioning.layout import init_root

ROUNDS = 6


@needs_root
def test_two_roots_creating_accounts_at_once_both_succeed(
    tmp_path: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    a = init_root(tmp_path / "a", operator_group.name)
    b = init_root(tmp_path / "b", operator_group.name)
    registries = [AccountRegistry(info.layout, info.operator_gid, uid_range) for info in (a, b)]
    groups_before = {g.gr_name for g in grp.getgrall()}
    failures: list[str] = []
    try:
        for n in range(ROUNDS):
            barrier = threading.Barrier(2)

            def make(
                registry: AccountRegistry,
                which: str,
                n: int = n,
                barrier: threading.Barrier = barrier,
            ) -> None:
                barrier.wait(30)
                try:
                    registry.ensure(f"web-race{n}{which}-0123456789abcdef", f"web:race{n}{which}")
                except AccountError as exc:
                    failures.append(f"round {n} root {which}: {exc}")

            threads = [
                threading.Thread(target=make, args=(reg, which), daemon=True)
                for reg, which in zip(registries, "ab", strict=True)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
                assert not t.is_alive()
            if failures:
                break
    finally:
        remove_accounts(a.layout.uid_map)
        remove_accounts(b.layout.uid_map)
    assert not failures, failures
    # the loser of a race had made its private group (both groupadds can pass with one gid):
    # it is removed with the attempt, not left behind at the winner's gid
    stray = {g.gr_name: g.gr_gid for g in grp.getgrall()}.keys() - groups_before
    assert not {n for n in stray if n.startswith("jb-")}, stray
