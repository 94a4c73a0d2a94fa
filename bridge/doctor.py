"""``jazz-bridge doctor``: every check on its own line, OK or FAIL with the fix.

It only reads: modes and owners of the root, ``chats/`` and each home, accounts against the
uid map, the operator group and its members, the runner, the configuration. Platform checks
(credentials valid, webhook registered) belong to the adapters: each enabled adapter's spec
may carry a ``doctor`` coroutine, run here with a timeout, so the core never imports one.
The configuration is held to the rules ``serve`` starts by (:mod:`.rules`), so doctor
never passes a configuration serve refuses.
"""

from __future__ import annotations

import asyncio
import grp
import json
import os
import pwd
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from provisioning import naming
from provisioning.layout import Layout
from provisioning.modes import CHATS_MODE, HOME_MODE, PERSONAS_MODE, PRIVATE_DIR_MODE, ROOT_MODE
from provisioning.sandbox import resolve_isolation

from . import rules
from .config import CoreSettings
from .logs import SecretMasker, secret_values
from .ports import AdapterSpec, DoctorCheck

PLATFORM_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Check:
    ok: bool
    what: str
    fix: str = ""

    def line(self) -> str:
        return f"{'OK  ' if self.ok else 'FAIL'} {self.what}" + (
            "" if self.ok else f" -> {self.fix}"
        )


def _mode_check(path: Path, want: int, label: str) -> Check:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return Check(False, f"{label} {path} exists", "run jazz-bridge init")
    if stat.S_ISLNK(st.st_mode):
        return Check(False, f"{label} {path} is not a link", f"replace the link {path}")
    mode = stat.S_IMODE(st.st_mode)
    return Check(
        mode == want, f"{label} {path} mode {mode:04o} (want {want:04o})", "run jazz-bridge repair"
    )


def config_checks(settings: CoreSettings, specs: dict[str, AdapterSpec]) -> list[Check]:
    """The configuration against the rules serve starts by (:mod:`.rules`): one failed check
    per rule broken, its fix the line serve would refuse to start with."""
    broken = rules.problems(settings, specs)
    if not broken:
        return [Check(True, "configuration is valid")]
    masker = SecretMasker(secret_values(settings))
    return [Check(False, "configuration is valid", masker.mask(line)) for line in broken]


def run_checks(settings: CoreSettings, runner_command: list[str]) -> list[Check]:
    layout = Layout(settings.root.absolute())
    checks = [_mode_check(layout.root, ROOT_MODE, "root")]
    checks.append(_mode_check(layout.chats, CHATS_MODE, "chats"))
    checks.append(_mode_check(layout.personas, PERSONAS_MODE, "personas"))
    try:
        gid = os.lstat(layout.root).st_gid
        group = grp.getgrgid(gid)
        members = ", ".join(group.gr_mem) or "no members"
        checks.append(Check(True, f"operator group {group.gr_name} ({members})"))
    except (OSError, KeyError):
        checks.append(
            Check(
                False,
                "operator group exists",
                "create it (groupadd) and run jazz-bridge init --operator-group",
            )
        )
        gid = -1
    isolated = resolve_isolation(settings.isolation) if settings.isolation != "on" else True
    accounts: dict[str, dict[str, object]] = {}
    try:
        accounts = json.loads(layout.uid_map.read_text())["accounts"]
    except (OSError, ValueError, KeyError):
        if isolated and layout.chats.exists() and any(layout.chats.iterdir()):
            checks.append(
                Check(
                    False,
                    f"uid map {layout.uid_map} readable",
                    "jazz-bridge repair rebuilds it from the homes",
                )
            )
    try:
        homes = sorted(e for e in os.listdir(layout.chats) if naming.is_home_name(e))
    except OSError:
        homes = []
    for name in homes:
        path = layout.chats / name
        st = os.lstat(path)
        mode = stat.S_IMODE(st.st_mode)
        if isolated:
            entry = accounts.get(name)
            uid = entry.get("uid") if entry else None
            acct = str(entry.get("name")) if entry else "?"
            try:
                exists = pwd.getpwnam(acct).pw_uid == uid
            except KeyError:
                exists = False
            checks.append(
                Check(
                    exists,
                    f"account {acct} of {name} exists with uid {uid}",
                    "run jazz-bridge repair (or restart the gateway): it recreates accounts "
                    "lost from /etc/passwd",
                )
            )
            good = mode == HOME_MODE and st.st_uid == uid and st.st_gid == gid
            checks.append(
                Check(
                    good,
                    f"home {name} {mode:04o} {st.st_uid}:{st.st_gid} "
                    f"(want {HOME_MODE:04o} {uid}:{gid})",
                    "run jazz-bridge repair",
                )
            )
        else:
            checks.append(
                Check(
                    mode == PRIVATE_DIR_MODE,
                    f"home {name} mode {mode:04o} (want {PRIVATE_DIR_MODE:04o})",
                    "run jazz-bridge repair",
                )
            )
    exe = runner_command[0]
    found = shutil.which(exe) or (exe if os.access(exe, os.X_OK) else None)
    checks.append(
        Check(
            bool(found),
            f"runner {' '.join(runner_command)} found",
            "install jazz or set runner.command",
        )
    )
    if found:
        try:
            proc = subprocess.run([*runner_command, "--help"], capture_output=True, timeout=20)
            checks.append(
                Check(
                    proc.returncode in (0, 1, 2),
                    "runner starts",
                    f"runner exited {proc.returncode}; check runner.command",
                )
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            checks.append(Check(False, "runner starts", f"{exc}; check runner.command"))
    return checks


async def _platform(spec: AdapterSpec, section: object, timeout_s: float) -> list[Check]:
    assert spec.doctor is not None
    try:
        found: list[DoctorCheck] = await asyncio.wait_for(spec.doctor(section), timeout_s)
    except TimeoutError:
        return [
            Check(
                False,
                f"{spec.name} checks finished within {timeout_s:g}s",
                f"check the network and {spec.section}.api_url",
            )
        ]
    except Exception as exc:  # an adapter's check must not stop the others
        return [
            Check(
                False,
                f"{spec.name} checks ran ({type(exc).__name__}: {exc})",
                f"check [{spec.section}] in the configuration",
            )
        ]
    return [Check(c.ok, c.what, c.fix) for c in found]


async def platform_checks(
    settings: CoreSettings,
    specs: dict[str, AdapterSpec],
    timeout_s: float = PLATFORM_TIMEOUT_S,
) -> list[Check]:
    """Every enabled adapter's own checks, concurrently, each bounded by ``timeout_s``.

    Whatever an adapter reports is passed through the log's secret masker: a token inside
    an error message or a URL never reaches the output.
    """
    jobs = [
        _platform(spec, section_settings, timeout_s)
        for spec, section_settings in rules.enabled_adapters(settings, specs)
        if spec.doctor is not None
    ]
    masker = SecretMasker(secret_values(settings))
    return [
        Check(c.ok, masker.mask(c.what), masker.mask(c.fix))
        for found in await asyncio.gather(*jobs)
        for c in found
    ]
