"""A cgroup per run: memory and processes bounded over the whole run, and nothing left.

Why: the rlimits (:mod:`provisioning.rlimits`) bound each *process* (address space, CPU,
file size) and each *uid* (processes: not at all in single-account mode, where every run
has the gateway's uid). A run of 500 processes of 8 GiB each was within them. A cgroup
bounds the run as a whole, and the kernel knows every process of it, whatever session,
process group or uid it took since: killing the cgroup leaves nothing behind.

Where the gateway may make its runs' cgroups (:func:`find_tree`, once at start):

* cgroup v2 with the ``memory`` and ``pids`` controllers available to the gateway's own
  cgroup (the unit's ``Delegate=memory pids``): runs go in ``<own>/jazz-bridge-runs-<root>/<run>``.
  A v2 cgroup that holds processes cannot give controllers to its children, so the gateway
  first moves its own processes into ``<own>/gateway`` (what systemd asks of a delegated
  service);
* cgroup v1 ``memory`` and ``pids`` hierarchies the gateway can write (root):
  ``<own>/jazz-bridge-runs-<root>/<run>`` in each;
* neither (not root, no delegation): runs have the rlimits only.

A run enters its cgroup before it runs anything: its command starts at the gate
(:mod:`provisioning.gate`), a ``/bin/sh`` that writes its own pid to the cgroup's
``cgroup.procs`` files (:attr:`RunCgroup.procs_files`) and ``exec``-s the rest in place (no
process stays, nothing in Python; as root, before the identity switch), so everything the
run starts is born inside. The run itself cannot leave: the files belong to root. When it
ended, the cgroup says whether the kernel refused it memory (``oom_kill``) or a process
(``pids.events`` ``max``), every process still in it is killed (``cgroup.kill`` on v2,
SIGKILL to each on v1, again until none is left), and it is removed. Cgroups a gateway
left when it died are emptied and removed at the next start of a gateway on the same root
(``<root>`` is a digest of its path: two gateways on one host keep to their own runs).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import ProvisioningError
from .rlimits import RunLimits

log = logging.getLogger(__name__)

RUNS_PREFIX = "jazz-bridge-runs-"  # + the root's id: below the gateway's own cgroup
GATEWAY_LEAF = "gateway"  # v2: where the gateway's own processes move (no internal processes)
CONTROLLERS = ("memory", "pids")
PROC_CGROUP = Path("/proc/self/cgroup")
MOUNTINFO = Path("/proc/self/mountinfo")
KILL_ROUNDS = 50  # v1: kill what is in the cgroup, again, until it is empty
REMOVE_TRIES = 50  # rmdir answers EBUSY while the last killed process is still exiting
EMPTY_WAIT_S = 0.01  # between those tries (bounded: at most ~0.5 s in all)


class CgroupError(ProvisioningError):
    """A run's cgroup could not be made or entered; the message says which and why."""


@dataclass(frozen=True)
class CgroupTree:
    """Where runs' cgroups are made: one directory per controller (v2: the same one)."""

    version: int
    parents: dict[str, Path]  # controller -> <own>/jazz-bridge-runs-<root>

    def describe(self) -> str:
        where = sorted({str(p) for p in self.parents.values()})
        return f"cgroup v{self.version} ({', '.join(sorted(self.parents))}) at {', '.join(where)}"

    def make(self, name: str, limits: RunLimits) -> RunCgroup:
        """The cgroup of run ``name`` under ``limits``' memory and process counts, over the
        whole run (0: none). Blocking."""
        memory_bytes, processes = limits.memory_bytes, limits.processes
        dirs: dict[str, Path] = {}
        try:
            for controller, parent in self.parents.items():
                path = parent / name
                if path not in dirs.values():
                    path.mkdir()
                dirs[controller] = path
            group = RunCgroup(self.version, dirs)
            if memory_bytes and "memory" in dirs:
                group.limit_memory(memory_bytes)
            if processes and "pids" in dirs:
                _write(dirs["pids"] / "pids.max", str(processes))
        except OSError as exc:
            for path in set(dirs.values()):
                _rmdir(path)
            raise CgroupError(
                f"cannot make the run's cgroup {name} in {self.describe()}: {exc}"
            ) from exc
        return group

    def sweep(self) -> int:
        """Empty and remove what runs of an earlier gateway left; how many. Blocking."""
        by_name: dict[str, dict[str, Path]] = {}
        for controller, parent in self.parents.items():
            for path in _subdirs(parent):
                by_name.setdefault(path.name, {})[controller] = path
        for dirs in by_name.values():
            RunCgroup(self.version, dirs).close()
        return len(by_name)

    def close(self) -> None:
        """Remove the runs' directories once no run is left in them (the gateway stops)."""
        for parent in set(self.parents.values()):
            if not _subdirs(parent):
                _rmdir(parent)


