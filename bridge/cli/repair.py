"""``jazz-bridge repair``: modes and owners of a root and its homes put right (``--deep``: every
home's contents too), and a mistyped root named rather than made.
"""

from __future__ import annotations

import argparse

from ..config import CoreSettings
from ..errors import BridgeError
from ..ports import AdapterSpec
from .console import dump, out


def cmd_repair(args: argparse.Namespace, settings: CoreSettings, _: dict[str, AdapterSpec]) -> int:
    from provisioning.layout import Layout
    from provisioning.repair import repair

    from ..app import provision

    layout = Layout(settings.root.absolute())
    # a root's state/ (init and serve make it), or an empty directory made for one
    # (systemd-tmpfiles, a new container volume): a mistyped root is named, not made
    if not layout.state.is_dir():
        try:
            empty = layout.root.is_dir() and not any(layout.root.iterdir())
        except OSError:
            empty = False
        if not empty:
            what = "does not exist" if not layout.root.exists() else "has no state/ directory"
            raise BridgeError(
                f"no gateway state at {layout.root} (it {what}): is root right (--root, root, "
                f"JAZZ_BRIDGE_ROOT)? jazz-bridge init --root {layout.root} makes a new one"
            )
    prov = provision(settings, repair_homes=False)
    # an operator's --deep walks every home, repaired before or not (the marker only spares
    # the gateway's own first walk of a home after a start)
    deep = args.deep or args.force
    report = repair(
        prov.root, isolated=prov.isolated, registry=prov.registry, deep=deep, force=deep
    )
    data = report.as_dict()
    if args.json:
        dump(data)
    else:
        out(
            f"repaired {data['homes']} home(s): {data['checked']} entries checked, "
            f"{data['changed']} changed, {data['skipped']} skipped, {data['failed']} failed"
        )
        for err in report.top.errors + report.deep.errors:
            out(f"  failed: {err}")
        skips = report.skips
        for skip in skips:
            out(f"  skipped: {skip}")
        rest = report.top.skipped + report.deep.skipped - len(skips)
        if rest > 0:
            out(f"  ... and {rest} more skipped (the first {len(skips)} are named)")
    return 0 if report.ok else 1
