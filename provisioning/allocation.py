"""Which uid a conversation gets: the allocation rules of the conversation accounts.

Split out of :mod:`provisioning.accounts` (the registry, which writes what is decided here
into the map and makes the account). The rules, in the order they are tried:

* a home that exists on disk (the map lost, or shared storage) gets the uid that owns it,
  when that uid is in the range, no live entry has it and no other account on the host has
  it (a conversation account of that uid is the home's own);
* a restored conversation gets its old uid back when no live account holds it and no other
  account on the host took it (:func:`_take_back`); otherwise a uid as a new conversation
  would, and its files from the tarball are given to that account
  (:class:`~provisioning.archive_restore.Reowning`);
* a new conversation gets a never-used uid of the range first (the lowest); a freed one only
  when none is left, the one freed longest ago first (:func:`candidates`), and only once
  nothing of its last holder is left (:func:`provisioning.freed_uids.fit_for`); one that
  cannot be made so is passed over and stays freed.

A uid or gid some other account or group on the host has, a uid owning another home, and
the operator group's id are never handed out.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .errors import UidRangeExhausted
from .freed_uids import fit_for
from .system_accounts import ACCOUNT_COMMENT, Killer, free_name, gr_by_gid, pw_by_name, pw_by_uid
from .uid_map import UidMap, new_entry


def allocate(
    uids: UidMap,
    operator_gid: int,
    kill: Killer | None,
    home: str,
    thread_key: str | None,
    avoid: set[int] | None = None,
) -> dict[str, Any]:
    """The new map entry of ``home`` (not yet in the map), by the rules above; ``avoid``:
    uids not to take (one another account took meanwhile). UidRangeExhausted when none is
    left. A freed uid handed out leaves ``freedUids``."""
    lo, hi = uids.uid_range
    used = {int(e["uid"]) for e in uids.accounts.values()} | (avoid or set())
    owners = uids.home_owners()
    own_home_owner = next((u for u, h in owners.items() if h == home), None)
    if own_home_owner is not None and lo <= own_home_owner <= hi and own_home_owner not in used:
        # The home exists (map lost or shared storage): its owner is its account.
        pw = pw_by_uid(own_home_owner)
        if pw is None or pw.pw_gecos.startswith(ACCOUNT_COMMENT):
            uid = own_home_owner
            name = pw.pw_name if pw else free_name(uids.layout, home, uids.taken_names())
            uids.freed.pop(uid, None)
            return new_entry(name, uid, thread_key)
    blocked = used | set(owners) | {operator_gid}
    before = uids.archived.get(home)
    if before is not None:
        entry = _take_back(uids, kill, home, before, blocked, thread_key)
        if entry is not None:
            return entry
    for uid in candidates(uids):
        if uid in blocked or pw_by_uid(uid) is not None or gr_by_gid(uid) is not None:
            continue
        if uid in uids.freed and not fit_for(uids, kill, uid, home):
            continue
        uids.freed.pop(uid, None)
        return new_entry(free_name(uids.layout, home, uids.taken_names()), uid, thread_key)
    raise UidRangeExhausted(
        f"every uid in {lo}-{hi} is taken by a live conversation or another account (or "
        "holds what an archived conversation left, see the log); widen the range into uids "
        "no other account on this host uses: raise accounts.uid_max "
        "(JAZZ_BRIDGE_ACCOUNTS__UID_MAX) or lower accounts.uid_min "
        "(JAZZ_BRIDGE_ACCOUNTS__UID_MIN)"
    )


def candidates(uids: UidMap) -> Iterator[int]:
    """The range's uids in the order they are handed out: never used first (lowest
    first), then the freed ones, freed longest ago first."""
    lo, hi = uids.uid_range
    freed = uids.freed
    yield from (uid for uid in range(lo, hi + 1) if uid not in freed)
    yield from sorted(
        (uid for uid in freed if lo <= uid <= hi),
        key=lambda uid: (str(freed[uid].get("freedAt", "")), uid),
    )


def _take_back(
    uids: UidMap,
    kill: Killer | None,
    home: str,
    before: dict[str, Any],
    blocked: set[int],
    thread_key: str | None,
) -> dict[str, Any] | None:
    """The entry giving archived ``home`` its old uid again, or None when it cannot."""
    lo, hi = uids.uid_range
    uid, name = int(before["uid"]), str(before["name"])
    if uid in blocked or not lo <= uid <= hi:
        return None
    pw, group = pw_by_uid(uid), gr_by_gid(uid)
    if pw is not None and not (pw.pw_name == name and pw.pw_gecos.startswith(ACCOUNT_COMMENT)):
        return None  # another account's now (its own, not yet deleted, is fine)
    if group is not None and group.gr_name != name:
        return None
    if not fit_for(uids, kill, uid, home):
        return None
    uids.freed.pop(uid, None)
    named = pw_by_name(name)
    if (named is not None and named.pw_uid != uid) or (
        named is None and name in uids.taken_names()
    ):
        name = free_name(uids.layout, home, uids.taken_names())
    return new_entry(name, uid, thread_key)
