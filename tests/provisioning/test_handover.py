"""A home made with isolation off, handed over to its account when the root is isolated.

provisioning/handover.py on real throwaway accounts (root only): what changes hands and
with which exact modes, what is left the gateway's (hard links, FIFOs, links, other
accounts' files) and that an interrupted handover is finished by the next ensure or by
``repair --deep``.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import OperatorGroup, needs_root
from home_support import (
    HOSTILE_NAME,
    OTHER_UID,
    as_uid,
    bounded,
    exchange,
    make,
    mkdir,
    mode,
    owner,
)

from provisioning import handover, pinned
from provisioning.accounts import AccountRegistry
from provisioning.homes import Home, Homes
from provisioning.layout import RootInfo, init_root
from provisioning.modes import HANDOVER_MARKER, REPAIR_MARKER
from provisioning.repair import repair

KEY = "web:handover-demo"
SLACK_KEY = "slack:T0TRY:C0TRY:1764669600.000100"  # a conversation tried out with isolation off


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    """Directories ``make`` makes for a file's parents are 0755, as the modes below expect."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture
def info(shared_root: Path, operator_group: OperatorGroup) -> RootInfo:
    return init_root(shared_root, operator_group.name)


@pytest.fixture
def registry(info: RootInfo, uid_range: tuple[int, int]) -> AccountRegistry:
    return AccountRegistry(info.layout, info.operator_gid, uid_range)


@pytest.fixture
def trial(info: RootInfo) -> Home:
    """The conversation's home as served as root with isolation off."""
    return Homes(info, isolated=False).ensure(KEY)


def isolate(info: RootInfo, registry: AccountRegistry) -> Home:
    return Homes(info, isolated=True, registry=registry).ensure(KEY)


@pytest.fixture
def immutable() -> Iterator[list[Path]]:
    """Files a test made immutable (``chattr +i``); made mutable again whatever happens."""
    made: list[Path] = []
    yield made
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=False, capture_output=True)


@needs_root
def test_everything_the_gateway_left_changes_hands_with_exact_modes(
    info: RootInfo, registry: AccountRegistry, trial: Home, caplog: pytest.LogCaptureFixture
) -> None:
    h = trial.path
    assert owner(h) == (0, info.operator_gid) and mode(h) == 0o700
    transcript = make(h / "history" / "conversation.json", 0o600)
    loose = make(h / "workspace" / "notes.txt", 0o666)
    group_read = make(h / "workspace" / "report.txt", 0o640)
    tool = make(h / "workspace" / "bin" / "tool", 0o4755)  # setuid root: must not survive
    sgid_tool = make(h / "workspace" / "bin" / "sgid", 0o2775)
    private_dir = mkdir(h / "workspace" / "private", 0o700)
    open_dir = mkdir(h / "workspace" / "open", 0o777)
    deep = make(open_dir / "a" / "b" / "c" / "leaf", 0o604)
    secret_key = make(h / "gnupg" / "private-keys-v1.d" / "k.key", 0o600)
    ssh_key = make(h / "workspace" / ".ssh" / "id_ed25519", 0o600)
    memory = make(h / "memory" / "notes" / "facts.md", 0o600)
    notes_dir = h / "memory" / "notes"
    os.chmod(notes_dir, 0o700)
    agent = make(h / "agents" / "default" / "agent.json", 0o644)
    run_script = make(h / "history" / "run.sh", 0o700)
    caplog.set_level(logging.INFO, logger="provisioning.handover")

    home = isolate(info, registry)
    uid, own_gid, op_gid = home.account.uid, home.account.gid, info.operator_gid
    assert (owner(h), mode(h)) == ((uid, op_gid), 0o2750)
    expected = {
        # Jazz's records: the group reads them as under the isolated umask (027) ...
        transcript: 0o640,
        memory: 0o640,
        notes_dir: 0o2750,
        agent: 0o640,
        run_script: 0o750,
        # ... elsewhere a 0600 may be a program's choice: never widened
        ssh_key: 0o600,
        h / "workspace" / ".ssh": 0o2750,  # made 0755 by mkdir under root's umask 022
        loose: 0o660,
        group_read: 0o640,
        tool: 0o750,
        sgid_tool: 0o770,
        h / "config.json": 0o600,
        secret_key: 0o600,
        deep: 0o600,
        private_dir: 0o2700,  # setgid added, group and other bits never widened
        open_dir: 0o2770,
        open_dir / "a": 0o2750,  # made 0755 by mkdir under root's umask 022
        h / "workspace" / "bin": 0o2750,
        h / "history": 0o2750,
        h / "gnupg" / "private-keys-v1.d": 0o2750,
    }
    got = {p: (owner(p), mode(p)) for p in expected}
    assert got == {p: ((uid, op_gid), m) for p, m in expected.items()}
    assert (owner(h / "gnupg"), mode(h / "gnupg")) == ((uid, own_gid), 0o700)
    assert not (h / HANDOVER_MARKER).exists()
    # the home repair walked again with the isolated rule: its marker is the account's now
    assert (owner(h / REPAIR_MARKER), mode(h / REPAIR_MARKER)) == ((uid, op_gid), 0o640)
    # the personas link is the gateway's as in any isolated home: links are left alone
    assert os.lstat(h / "personas").st_uid == 0

    handed = [r for r in caplog.records if "handed" in r.getMessage()]
    assert len(handed) == 1 and handed[0].levelno == logging.INFO, caplog.text
    assert "0 hard-linked" in handed[0].getMessage()
    caplog.clear()
    isolate(info, registry)  # once: the next ensure (another process) has nothing to hand over
    assert not [r for r in caplog.records if r.name == "provisioning.handover"], caplog.text


