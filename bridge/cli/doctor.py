"""``jazz-bridge doctor``: every check on its own line, OK, WARN or FAIL with its fix.

The command only: the checks are :mod:`.checks`, imported when doctor runs (the other
commands do without them).
"""

from __future__ import annotations

import argparse
import asyncio

from ..config import CoreSettings
from ..ports import AdapterSpec
from .console import dump, out


def cmd_doctor(
    args: argparse.Namespace, settings: CoreSettings, specs: dict[str, AdapterSpec]
) -> int:
    from provisioning.layout import Layout

    from ..runner import default_command
    from ..runner.dialect import runner_profile
    from .checks import config_checks, platform_checks, run_checks

    command, _reference = default_command(settings.runner.command)
    state = Layout(settings.root.absolute()).state
    profile = runner_profile(
        settings.runner, command, state if state.is_dir() else None, write=False
    )
    from .checks.check import Check

    # first, which root every other line is about, and why that one
    checks = [Check(True, f"acting on {args.root_choice.line()}")]
    checks += config_checks(settings, specs) + run_checks(settings, command, profile=profile)
    checks += asyncio.run(platform_checks(settings, specs))
    if args.json:
        dump([{"ok": c.ok, "warn": c.warn, "check": c.what, "fix": c.fix} for c in checks])
    else:
        for check in checks:
            out(check.line())
    return 0 if all(c.ok for c in checks) else 1
