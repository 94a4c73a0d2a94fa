"""What ``serve`` leaves behind for the other commands: the last root served, and the
settings it served that root with.

Every command runs with the settings of its own environment, so an operator's shell without
the unit's ``Environment=`` lines acted on another root (``./jazz-bridge-home``) or with
another uid range than the gateway. ``serve`` therefore records

* the root it serves, for the user running it: ``$XDG_STATE_HOME/jazz-bridge/last-root.json``
  when that is set, else ``/var/lib/jazz-bridge/last-root.json`` as root, else
  ``~/.local/state/jazz-bridge/last-root.json``; a command given no root by an option, the
  environment or the config file acts on that root (:mod:`.root_choice`). A user other
  than root with no record of their own reads root's (an operator of a root-run gateway);
* the settings that matter for the root, in ``<root>/state/served-settings.json``
  (:data:`ROOT_SETTINGS`); a command whose own differ says which and both values, and one
  that changes accounts or homes refuses unless given ``--ignore-served-settings``.

A record is only believed when it is a regular file (never a symbolic link: it is opened
with ``O_NOFOLLOW``) owned by the user reading it or by root; any other is ignored with a
warning naming it. Both are written atomically (:func:`provisioning.safefs.atomic_write_json`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from provisioning.modes import STATE_FILE_MODE

from ..config import ENV_PREFIX, CoreSettings
from ..errors import ConfigError

log = logging.getLogger("jazz_bridge")

LAST_ROOT_FILE = "last-root.json"
SERVED_SETTINGS_FILE = "served-settings.json"  # in <root>/state, the gateway's (0640)
SYSTEM_STATE_DIR = Path("/var/lib/jazz-bridge")
RECORD_DIR_MODE = 0o0755  # rwxr-xr-x  operators (not root) read root's record of the root
RECORD_FILE_MODE = 0o0644  # rw-r--r--  it holds a path only, nothing secret
GATEWAY_LOCK = "gateway.lock"  # bridge.app.INSTANCE_LOCK: held by the one serve on a root
IGNORE_OPTION = "--ignore-served-settings"
MAX_RECORD_BYTES = 64 * 1024

# the settings a root's accounts and homes depend on: a command acting with others than the
# gateway's would make or remove accounts in another range, or homes of another kind
ROOT_SETTINGS = (
    "isolation",
    "operator_group",
    "accounts.uid_min",
    "accounts.uid_max",
    "runner.home_template",
)


def record_dir(environ: Mapping[str, str]) -> Path:
    """Where the last root served is recorded for the user running this (module docstring)."""
    xdg = environ.get("XDG_STATE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "jazz-bridge"
    if os.geteuid() == 0:
        return SYSTEM_STATE_DIR
    home = environ.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".local" / "state" / "jazz-bridge"


def last_root_records(environ: Mapping[str, str]) -> list[Path]:
    """The records a command reads, in order: the user's own, then (not root) root's."""
    own = record_dir(environ) / LAST_ROOT_FILE
    system = SYSTEM_STATE_DIR / LAST_ROOT_FILE
    return [own] if own == system or os.geteuid() == 0 else [own, system]


def read_record(path: Path) -> dict[str, Any] | None:
    """A record's JSON object, or None when there is none; one not to be trusted (a link,
    not a regular file, another user's, not JSON) is ignored with a warning."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            log.warning("ignoring %s: it is a symbolic link (a record must be a file)", path)
        elif exc.errno not in (errno.ENOTDIR, errno.EACCES):
            log.warning("ignoring %s: %s", path, exc.strerror)
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            log.warning("ignoring %s: not a regular file", path)
            return None
        if st.st_uid not in (os.geteuid(), 0):
            log.warning(
                "ignoring %s: owned by uid %d, not by this user (uid %d) or root",
                path,
                st.st_uid,
                os.geteuid(),
            )
            return None
        raw = fh.read(MAX_RECORD_BYTES + 1)
    try:
        data = json.loads(raw) if len(raw) <= MAX_RECORD_BYTES else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        log.warning("ignoring %s: not a JSON object jazz-bridge wrote", path)
        return None
    return data


def read_last_root(environ: Mapping[str, str]) -> tuple[Path, Path] | None:
    """The last root ``serve`` recorded and the record saying so, None when none was."""
    for record in last_root_records(environ):
        data = read_record(record)
        root = data.get("root") if data else None
        if isinstance(root, str) and os.path.isabs(root):
            return Path(root), record
        if data is not None:
            log.warning("ignoring %s: it names no absolute root", record)
    return None


def _value(settings: CoreSettings, key: str) -> Any:
    node: Any = settings
    for part in key.split("."):
        node = getattr(node, part, None)
    return str(node) if isinstance(node, Path) else node


def root_settings(settings: CoreSettings) -> dict[str, Any]:
    return {key: _value(settings, key) for key in ROOT_SETTINGS}