@needs_root
def test_a_hard_link_to_a_root_file_outside_stays_root_and_is_named(
    info: RootInfo,
    registry: AccountRegistry,
    trial: Home,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    outside = make(tmp_path / "outside" / "shadow", 0o600, "root:secret\n")
    before = os.lstat(outside)
    linked = trial.path / "workspace" / "shadow"
    os.link(outside, linked)  # what a root run could do under isolation off
    inner = make(trial.path / "workspace" / "one", 0o600)
    os.link(inner, trial.path / "workspace" / "two")  # both names inside: still left
    caplog.set_level(logging.INFO, logger="provisioning.handover")

    home = isolate(info, registry)
    after = os.lstat(outside)
    assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (0, 0, 0o600)
    assert (after.st_ino, after.st_mtime_ns, after.st_nlink) == (
        before.st_ino,
        before.st_mtime_ns,
        2,
    )
    assert outside.read_text() == "root:secret\n"
    assert owner(inner)[0] == 0 == owner(trial.path / "workspace" / "two")[0]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(linked) in m for m in warned), caplog.text
    assert any(str(inner) in m or str(trial.path / "workspace" / "two") in m for m in warned)
    assert any("3 hard-linked" in r.getMessage() for r in caplog.records), caplog.text
    # and the account really cannot read it
    done = as_uid(home.account.uid, home.account.gid, "cat", str(linked), timeout=30)
    assert done.returncode != 0


@needs_root
def test_a_link_to_etc_is_not_followed(
    info: RootInfo, registry: AccountRegistry, trial: Home, tmp_path: Path
) -> None:
    etc = os.lstat("/etc")
    passwd = os.lstat("/etc/passwd")
    outside = mkdir(tmp_path / "outside", 0o755)
    victim = make(outside / "victim", 0o644)
    (trial.path / "workspace" / "etc").symlink_to("/etc")
    (trial.path / "workspace" / "outside").symlink_to(outside)
    (trial.path / "workspace" / "victim").symlink_to(victim)

    isolate(info, registry)
    for path, st in (("/etc", etc), ("/etc/passwd", passwd)):
        now = os.lstat(path)
        assert (now.st_uid, now.st_gid, now.st_mode) == (st.st_uid, st.st_gid, st.st_mode), path
    assert (owner(outside), mode(outside)) == ((0, 0), 0o755)
    assert (owner(victim), mode(victim)) == ((0, 0), 0o644)
    assert os.lstat(trial.path / "workspace" / "etc").st_uid == 0  # the link itself: left


