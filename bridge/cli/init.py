"""``jazz-bridge init``: make (or repair) a root, and never of a directory that is not one.

The refusal of a foreign directory is here because every command that makes a root
(``init``, ``serve``, ``homes ensure``) asks it first.
"""

from __future__ import annotations

import argparse
import os

from ..config import CoreSettings
from ..errors import BridgeError
from ..ports import AdapterSpec
from .console import dump, out

LOST_AND_FOUND = "lost+found"  # on a filesystem made for the root: it may hold that
FOREIGN_SHOWN = 3  # entries named when refusing a directory that is not a root


def refuse_foreign_directory(settings: CoreSettings) -> None:
    """Before a root is made: refuse an existing directory that is not one and holds other
    things (``--root /tmp``, a mistyped ``/srv``). Making a root of it sets its mode to 2751
    and gives it to the operator group: /tmp's sticky bit and everyone's access to what it
    holds would be gone. A root (its ``state/``), an empty directory (systemd-tmpfiles, a new
    volume) and one holding only a root's own entries, a new filesystem's ``lost+found``
    or the gateway's log file are taken."""
    from provisioning import layout

    root = settings.root.absolute()
    if layout.Layout(root).state.is_dir():
        return
    try:
        entries = sorted(os.listdir(root))
    except (FileNotFoundError, NotADirectoryError):
        return  # made new, or named by init_root's own checks
    allowed = {
        layout.CHATS_DIR,
        layout.PERSONAS_DIR,
        layout.STATE_DIR,
        layout.ARCHIVE_DIR,
        layout.TOOLS_DIR,
        LOST_AND_FOUND,
    }
    log_file = settings.log.file.absolute() if settings.log.file is not None else None
    if log_file is not None and log_file.is_relative_to(root):
        allowed.add(log_file.relative_to(root).parts[0])
    foreign = [entry for entry in entries if entry not in allowed]
    if foreign:
        shown = ", ".join(foreign[:FOREIGN_SHOWN]) + (
            ", ..." if len(foreign) > FOREIGN_SHOWN else ""
        )
        raise BridgeError(
            f"root {root} is an existing directory holding other things ({shown}), not a "
            "gateway root: making it one would set its mode to 2751 and give it to the "
            "operator group; pick a new or empty directory (--root, root, JAZZ_BRIDGE_ROOT)"
        )


def cmd_init(args: argparse.Namespace, settings: CoreSettings, _: dict[str, AdapterSpec]) -> int:
    from provisioning.layout import init_root

    refuse_foreign_directory(settings)
    info = init_root(settings.root, settings.operator_group)
    data = {
        "root": str(info.layout.root),
        "operatorGroup": info.operator_group,
        "operatorGid": info.operator_gid,
        "chats": str(info.layout.chats),
        "personas": str(info.layout.personas),
        "state": str(info.layout.state),
    }
    if args.json:
        dump(data)
    else:
        out(f"root {data['root']} ready (operator group {info.operator_group})")
    return 0
