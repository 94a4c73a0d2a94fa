"""The deep home repair against GNU ``chmod -R`` doing the same change.

Two identical trees are generated (directories of files; files 0666/0644/0755/0777/0600,
directories 0777/0755). ``repair_home_tree(setgid_home=True)`` clears "other" bits on one
(following no links, pinned by descriptors), ``chmod -R o-rwx`` does the same to the other.
Each round puts the generated modes back first, flushes the disk, and alternates which of
the two goes first; afterwards every entry's mode is compared between the trees. A last
round times both again on trees already repaired (nothing left to change). The temp trees
are removed at the end, also on failure or Ctrl-C.

    .venv/bin/python bench/bench_repair.py [--entries 200000] [--rounds 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from provisioning.modes import REPAIR_MARKER
from provisioning.walk import WalkReport, repair_home_tree

FILES_PER_DIR = 50
SUBDIRS_PER_TOP = 20
FILE_MODES = (0o666, 0o666, 0o644, 0o755, 0o777, 0o600)
DIR_MODES = (0o777, 0o777, 0o755)


def _layout(entries: int) -> list[tuple[str, str]]:
    """(top, sub) directory names, enough for ``entries`` entries in all (root excluded)."""
    dirs: list[tuple[str, str]] = []
    made, tops = 0, 0
    while made < entries:
        d = len(dirs)
        top = f"d{d // SUBDIRS_PER_TOP}"
        if d % SUBDIRS_PER_TOP == 0:
            made += 1
            tops += 1
        dirs.append((top, f"s{d}"))
        made += 1 + FILES_PER_DIR
    return dirs


def generate(root: Path, entries: int) -> int:
    """Create the tree (exact modes: umask 0 while creating); returns its entry count."""
    old = os.umask(0)
    count = 1
    try:
        os.mkdir(root, 0o777)
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for i, (top, sub) in enumerate(_layout(entries)):
                if i % SUBDIRS_PER_TOP == 0:
                    os.mkdir(top, DIR_MODES[0], dir_fd=root_fd)
                    count += 1
                path = f"{top}/{sub}"
                os.mkdir(path, DIR_MODES[i % len(DIR_MODES)], dir_fd=root_fd)
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY, dir_fd=root_fd)
                try:
                    for f in range(FILES_PER_DIR):
                        flags = os.O_CREAT | os.O_WRONLY | os.O_EXCL
                        os.close(os.open(f"f{f}", flags, FILE_MODES[f % 6], dir_fd=fd))
                finally:
                    os.close(fd)
                count += 1 + FILES_PER_DIR
        finally:
            os.close(root_fd)
    finally:
        os.umask(old)
    return count


def reset(root: Path, entries: int) -> None:
    """Put the generated modes back (the root and tops 0777)."""
    os.chmod(root, 0o777)
    for i, (top, sub) in enumerate(_layout(entries)):
        if i % SUBDIRS_PER_TOP == 0:
            os.chmod(root / top, DIR_MODES[0])
        d = root / top / sub
        os.chmod(d, DIR_MODES[i % len(DIR_MODES)])
        for f in range(FILES_PER_DIR):
            os.chmod(d / f"f{f}", FILE_MODES[f % 6])


def modes(root: Path) -> dict[str, int]:
    """Every entry's permission bits, by path relative to ``root`` (the marker left out)."""
    out: dict[str, int] = {}
    for dirpath, _dirnames, filenames, dir_fd in os.fwalk(root):
        rel = os.path.relpath(dirpath, root)
        out[rel] = os.stat(dir_fd).st_mode & 0o7777
        for name in filenames:
            if rel == "." and name == REPAIR_MARKER:
                continue
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            out[f"{rel}/{name}"] = st.st_mode & 0o7777
    return out


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for i, row in enumerate(rows):
        lines.append(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if i == 0:
            lines.append("-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=os.environ.get("BENCH_DIR"), help="where the trees go")
    args = parser.parse_args()
    uid = os.geteuid()
    base = Path(tempfile.mkdtemp(prefix="bench-repair-", dir=args.dir))
    try:
        ours, theirs = base / "walk", base / "chmod"
        n = generate(ours, args.entries)
        generate(theirs, args.entries)
        print(f"{n} entries per tree in {base} ({args.rounds} rounds)", flush=True)

        def walk() -> WalkReport:
            return repair_home_tree(ours, setgid_home=True, owner_uid=uid, force=True)

        def chmod_r() -> None:
            subprocess.run(["chmod", "-R", "o-rwx", str(theirs)], check=True)

        walk_s: list[float] = []
        chmod_s: list[float] = []
        report = WalkReport()
        same = True
        for r in range(args.rounds):
            if r:
                reset(ours, args.entries)
                reset(theirs, args.entries)
            os.sync()
            if r % 2 == 0:
                t, rep = timed(walk)
                walk_s.append(t)
                chmod_s.append(timed(chmod_r)[0])
            else:
                chmod_s.append(timed(chmod_r)[0])
                t, rep = timed(walk)
                walk_s.append(t)
            assert isinstance(rep, WalkReport)
            report = rep
            same = same and modes(ours) == modes(theirs)
            print(f"  round {r + 1}: walk {walk_s[-1]:.3f} s, chmod -R {chmod_s[-1]:.3f} s")
        os.sync()
        noop_walk_s, noop_rep = timed(walk)
        noop_chmod_s = timed(chmod_r)[0]
        assert isinstance(noop_rep, WalkReport)

        w, c = statistics.median(walk_s), statistics.median(chmod_s)
        rows = [
            ("tool", "seconds (median)", "best", "entries", "changed", "ratio vs chmod -R"),
            ("chmod -R o-rwx", f"{c:.3f}", f"{min(chmod_s):.3f}", str(n), "-", "1.00"),
            (
                "repair_home_tree",
                f"{w:.3f}",
                f"{min(walk_s):.3f}",
                str(report.checked),
                str(report.changed),
                f"{w / c:.2f}",
            ),
            ("chmod -R o-rwx (already repaired)", f"{noop_chmod_s:.3f}", "-", str(n), "-", "1.00"),
            (
                "repair_home_tree (already repaired)",
                f"{noop_walk_s:.3f}",
                "-",
                str(noop_rep.checked),
                str(noop_rep.changed),
                f"{noop_walk_s / noop_chmod_s:.2f}",
            ),
        ]
        print()
        print(table(rows))
        failures = report.failed + noop_rep.failed
        print(f"\nidentical modes afterwards: {same}; walk failures: {failures}")
        return 0 if same and failures == 0 else 1
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