@needs_root
def test_a_fifo_does_not_hang_the_walk_and_stays_the_gateways(
    info: RootInfo, registry: AccountRegistry, trial: Home, caplog: pytest.LogCaptureFixture
) -> None:
    fifo = trial.path / "workspace" / "pipe"
    os.mkfifo(fifo)  # nobody opens its other end: opening it would hang
    os.chmod(fifo, 0o600)
    after_it = make(trial.path / "workspace" / "z-after", 0o600)
    caplog.set_level(logging.INFO, logger="provisioning.handover")

    home = bounded(lambda: isolate(info, registry), timeout=30)
    assert (owner(fifo), mode(fifo)) == ((0, 0), 0o600)
    assert owner(after_it) == (home.account.uid, info.operator_gid)
    assert any(str(fifo) in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


@needs_root
def test_another_uids_entries_are_untouched(
    info: RootInfo, registry: AccountRegistry, trial: Home
) -> None:
    theirs = make(trial.path / "workspace" / "theirs", 0o666)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    os.chmod(theirs, 0o4766)
    their_dir = mkdir(trial.path / "workspace" / "their-dir", 0o777)
    os.chown(their_dir, OTHER_UID, OTHER_UID)
    os.chmod(their_dir, 0o777)
    mine_inside = make(their_dir / "mine", 0o644)

    home = isolate(info, registry)
    assert (owner(theirs), mode(theirs)) == ((OTHER_UID, OTHER_UID), 0o4766)
    assert (owner(their_dir), mode(their_dir)) == ((OTHER_UID, OTHER_UID), 0o777)
    # the gateway's own file inside another account's directory still changes hands
    assert (owner(mine_inside), mode(mine_inside)) == (
        (home.account.uid, info.operator_gid),
        0o640,
    )


@needs_root
def test_a_handover_with_failures_is_finished_by_the_next_ensure(
    info: RootInfo, registry: AccountRegistry, trial: Home, immutable: list[Path]
) -> None:
    stuck = make(trial.path / "history" / "stuck.json", 0o600)
    other = make(trial.path / "history" / "other.json", 0o600)
    if subprocess.run(["chattr", "+i", str(stuck)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i not supported here")
    immutable.append(stuck)

    home = isolate(info, registry)  # not raised: logged, and the run may go ahead
    uid = home.account.uid
    assert owner(stuck)[0] == 0 and owner(other)[0] == uid
    assert (trial.path / HANDOVER_MARKER).is_file()  # the home is the account's: marker says

    subprocess.run(["chattr", "-i", str(stuck)], check=True)
    isolate(info, registry)
    # a transcript: the operators' group reads it, as under the isolated umask
    assert (owner(stuck), mode(stuck)) == ((uid, info.operator_gid), 0o640)
    assert not (trial.path / HANDOVER_MARKER).exists()


class Crash(BaseException):
    """Stands for the gateway dying half-way (not an error anything catches)."""


@needs_root
def test_a_crash_mid_handover_is_finished_by_the_next_ensure(
    info: RootInfo, registry: AccountRegistry, trial: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = [make(trial.path / "history" / f"h{i}.json", 0o600) for i in range(10)]
    real = pinned.chown_entry
    calls = 0

    def dies_on_the_fourth(*args: object, **kwargs: object) -> bool:
        nonlocal calls
        calls += 1
        if calls == 4:
            raise Crash
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pinned, "chown_entry", dies_on_the_fourth)
    with pytest.raises(Crash):
        isolate(info, registry)
    monkeypatch.setattr(pinned, "chown_entry", real)
    assert sum(owner(f)[0] == 0 for f in files) > 0
    assert os.lstat(trial.path).st_uid == 0 and (trial.path / HANDOVER_MARKER).is_file()

    home = isolate(info, registry)
    assert {owner(f) for f in files} == {(home.account.uid, info.operator_gid)}
    assert not (trial.path / HANDOVER_MARKER).exists()


@needs_root
def test_the_start_repair_marks_and_repair_deep_finishes(
    info: RootInfo, registry: AccountRegistry, trial: Home
) -> None:
    transcript = make(trial.path / "history" / "conversation.json", 0o644)
    account = registry.ensure(trial.name, KEY)  # the account exists, the home not yet given

    shallow = repair(info, isolated=True, registry=registry)
    assert shallow.ok
    assert owner(trial.path) == (account.uid, info.operator_gid)  # the home changed hands ...
    assert owner(transcript)[0] == 0  # ... its contents wait for ensure or repair --deep
    assert (trial.path / HANDOVER_MARKER).is_file()

    deep = repair(info, isolated=True, registry=registry, deep=True)
    assert deep.ok, deep.as_dict()
    assert (owner(transcript), mode(transcript)) == ((account.uid, info.operator_gid), 0o640)
    assert not (trial.path / HANDOVER_MARKER).exists()


@needs_root
def test_a_home_made_single_account_is_usable_by_its_account_once_isolated(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    """A root first served as root with ``isolation = "off"`` (README: "To try it without
    touching the system's accounts ... JAZZ_BRIDGE_ISOLATION=off ./scripts/serve.sh"), then
    served normally (isolated). Each existing conversation got an account and its home was
    chowned to it, but everything inside stayed the gateway's (root's, 0600/0700): the
    conversation's own account could no longer read its transcript or its config.json."""
    info = init_root(shared_root, operator_group.name)
    trial = Homes(info, isolated=False).ensure(SLACK_KEY)
    transcript = trial.path / "history" / "conversation.json"
    fd = os.open(transcript, os.O_WRONLY | os.O_CREAT, 0o600)  # as a run (uid 0, umask 077)
    os.write(fd, b'{"messages": []}\n')
    os.close(fd)

    registry = AccountRegistry(info.layout, info.operator_gid, uid_range)
    home = Homes(info, isolated=True, registry=registry).ensure(SLACK_KEY)
    uid, gid = home.account.uid, home.account.gid
    assert os.lstat(home.path).st_uid == uid  # the home itself was handed over

    for path in (transcript, home.path / "config.json"):
        done = as_uid(uid, gid, "cat", str(path), timeout=30)
        st = os.lstat(path)
        assert done.returncode == 0, (
            f"{path} is {st.st_uid}:{st.st_gid} {st.st_mode & 0o7777:04o}: the conversation's "
            f"account (uid {uid}) cannot read it: {done.stderr.strip()}"
        )


@needs_root
def test_a_hostile_name_left_behind_by_a_handover_is_logged_escaped(
    shared_root: Path,
    operator_group: OperatorGroup,
    uid_range: tuple[int, int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The handover names what it leaves the gateway's (on a terminal, the log is text),
    with what a conversation chose shown escaped, never as raw bytes: a forged line or a
    terminal escape in a name is one printable line of the log."""
    info = init_root(shared_root, operator_group.name)
    trial = Homes(info, isolated=False).ensure("web:names-handover")  # isolation off: root's
    workspace = os.fsencode(trial.path / "workspace")
    fifo = os.path.join(workspace, HOSTILE_NAME)
    os.mkfifo(fifo)
    linked = os.path.join(workspace, b"a\x1b]0;owned\x07")
    with open(linked, "w") as fh:
        fh.write("x")
    os.link(linked, os.path.join(workspace, b"b"))
    caplog.set_level(logging.INFO, logger="provisioning.handover")
    registry = AccountRegistry(info.layout, info.operator_gid, uid_range)
    Homes(info, isolated=True, registry=registry).ensure("web:names-handover")
    named = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("x\\n  failed: forged line\\x1b[2J\\xff" in m for m in named), named
    assert any("a\\x1b]0;owned\\x07" in m for m in named), named
    assert all(m.isprintable() for m in named), named


# --- the pinned chown itself --------------------------------------------------------------


@needs_root
def test_chown_entry_refuses_what_changed_since_it_was_listed(tmp_path: Path) -> None:
    d = mkdir(tmp_path / "d", 0o700)
    outside = make(tmp_path / "outside", 0o600)
    f = make(d / "f", 0o600)
    listed = os.lstat(f)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.link(f, tmp_path / "second-name")  # a second link appeared: refused
        assert not pinned.chown_entry(fd, "f", OTHER_UID, OTHER_UID, 0o600, listed)
        os.unlink(tmp_path / "second-name")
        os.unlink(f)
        os.symlink(outside, f)  # swapped for a link: refused, the target untouched
        assert not pinned.chown_entry(fd, "f", OTHER_UID, OTHER_UID, 0o600, listed)
        assert owner(outside) == (0, 0)
        os.unlink(f)
        assert not pinned.chown_entry(fd, "f", OTHER_UID, OTHER_UID, 0o600, listed)  # gone
        g = make(d / "g", 0o4755)
        assert pinned.chown_entry(fd, "g", OTHER_UID, OTHER_UID, 0o755, os.lstat(g))
        assert (owner(g), mode(g)) == ((OTHER_UID, OTHER_UID), 0o755)
    finally:
        os.close(fd)


@needs_root
def test_directories_swapped_for_links_mid_handover_are_never_followed(tmp_path: Path) -> None:
    outside = mkdir(tmp_path / "outside", 0o700)
    victims = [make(outside / f"x{i}", 0o600) for i in range(20)]
    victims.append(make(mkdir(outside / "sub", 0o700) / "y", 0o600))
    home = mkdir(tmp_path / "home", 0o700)
    pairs: list[tuple[bytes, bytes]] = []
    for i in range(30):
        v = mkdir(home / f"v{i}", 0o700)
        for j in range(30):
            make(v / f"f{j}", 0o600)
        (home / f"l{i}").symlink_to(outside)
        pairs.append((bytes(v), bytes(home / f"l{i}")))
    try:
        exchange(*pairs[0])
        exchange(*pairs[0])
    except OSError as exc:
        pytest.skip(f"renameat2(RENAME_EXCHANGE) unavailable here: {exc}")

    total_swaps = 0
    fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _round in range(4):
            for p in home.rglob("*"):  # give everything back to the gateway for another try
                if not p.is_symlink():
                    os.chown(p, 0, 0)
            os.chown(home, 0, 0)
            os.chmod(home, 0o700)
            t_out: list[object] = []

            def target(t_out: list[object] = t_out) -> None:
                try:
                    t_out.append(
                        handover.hand_over(
                            fd, str(home), uid=OTHER_UID, gid=OTHER_UID, gateway_uid=0
                        )
                    )
                except BaseException as exc:
                    t_out.append(exc)

            t = threading.Thread(target=target, daemon=True)
            t.start()
            swaps = 0
            while t.is_alive() and swaps < 400_000:  # bounded however slow the walk is
                for a, b in pairs:
                    exchange(a, b)
                swaps += len(pairs)
            t.join(timeout=30)
            total_swaps += swaps
            assert not t.is_alive(), "the handover did not finish"
            assert t_out and not isinstance(t_out[0], BaseException), t_out
            assert [owner(v) for v in victims] == [(0, 0)] * len(victims)
            assert owner(outside) == (0, 0) and mode(outside) == 0o700
    finally:
        os.close(fd)
    assert total_swaps > 0, "the swapper never ran while a handover did"


@needs_root
def test_a_gateway_home_not_left_as_the_single_account_layout_is_not_adopted(
    info: RootInfo, registry: AccountRegistry, trial: Home, caplog: pytest.LogCaptureFixture
) -> None:
    os.chmod(trial.path, 0o755)  # someone changed it: not what isolation off makes (0700)
    note = make(trial.path / "workspace" / "operator-note", 0o644)
    caplog.set_level(logging.INFO, logger="provisioning.handover")

    home = isolate(info, registry)
    assert owner(trial.path) == (home.account.uid, info.operator_gid)
    assert (owner(note), mode(note)) == ((0, 0), 0o644)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(trial.path) in m and "0755" in m for m in warned), caplog.text
