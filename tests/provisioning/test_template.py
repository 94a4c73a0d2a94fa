"""Seeding new homes from the home template (``runner.home_template``): what is copied, with
which owners and modes, that nothing a home has is replaced, that no link is followed in the
template or in the home, and where personas land for the released Jazz CLI."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from accounts_support import OperatorGroup, needs_root
from home_support import as_uid, mode, owner

from provisioning import pinned
from provisioning.accounts import AccountRegistry
from provisioning.archive import archive_home, restore_home
from provisioning.errors import TemplateError
from provisioning.homes import Homes
from provisioning.layout import RootInfo, init_root
from provisioning.modes import TEMPLATE_MARKER

CONFIG = {"llm": {"provider": "openai", "model": "gpt-test"}}
AGENT = {"id": "default", "name": "Default", "model": "gpt-test"}


def make_template(base: Path) -> Path:
    tpl = base / "template"
    (tpl / "agents").mkdir(parents=True)
    (tpl / "config.json").write_text(json.dumps(CONFIG))
    (tpl / "agents" / "default.json").write_text(json.dumps(AGENT))
    (tpl / "personas").mkdir()
    (tpl / "personas" / "pirate.md").write_text("# Pirate\nTalk like one.\n")
    (tpl / "skills" / "deep").mkdir(parents=True)
    (tpl / "skills" / "deep" / "notes.txt").write_text("nested\n")
    tool = tpl / "skills" / "run.sh"
    tool.write_text("#!/bin/sh\necho hi\n")
    os.chmod(tool, 0o755)
    os.chmod(tpl / "config.json", 0o644)
    return tpl


def test_a_new_home_is_seeded_private_modes_and_personas_for_the_released_cli(
    tmp_path: Path,
) -> None:
    info = init_root(tmp_path / "r")
    tpl = make_template(tmp_path)
    home = Homes(info, isolated=False, template=tpl).ensure("web:seed")
    h = home.path
    assert json.loads((h / "config.json").read_text()) == CONFIG  # not the default "{}"
    assert json.loads((h / "agents" / "default.json").read_text()) == AGENT
    assert (h / "skills" / "deep" / "notes.txt").read_text() == "nested\n"
    # the released CLI reads ~/.jazz/personas (HOME is the home for isolated runs)
    assert (h / ".jazz" / "personas" / "pirate.md").read_text().startswith("# Pirate")
    # the documented CLI's $JAZZ_HOME/personas stays the link to the shared personas
    assert os.readlink(h / "personas") == str(info.layout.personas)
    assert mode(h / "config.json") == 0o600
    assert mode(h / "agents" / "default.json") == 0o600
    assert mode(h / "skills" / "run.sh") == 0o700  # the owner's execute bit is kept
    for d in ("skills", "skills/deep", ".jazz", ".jazz/personas", "agents"):
        assert mode(h / d) == 0o700, d
    for path in (h / "config.json", h / "agents" / "default.json", h / "skills" / "run.sh"):
        assert owner(path) == (os.geteuid(), info.operator_gid)
    # data copied, not linked: its own inode with one link
    copied, source = (
        os.lstat(h / "agents" / "default.json"),
        os.lstat(tpl / "agents" / "default.json"),
    )
    assert copied.st_ino != source.st_ino and copied.st_nlink == 1 == source.st_nlink
    assert not os.path.lexists(h / TEMPLATE_MARKER)
    assert not [p for p in h.rglob("*.tmp")]  # no temporary copy left behind


def test_only_a_new_home_is_seeded_and_nothing_it_has_is_overwritten(tmp_path: Path) -> None:
    info = init_root(tmp_path / "r")
    tpl = make_template(tmp_path)
    h = Homes(info, isolated=False, template=tpl).ensure("web:keep").path
    (h / "agents" / "default.json").write_text('{"id": "default", "mine": true}')
    (h / "config.json").write_text('{"edited": "by the conversation"}')
    # the operator edits the template afterwards
    (tpl / "config.json").write_text('{"new": "settings"}')
    (tpl / "agents" / "default.json").write_text('{"new": "agent"}')
    (tpl / "agents" / "second.json").write_text('{"id": "second"}')
    again = Homes(info, isolated=False, template=tpl)  # a new process: nothing remembered
    again.ensure("web:keep")
    assert json.loads((h / "agents" / "default.json").read_text()) == {
        "id": "default",
        "mine": True,
    }
    assert json.loads((h / "config.json").read_text()) == {"edited": "by the conversation"}
    assert not (h / "agents" / "second.json").exists()  # only new homes are seeded
    # a home made now gets the template as it is now
    fresh = again.ensure("web:later").path
    assert json.loads((fresh / "config.json").read_text()) == {"new": "settings"}
    assert (fresh / "agents" / "second.json").exists()


def test_a_home_made_before_a_template_was_set_is_not_seeded(tmp_path: Path) -> None:
    info = init_root(tmp_path / "r")
    h = Homes(info, isolated=False).ensure("web:before").path
    tpl = make_template(tmp_path)
    Homes(info, isolated=False, template=tpl).ensure("web:before")
    assert (h / "config.json").read_text() == "{}\n"
    assert not (h / "agents" / "default.json").exists()


def test_links_in_the_template_are_skipped_with_a_warning_never_followed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    info = init_root(tmp_path / "r")
    tpl = make_template(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.json").write_text('{"secret": "the gateway host\'s"}')
    (outside / "inner.txt").write_text("inner\n")
    (tpl / "agents" / "linked.json").symlink_to(outside / "secret.json")
    (tpl / "tree").symlink_to(outside)
    os.mkfifo(tpl / "pipe")
    with caplog.at_level(logging.WARNING, logger="provisioning.template"):
        h = Homes(info, isolated=False, template=tpl).ensure("web:links").path
    assert not os.path.lexists(h / "agents" / "linked.json")
    assert not os.path.lexists(h / "tree")
    assert not os.path.lexists(h / "pipe")
    assert (h / "agents" / "default.json").exists()  # the rest is copied
    warned = "\n".join(r.getMessage() for r in caplog.records)
    assert f"{tpl}/agents/linked.json is a symbolic link" in warned
    assert f"{tpl}/tree is a symbolic link" in warned
    assert f"{tpl}/pipe is not a regular file" in warned


def test_a_link_in_the_home_is_never_followed_while_seeding(tmp_path: Path) -> None:
    """A seeding resumed (its marker there) in a home whose entries are links to outside."""
    info = init_root(tmp_path / "r")
    tpl = make_template(tmp_path)
    homes = Homes(info, isolated=False, template=tpl)
    h = Homes(info, isolated=False).ensure("web:planted").path  # made without the template
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.json"
    victim.write_text("untouched\n")
    (h / "config.json").unlink()
    (h / "config.json").symlink_to(victim)
    os.rmdir(h / "agents")
    (h / "agents").symlink_to(outside)
    (h / ".jazz").symlink_to(outside)
    (h / "skills").symlink_to(outside)
    (h / TEMPLATE_MARKER).write_text("")
    os.chmod(h / TEMPLATE_MARKER, 0o600)
    homes.ensure("web:planted")
    assert victim.read_text() == "untouched\n"
    assert sorted(p.name for p in outside.iterdir()) == ["victim.json"]  # nothing written there
    assert os.readlink(h / "agents") == str(outside)  # left as it was
    assert os.readlink(h / "config.json") == str(victim)  # not replaced either
    assert not os.path.lexists(h / TEMPLATE_MARKER)


def test_a_seeding_cut_short_is_finished_at_the_next_ensure(tmp_path: Path) -> None:
    info = init_root(tmp_path / "r")
    tpl = tmp_path / "template"  # gone (moved away) when the first message comes
    homes = Homes(info, isolated=False, template=tpl)
    with pytest.raises(TemplateError, match="cannot be read"):
        homes.ensure("web:later")
    h = homes.path_for("web:later")
    assert (h / TEMPLATE_MARKER).is_file()
    make_template(tmp_path)
    homes.ensure("web:later")
    assert json.loads((h / "config.json").read_text()) == CONFIG
    assert not os.path.lexists(h / TEMPLATE_MARKER)


def test_a_resumed_seeding_replaces_nothing_the_home_has(tmp_path: Path) -> None:
    info = init_root(tmp_path / "r")
    tpl = make_template(tmp_path)
    h = Homes(info, isolated=False).ensure("web:resumed").path
    (h / "agents" / "default.json").write_text('{"id": "default", "mine": true}')
    (h / "skills").mkdir(mode=0o750)
    (h / "skills" / "run.sh").write_text("mine\n")
    (h / TEMPLATE_MARKER).write_text("")
    os.chmod(h / TEMPLATE_MARKER, 0o600)
    Homes(info, isolated=False, template=tpl).ensure("web:resumed")
    assert json.loads((h / "agents" / "default.json").read_text()) == {
        "id": "default",
        "mine": True,
    }
    assert (h / "skills" / "run.sh").read_text() == "mine\n"
    assert (h / "config.json").read_text() == "{}\n"  # the one the home had
    assert (h / "skills" / "deep" / "notes.txt").read_text() == "nested\n"  # what was missing
    assert (h / ".jazz" / "personas" / "pirate.md").is_file()
    assert not os.path.lexists(h / TEMPLATE_MARKER)


def test_an_empty_home_directory_counts_as_new(tmp_path: Path) -> None:
    """An ensure that stopped between making the directory and writing the marker."""
    info = init_root(tmp_path / "r")
    tpl = make_template(tmp_path)
    homes = Homes(info, isolated=False, template=tpl)
    h = homes.path_for("web:empty")
    h.mkdir(mode=0o700)
    homes.ensure("web:empty")
    assert json.loads((h / "agents" / "default.json").read_text()) == AGENT


def test_shared_personas_are_linked_into_dot_jazz_and_survive_an_archive(tmp_path: Path) -> None:
    info = init_root(tmp_path / "r")
    shared = info.layout.personas
    (shared / "analyst.md").write_text("# Analyst\n")
    (shared / "pirate.md").write_text("# the shared pirate\n")
    tpl = make_template(tmp_path)
    homes = Homes(info, isolated=False, template=tpl)
    h = homes.ensure("web:personas").path
    personas = h / ".jazz" / "personas"
    assert os.readlink(personas / "analyst.md") == str(shared / "analyst.md")
    # the template's own persona of that name was there first: kept, not replaced by a link
    assert not (personas / "pirate.md").is_symlink()
    assert (personas / "pirate.md").read_text().startswith("# Pirate")
    # a shared persona added later appears, one removed goes (as through the shared link)
    (shared / "late.md").write_text("# Late\n")
    (shared / "analyst.md").unlink()
    Homes(info, isolated=False, template=tpl).ensure("web:personas")
    assert os.readlink(personas / "late.md") == str(shared / "late.md")
    assert not os.path.lexists(personas / "analyst.md")
    # a link to a shared persona is one an archive brings back
    archive_home(info, h.name)
    restored = restore_home(info, h.name)
    assert f"{h.name}/.jazz/personas/late.md" not in restored.skipped
    assert os.readlink(personas / "late.md") == str(shared / "late.md")


def test_without_a_template_and_shared_personas_no_dot_jazz_is_made(tmp_path: Path) -> None:
    info = init_root(tmp_path / "r")
    h = Homes(info, isolated=False).ensure("web:plain").path
    assert not os.path.lexists(h / ".jazz")


def test_rename_noreplace_never_replaces(tmp_path: Path) -> None:
    (tmp_path / "src").write_text("new")
    (tmp_path / "dst").write_text("old")
    (tmp_path / "free-src").write_text("moved")
    with pinned.opened_dir(tmp_path) as fd:
        assert pinned.rename_noreplace(fd, "src", "dst") is False
        assert pinned.rename_noreplace(fd, "free-src", "free") is True
    assert (tmp_path / "dst").read_text() == "old"
    assert (tmp_path / "src").read_text() == "new"
    assert (tmp_path / "free").read_text() == "moved"
    assert not (tmp_path / "free-src").exists()


def _isolated(info: RootInfo, uid_range: tuple[int, int], tpl: Path) -> Homes:
    registry = AccountRegistry(info.layout, info.operator_gid, uid_range)
    return Homes(info, isolated=True, registry=registry, template=tpl)


@needs_root
def test_isolated_copies_are_the_accounts_with_the_operator_group(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int], tmp_path: Path
) -> None:
    info = init_root(shared_root, operator_group.name)
    tpl = make_template(tmp_path)
    home = _isolated(info, uid_range, tpl).ensure("web:isolated-seed")
    h, acct, op = home.path, home.account, operator_group
    want = (acct.uid, op.gid)
    for d in ("agents", "skills", "skills/deep", ".jazz", ".jazz/personas"):
        assert owner(h / d) == want, d
        assert mode(h / d) == 0o2750, d
    for f in ("agents/default.json", "skills/deep/notes.txt", ".jazz/personas/pirate.md"):
        assert owner(h / f) == want, f
        assert mode(h / f) == 0o640, f
    assert mode(h / "skills" / "run.sh") == 0o750
    assert owner(h / "config.json") == want and mode(h / "config.json") == 0o600
    assert not os.path.lexists(h / TEMPLATE_MARKER)
    # the conversation's own account reads what its runs need; an operator reads the agent
    agent = str(h / "agents" / "default.json")
    assert as_uid(acct.uid, acct.gid, "cat", str(h / "config.json")).returncode == 0
    assert as_uid(acct.uid, acct.gid, "cat", agent).returncode == 0
    assert as_uid(acct.uid, acct.gid, str(h / "skills" / "run.sh")).returncode == 0
    assert as_uid(op.member_uid, op.gid, "cat", agent, init_groups=True).returncode == 0
    # another conversation cannot
    other = _isolated(info, uid_range, tpl).ensure("web:isolated-other")
    assert as_uid(other.account.uid, other.account.gid, "cat", agent).returncode != 0


@needs_root
def test_isolated_seeding_never_follows_a_link_the_conversation_planted(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int], tmp_path: Path
) -> None:
    info = init_root(shared_root, operator_group.name)
    tpl = make_template(tmp_path)
    homes = _isolated(info, uid_range, tpl)
    home = homes.ensure("web:isolated-planted")
    h = home.path
    outside = tmp_path / "root-only"
    outside.mkdir(mode=0o700)
    # the conversation (its own account) swaps agents/ for a link; a seeding is resumed
    (h / "agents" / "default.json").unlink()
    rc = as_uid(
        home.account.uid,
        home.account.gid,
        "sh",
        "-c",
        f"mv {h}/agents {h}/agents.old && ln -s {outside} {h}/agents",
    )
    assert rc.returncode == 0
    fd = os.open(h / TEMPLATE_MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    homes.ensure("web:isolated-planted")
    assert list(outside.iterdir()) == []
    assert owner(outside) == (0, 0)
    assert not os.path.lexists(h / TEMPLATE_MARKER)