@dataclass
class RunCgroup:
    """One run's cgroup (one directory per controller on v1, one in all on v2)."""

    version: int
    dirs: dict[str, Path]
    # every directory of it removed: no process was left in it (set by :meth:`close`)
    removed: bool = False

    @property
    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in sorted(set(self.dirs.values()))]

    def limit_memory(self, limit: int) -> None:
        memory = self.dirs["memory"]
        if self.version == 2:
            _write(memory / "memory.max", str(limit))
            _try_write(memory / "memory.swap.max", "0")  # no swap to spill over into
        else:
            _write(memory / "memory.limit_in_bytes", str(limit))
            _try_write(memory / "memory.memsw.limit_in_bytes", str(limit))  # with swap

    def hit(self) -> str | None:
        """``memory`` when the kernel killed a process of the run for want of memory,
        ``processes`` when it refused the run a process; None when neither."""
        memory = self.dirs.get("memory")
        if memory is not None:
            events = memory / ("memory.events" if self.version == 2 else "memory.oom_control")
            if _counter(events, "oom_kill"):
                return "memory"
        pids = self.dirs.get("pids")
        if pids is not None and _counter(pids / "pids.events", "max"):
            return "processes"
        return None

    def pids(self) -> list[int]:
        found: set[int] = set()
        for procs in self.procs_files:
            try:
                found.update(int(x) for x in procs.read_text().split())
            except (OSError, ValueError):
                continue
        return sorted(found)

    def kill(self) -> int:
        """Kill every process in the cgroup (and each one started meanwhile); how many were
        found. Blocking."""
        kill_file = next(iter(self.dirs.values())) / "cgroup.kill"
        if self.version == 2 and kill_file.exists():
            killed = len(self.pids())
            if killed:
                _try_write(kill_file, "1")
            return killed
        seen: set[int] = set()
        for _ in range(KILL_ROUNDS):
            pids = self.pids()
            if not pids:
                break
            seen.update(pids)  # one killed may be listed again while it exits
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        return len(seen)

    def finish(self) -> tuple[str | None, int]:
        """Once the run's first process ended: which limit it hit (:meth:`hit`) and how many
        processes it left (killed), the cgroup removed. Blocking."""
        hit = self.hit()
        return hit, self.close()

    def close(self) -> int:
        """Kill what is left and remove the cgroup; how many processes were left.
        :attr:`removed` says whether it is gone (else a process is still in it)."""
        left = self.kill()
        removed = True
        for path in set(self.dirs.values()):
            for _ in range(REMOVE_TRIES):
                if _rmdir(path):
                    break
                time.sleep(EMPTY_WAIT_S)  # a killed process still exiting: bounded
            else:
                removed = False
                log.warning("cgroup %s could not be removed (processes still exiting)", path)
        self.removed = removed
        return left


# -- finding where the gateway may make cgroups -----------------------------------------------


def runs_dir_name(root: Path) -> str:
    """The directory of a root's runs' cgroups (a digest: a path may be longer than a name)."""
    return RUNS_PREFIX + hashlib.sha256(os.fsencode(root)).hexdigest()[:16]


def find_tree(
    root: Path, proc_cgroup: Path = PROC_CGROUP, mountinfo: Path = MOUNTINFO
) -> CgroupTree | None:
    """Where the gateway of ``root`` can make its runs' cgroups with the memory and pids
    controllers (v2 delegated first, then v1), set up; None when nowhere. Blocking; once
    at start."""
    try:
        membership = _membership(proc_cgroup.read_text())
        mounts = _mounts(mountinfo.read_text())
    except OSError as exc:
        log.info("no cgroup per run: cannot read %s: %s", proc_cgroup, exc)
        return None
    runs = runs_dir_name(root)
    for attempt in (_v2, _v1):
        tree = attempt(membership, mounts, runs)
        if tree is not None:
            swept = tree.sweep()
            if swept:
                log.warning("removed %d run cgroup(s) a gateway before this one left", swept)
            return tree
    return None


