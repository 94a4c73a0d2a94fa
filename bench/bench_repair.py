"""Deep repair of a generated home against GNU ``chmod -R`` doing the same change.

Both trees are generated identically (files 0666, directories 0777); the walk clears
"other" bits as in a setgid home (following no links, pinned by descriptors), ``chmod -R
o-rwx`` does the same to the copy. Prints one table: seconds, entries, ratio.

    .venv/bin/python bench/bench_repair.py [--entries 200000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from provisioning.walk import repair_home_tree

FILES_PER_DIR = 50


def generate(root: Path, entries: int) -> int:
    """A tree of ``entries`` entries: nested directories of FILES_PER_DIR files each."""
    made = 0
    d = 0
    root.mkdir()
    while made < entries:
        parent = root / f"d{d // 20}" / f"s{d}"
        parent.mkdir(parents=True, exist_ok=True)
        for f in range(FILES_PER_DIR):
            fd = os.open(parent / f"f{f}", os.O_CREAT | os.O_WRONLY, 0o666)
            os.close(fd)
        made += FILES_PER_DIR + 1
        d += 1
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o777)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o666)
    return sum(1 + len(files) for _, _, files in os.walk(root))


def modes(root: Path) -> dict[str, int]:
    out = {}
    for dirpath, _dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        out[rel] = stat.S_IMODE(os.lstat(dirpath).st_mode)
        for name in filenames:
            out[os.path.join(rel, name)] = stat.S_IMODE(
                os.lstat(os.path.join(dirpath, name)).st_mode
            )
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=200_000)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-repair-", dir=os.environ.get("BENCH_DIR")))
    try:
        ours, theirs = base / "walk", base / "chmod"
        n = generate(ours, args.entries)
        generate(theirs, args.entries)
        subprocess.run(["sync"], check=False)
        t0 = time.perf_counter()
        report = repair_home_tree(ours, setgid_home=True, owner_uid=os.geteuid(), force=True)
        walk_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        subprocess.run(["chmod", "-R", "o-rwx", str(theirs)], check=True)
        chmod_s = time.perf_counter() - t0
        # the marker is the walk's own addition; compare everything else
        (ours / ".permissions-repaired").unlink()
        same = modes(ours) == modes(theirs)
        rows = [
            ("tool", "seconds", "entries", "changed", "ratio vs chmod -R"),
            ("chmod -R o-rwx", f"{chmod_s:.3f}", str(n), "-", "1.00"),
            (
                "repair_home_tree",
                f"{walk_s:.3f}",
                str(report.checked),
                str(report.changed),
                f"{walk_s / chmod_s:.2f}",
            ),
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for i, row in enumerate(rows):
            print(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
            if i == 0:
                print("-+-".join("-" * w for w in widths))
        print(f"\nidentical modes afterwards: {same}; walk failures: {report.failed}")
        return 0 if same and report.failed == 0 else 1
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
