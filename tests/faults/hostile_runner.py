#!/usr/bin/env python3
"""A hostile runner of the isolation suite (stdlib only; copied into ``fake_dir``).

It speaks the runner contract and acts on the prompt's first word:

  victim   writes a secret into its own home (it is conversation B), answers
  attack   as conversation A, tries everything in $FAKE_DIR/targets.json: read another
           conversation's home and files, the gateway's state and config, every process's
           environment, signal the gateway; then plants a link to B's home, a FIFO, a hard
           link to a file it does not own, a link named like the repair marker, a
           world-readable file of its own, its ``workspace`` replaced by a link to a
           directory it cannot reach (the next run's working directory), and opens its own
           home to everyone; reports the facts in $FAKE_DIR/report-<pid>.json
  probe    answers ``probe: {json}``: the mode of its ``mine-open.txt``, what its repair
           marker is, the directory it was started in and whether it can read the file
           kept in the unreachable one from there, as this run finds them
  (other)  answers normally

It only reports; the test judges.
"""

import errno
import json
import os
import shutil
import stat
import sys
import time

FAKE_DIR = os.environ["FAKE_DIR"]
MARKER = ".permissions-repaired"


def envelope(answer: str) -> None:
    env = {
        "ok": True,
        "answer": answer,
        "costUSD": 0.0,
        "costKnown": False,
        "tokenUsage": {"promptTokens": 1, "completionTokens": 1, "totalTokens": 2},
        "toolCalls": [],
        "artifacts": [],
    }
    sys.stdout.write(json.dumps(env) + "\n")
    sys.stdout.flush()


def outcome(exc: OSError) -> str:
    return "error:" + (errno.errorcode.get(exc.errno or 0, str(exc.errno)))


def try_read(path: str) -> str:
    try:
        with open(path, "rb", buffering=0) as fh:
            return "ok:" + fh.read(4096).decode("utf-8", "replace")
    except OSError as exc:
        return outcome(exc)


def try_list(path: str) -> str:
    try:
        return "ok:" + ",".join(sorted(os.listdir(path)))
    except OSError as exc:
        return outcome(exc)


def try_write(path: str) -> str:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    except OSError as exc:
        return outcome(exc)
    os.close(fd)
    return "ok:created"


def try_do(fn, *args) -> str:  # type: ignore[no-untyped-def]
    try:
        fn(*args)
    except OSError as exc:
        return outcome(exc)
    return "ok"


def link_over(target: str, path: str) -> None:
    """Replace whatever is at ``path`` (the gateway's repair marker) by a link."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.symlink(target, path)


def dir_over(target: str, path: str) -> None:
    """Replace its own directory ``path`` (its workspace) by a link to ``target``."""
    shutil.rmtree(path, ignore_errors=True)
    os.symlink(target, path)


def foreign_environs() -> dict[str, str]:
    """Every other account's process whose environment this process could read."""
    me = os.getuid()
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            owner = os.stat(f"/proc/{name}").st_uid
        except OSError:
            continue
        if owner == me:
            continue
        got = try_read(f"/proc/{name}/environ")
        if got.startswith("ok:") and len(got) > 3:
            found[name] = got[:300]
    return found


def attack(home: str) -> dict[str, object]:
    with open(os.path.join(FAKE_DIR, "targets.json")) as fh:
        t = json.load(fh)
    gateway = os.getppid()
    reads = {
        "b_home_list": try_list(t["b_home"]),
        "b_secret": try_read(t["b_secret"]),
        "chats_list": try_list(t["chats"]),
        "state_list": try_list(t["state"]),
        "state_db": try_read(t["state_db"]),
        "accounts_json": try_read(t["accounts_json"]),
        "config_file": try_read(t["config_file"]),
        "gateway_environ": try_read(f"/proc/{gateway}/environ"),
        "gateway_mem": try_read(f"/proc/{gateway}/mem"),
        "gateway_fd_list": try_list(f"/proc/{gateway}/fd"),
    }
    writes = {
        "b_home": try_write(os.path.join(t["b_home"], "from-a")),
        "chats": try_write(os.path.join(t["chats"], "web-evil-0000")),
        "state": try_write(os.path.join(t["state"], "evil")),
        "root": try_write(os.path.join(t["root"], "evil")),
    }
    signals = {"gateway_kill0": try_do(os.kill, gateway, 0)}
    plants = {
        "link_b_home": try_do(os.symlink, t["b_home"], os.path.join(home, "to-b-home")),
        "link_b_secret": try_do(os.symlink, t["b_secret"], os.path.join(home, "to-b-secret")),
        "fifo": try_do(os.mkfifo, os.path.join(home, "pipe"), 0o666),
        "hard_root_file": try_do(os.link, t["root_file"], os.path.join(home, "hard-root")),
        "marker_link": try_do(link_over, t["decoy"], os.path.join(home, MARKER)),
        "open_file": try_write(os.path.join(home, "mine-open.txt")),
        "workspace_link": try_do(dir_over, t["locked_inner"], os.path.join(home, "workspace")),
    }
    plants["open_file_chmod"] = try_do(os.chmod, os.path.join(home, "mine-open.txt"), 0o666)
    # its own home: it may open it to everyone; the next repair must close it again
    plants["home_chmod"] = try_do(os.chmod, home, 0o777)
    return {
        "uid": os.getuid(),
        "gid": os.getgid(),
        "groups": os.getgroups(),
        "gateway_pid": gateway,
        "home": home,
        "env": dict(os.environ),
        "reads": reads,
        "writes": writes,
        "signals": signals,
        "foreign_environs": foreign_environs(),
        "plants": plants,
    }


def main() -> int:
    prompt = json.loads(sys.stdin.readline())["prompt"]
    words = prompt.split()
    home = os.environ.get("JAZZ_HOME", "")
    if words[:1] == ["victim"]:
        with open(os.path.join(home, "secret.txt"), "w") as fh:
            fh.write(words[1] + "\n")
        envelope(f"victim ready in {home}")
        return 0
    if words[:1] == ["attack"]:
        report = attack(home)
        path = os.path.join(FAKE_DIR, f"report-{os.getpid()}.json")
        with open(path + ".tmp", "w") as fh:
            json.dump({"t": time.time(), **report}, fh)
        os.replace(path + ".tmp", path)
        envelope("attack done")
        return 0
    if words[:1] == ["probe"]:
        mine = os.lstat(os.path.join(home, "mine-open.txt"))
        marker = os.lstat(os.path.join(home, MARKER))
        kind = (
            "file"
            if stat.S_ISREG(marker.st_mode)
            else "link"
            if stat.S_ISLNK(marker.st_mode)
            else "other"
        )
        found = {
            "mine_open": stat.S_IMODE(mine.st_mode),
            "marker": kind,
            "cwd": os.getcwd(),
            "locked_read": try_read("locked-secret"),  # there only if it started in there
        }
        envelope("probe: " + json.dumps(found))
        return 0
    envelope(f"ok: {prompt}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
