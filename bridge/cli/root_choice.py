"""Which root a command acts on, and why: said in every command's output.

An operator's command run from another directory than ``serve`` found no root there and
offered to make a second, empty one. The root is now taken, strongest first, from the
``--root`` option, ``$JAZZ_BRIDGE_ROOT``, the config file's ``root``, the last root
``serve`` recorded (:mod:`.served`), and only then the default ``./jazz-bridge-home``;
:meth:`RootChoice.line` names the root and where it came from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import DEFAULT_ROOT, ENV_PREFIX, CoreSettings
from .served import read_last_root

ROOT_ENV = f"{ENV_PREFIX}ROOT"


@dataclass(frozen=True)
class RootChoice:
    root: Path  # absolute
    why: str
    source: str  # option, environment, config, last-served, default

    def line(self) -> str:
        return f"root {self.root} ({self.why})"

    def as_dict(self) -> dict[str, Any]:
        return {"path": str(self.root), "source": self.source, "why": self.why}


def _served_elsewhere(root: Path, environ: Mapping[str, str]) -> str:
    last = read_last_root(environ)
    if last is None or last[0] == root:
        return ""
    return f"; the last root served is {last[0]}, recorded in {last[1]}"


def choose_root(
    option: str | None,
    settings: CoreSettings,
    environ: Mapping[str, str],
    *,
    use_last_served: bool,
) -> RootChoice:
    """The root a command acts on (module docstring). ``use_last_served``: False for
    ``serve`` and ``config check``, which keep the configured root or the default (what
    ``serve`` records is the root it was given)."""
    if option:
        root = Path(option).absolute()
        return RootChoice(root, "given by --root" + _served_elsewhere(root, environ), "option")
    configured = settings.root.absolute()
    if any(k.upper() == ROOT_ENV for k in environ):
        why = f"from {ROOT_ENV}" + _served_elsewhere(configured, environ)
        return RootChoice(configured, why, "environment")
    if "root" in settings.model_fields_set:
        file = getattr(settings, "_toml_file", None)
        why = f"from {file}" + _served_elsewhere(configured, environ)
        return RootChoice(configured, why, "config")
    if use_last_served:
        last = read_last_root(environ)
        if last is not None:
            return RootChoice(
                last[0], f"the last root served, recorded in {last[1]}", "last-served"
            )
    why = (
        f"the default ./{DEFAULT_ROOT} under {os.getcwd()}: no --root, {ROOT_ENV}, config "
        "file root" + ("" if not use_last_served else " or last root served")
    )
    return RootChoice(configured, why, "default")