def record_served(settings: CoreSettings, environ: Mapping[str, str]) -> None:
    """At ``serve``, once it holds the root: the settings in the root's state (readable by
    the operator group, as the rest of ``state/``), the root in the user's record. A record
    that cannot be written is warned of and skipped (the commands then ask for the root)."""
    from provisioning import safefs
    from provisioning.layout import Layout

    root = settings.root.absolute()
    now = datetime.now(UTC).isoformat(timespec="seconds")
    served = {"servedAt": now, "pid": os.getpid(), "settings": root_settings(settings)}
    where = Layout(root).state / SERVED_SETTINGS_FILE
    try:
        safefs.atomic_write_json(where, served, STATE_FILE_MODE)
    except OSError as exc:
        log.warning("could not record the settings served in %s (%s)", where, exc)
    record = record_dir(environ) / LAST_ROOT_FILE
    try:
        record.parent.mkdir(parents=True, exist_ok=True, mode=RECORD_DIR_MODE)
        document = {"root": str(root), "servedAt": now, "pid": os.getpid()}
        safefs.atomic_write_json(record, document, RECORD_FILE_MODE)
    except OSError as exc:
        log.warning(
            "could not record the root served in %s (%s): other commands need --root, "
            "JAZZ_BRIDGE_ROOT or the config file to find it",
            record,
            exc,
        )


@dataclass(frozen=True)
class Served:
    """The settings a root was last served with, and whether that gateway still runs."""

    settings: dict[str, Any]
    served_at: str
    pid: int | None
    running: bool
    path: Path

    def who(self) -> str:
        if self.running:
            return f"the gateway serving this root (pid {self.pid})"
        return f"the last gateway on this root (served {self.served_at})"


def lock_holder(state: Path) -> int | None:
    """The pid holding the root's gateway lock (a serve is running), else None; read from
    ``/proc/locks``, so nothing is locked to find out (a serve starting meanwhile is never
    refused for it)."""
    try:
        st = os.stat(state / GATEWAY_LOCK, follow_symlinks=False)
        locks = Path("/proc/locks").read_text()
    except OSError:
        return None
    for line in locks.splitlines():
        parts = line.split()
        if len(parts) < 6 or parts[1] != "FLOCK" or "->" in parts:
            continue
        with contextlib.suppress(ValueError):
            major, minor, ino = parts[5].split(":")
            same_dev = os.makedev(int(major, 16), int(minor, 16)) == st.st_dev
            if int(ino) == st.st_ino and same_dev:
                return int(parts[4])
    return None


def read_served(root: Path) -> Served | None:
    from provisioning.layout import Layout

    state = Layout(root).state
    path = state / SERVED_SETTINGS_FILE
    data = read_record(path)
    if data is None or not isinstance(data.get("settings"), dict):
        return None
    pid = data.get("pid") if isinstance(data.get("pid"), int) else None
    holder = lock_holder(state)
    return Served(
        data["settings"], str(data.get("servedAt", "?")), holder or pid, bool(holder), path
    )


def _source(key: str, environ: Mapping[str, str], settings: CoreSettings) -> str:
    name = ENV_PREFIX + key.replace(".", "__").upper()
    if any(k.upper() == name for k in environ):
        return f"from {name}"
    file = getattr(settings, "_toml_file", None)
    if file is not None:
        try:
            node: Any = tomllib.loads(Path(file).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            node = {}
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            return f"from {file}"
    return "the default"


def differences(served: Served, settings: CoreSettings, environ: Mapping[str, str]) -> list[str]:
    """One line per root setting this command has otherwise than the gateway had."""
    mine = root_settings(settings)
    lines = []
    for key in ROOT_SETTINGS:
        if key in served.settings and served.settings[key] != mine[key]:
            lines.append(
                f"  {key}: {json.dumps(served.settings[key])} for {served.who()}, "
                f"{json.dumps(mine[key])} here ({_source(key, environ, settings)})"
            )
    return lines


def check_served_settings(
    settings: CoreSettings, environ: Mapping[str, str], *, changes: bool, ignore: bool
) -> None:
    """Compare with the settings the root was served with. A command that ``changes``
    accounts or homes is refused (ConfigError) when they differ, unless ``ignore``; the
    others (and an ignored one) warn, naming each setting and both values."""
    served = read_served(settings.root.absolute())
    if served is None:
        return
    lines = differences(served, settings, environ)
    if not lines:
        return
    head = (
        f"this command's settings differ from those of {served.who()}, recorded in "
        f"{served.path}:\n" + "\n".join(lines)
    )
    if changes and not ignore:
        raise ConfigError(
            head + "\ngive the gateway's settings (the same environment or config file), or "
            f"{IGNORE_OPTION} to go on with these"
        )
    log.warning("%s", head)