def _membership(text: str) -> dict[str, str]:
    """``/proc/self/cgroup``: controller (``""`` for v2) -> the cgroup's path."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    return found


@dataclass(frozen=True)
class _Mount:
    root: str  # the path of the hierarchy the mount shows at its mount point
    point: Path
    fstype: str
    options: frozenset[str]


def _mounts(text: str) -> list[_Mount]:
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        if tail[0] not in ("cgroup", "cgroup2"):
            continue
        point = Path(fields[4].replace("\\040", " "))
        mounts.append(_Mount(fields[3], point, tail[0], frozenset(tail[2].split(","))))
    return mounts


def _own_dir(mount: _Mount, path: str) -> Path | None:
    """The gateway's cgroup directory under ``mount``, or None when the mount does not show
    it (a container's mount of another part of the hierarchy)."""
    root = mount.root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    return mount.point / path[len(root) :].lstrip("/")


def _v2(membership: dict[str, str], mounts: list[_Mount], runs_name: str) -> CgroupTree | None:
    path = membership.get("")
    mount = next((m for m in mounts if m.fstype == "cgroup2"), None)
    if path is None or mount is None:
        return None
    own = _own_dir(mount, path)
    if own is None:
        return None
    try:
        available = set((own / "cgroup.controllers").read_text().split())
    except OSError:
        return None
    if not set(CONTROLLERS) <= available:
        log.info(
            "cgroup v2 at %s does not delegate %s to the gateway (it has %s)",
            own,
            " and ".join(CONTROLLERS),
            " ".join(sorted(available)) or "none",
        )
        return None
    enable = " ".join(f"+{c}" for c in CONTROLLERS)
    runs = own / runs_name
    try:
        if own != mount.point:  # not the root cgroup: no processes beside child cgroups
            leaf = own / GATEWAY_LEAF
            leaf.mkdir(exist_ok=True)
            for pid in (own / "cgroup.procs").read_text().split():
                _try_write(leaf / "cgroup.procs", pid)
        _write(own / "cgroup.subtree_control", enable)
        runs.mkdir(exist_ok=True)
        _write(runs / "cgroup.subtree_control", enable)
    except OSError as exc:
        log.info("cgroup v2 at %s cannot hold the runs' cgroups: %s", own, exc)
        return None
    return CgroupTree(2, dict.fromkeys(CONTROLLERS, runs))


def _v1(membership: dict[str, str], mounts: list[_Mount], runs_name: str) -> CgroupTree | None:
    parents: dict[str, Path] = {}
    for controller in CONTROLLERS:
        path = membership.get(controller)
        mount = next((m for m in mounts if m.fstype == "cgroup" and controller in m.options), None)
        if path is None or mount is None:
            continue
        own = _own_dir(mount, path)
        if own is None:
            continue
        runs = own / runs_name
        try:
            runs.mkdir(exist_ok=True)
            probe = runs / f"probe-{os.getpid()}"
            probe.mkdir(exist_ok=True)
            probe.rmdir()
        except OSError as exc:
            log.info("cgroup v1 %s at %s cannot hold the runs' cgroups: %s", controller, own, exc)
            continue
        parents[controller] = runs
    return CgroupTree(1, parents) if len(parents) == len(CONTROLLERS) else None


# -- files ------------------------------------------------------------------------------------


def _write(path: Path, value: str) -> None:
    with open(path, "w", encoding="ascii") as fh:  # one write(2): what cgroupfs expects
        fh.write(value)


def _try_write(path: Path, value: str) -> None:
    try:
        _write(path, value)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ESRCH, errno.EINVAL, errno.EACCES):
            log.debug("cannot write %s to %s: %s", value, path, exc)


def _counter(path: Path, key: str) -> int:
    """The value of ``key`` in a flat-keyed cgroup file (``oom_kill 2``), 0 when absent."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value.strip() or 0)
    except (OSError, ValueError):
        pass
    return 0


def _subdirs(parent: Path) -> list[Path]:
    try:
        return [p for p in parent.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True
