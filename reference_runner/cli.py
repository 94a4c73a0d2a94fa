"""``main``: one run, from the flags to the exit code (the console script's entry point).

Why it exists: every way a run can end (bad flags, a bad first line, a home it cannot
write, a directive's failure, a bug in the runner itself) must still end in exactly one
envelope and the contract's exit code; this is the one place that sets a run up, starts its
stdin reader and timeout watchdog, installs the signal handlers and maps how it ended.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from .args import parse_args
from .contract import BadInput, Finished, HomeError
from .home import ensure_home, load_history
from .output import Output, bare_failure
from .run import Run
from .stdin import Stdin, read_first_line


def main(argv: list[str] | None = None) -> int:
    """Run one turn as ``jazz-reference-runner run ...``; returns the exit code."""
    out = Output()
    stdin = Stdin()
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except BadInput as exc:
        out.envelope(bare_failure(str(exc)))
        return 1
    out.categories = set(args.events)
    run = Run(args, out, stdin)
    signal.signal(signal.SIGTERM, run.on_signal)
    signal.signal(signal.SIGINT, run.on_signal)
    try:
        try:
            if not args.input_stdin:
                raise BadInput("this runner needs --input-stdin (a prompt never goes on argv)")
            home = args.data_dir or os.environ.get("JAZZ_HOME")
            if not home:
                raise BadInput("JAZZ_HOME (or --data-dir) is not set")
            if not args.conversation and not args.ephemeral:
                raise BadInput("--conversation is required (unless --ephemeral)")
            run.home = os.path.abspath(home)
            frame = read_first_line(stdin, args.ephemeral)
            if not args.ephemeral:
                ensure_home(run.home)
        except (BadInput, HomeError) as exc:
            run.fail("failed", str(exc))
        run.prompt = frame["prompt"]
        run.attachments = list(frame.get("attachments", []))
        threading.Thread(target=stdin.pump, args=(out,), name="stdin", daemon=True).start()
        if args.timeout:
            threading.Thread(target=run.watchdog, name="timeout", daemon=True).start()
        if args.ephemeral:
            run.history = list(frame.get("history", []))
        else:
            try:
                run.history = load_history(run.history_path(), out)
            except BadInput as exc:
                run.fail("failed", str(exc))
        run.turn()
        return 0
    except Finished as done:
        return done.code
    except HomeError as exc:  # the history could not be saved: said plainly, not as a bug
        out.event("error", message=str(exc))
        out.envelope(run.failure("failed", str(exc)))
        return 1
    except Exception as exc:  # a bug here must still end in an envelope, never silence
        import traceback

        out.stderr(traceback.format_exc().rstrip())
        out.event("error", message=f"reference runner error: {exc!r}")
        out.envelope(run.failure("failed", f"reference runner error: {exc!r}"))
        return 1
