"""The runner's flags: the ``jazz run`` options of the documented contract.

Why it exists: a bad flag must end as a failure envelope on stdout, like every other
failure (argparse's own usage text and exit 2 would leave the gateway a run with no
envelope), and unknown ``--events`` categories and negative caps are refused by name.
"""

from __future__ import annotations

import argparse
import math
from typing import NoReturn

from .contract import CATEGORIES, NOT_AN_AI, POLICIES, BadInput


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are :class:`BadInput` (a failure envelope)."""

    def error(self, message: str) -> NoReturn:
        raise BadInput(f"bad arguments: {message}")


def _events(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in CATEGORIES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown event categories {','.join(unknown)} (known: {','.join(CATEGORIES)})"
        )
    return names


def _nonneg_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return number


def nonneg_float(value: str) -> float:
    """A finite number >= 0 (``--max-cost-usd``, ``!cost``), else ArgumentTypeError."""
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError(f"{value} is not a non-negative number")
    return number


def parse_args(argv: list[str]) -> argparse.Namespace:
    """``argv`` (without the program name) read as ``jazz-reference-runner run ...``."""
    parser = Parser(prog="jazz-reference-runner", allow_abbrev=False, description=NOT_AN_AI)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", allow_abbrev=False, help="run one turn (the jazz run contract)")
    for flag in ("--json", "--no-tui", "--interactive-stdin", "--input-stdin"):
        run.add_argument(flag, action="store_true")
    run.add_argument("--ephemeral", action="store_true")
    run.add_argument("--park", action="store_true")
    run.add_argument("--agent", default="default")
    run.add_argument("--conversation")
    run.add_argument("--approval-policy", choices=POLICIES, default="low-risk")
    run.add_argument("--events", type=_events, default=[])
    run.add_argument("--timeout", type=_nonneg_int, default=0, metavar="MS")
    run.add_argument("--auto-approve-tools", default="")
    run.add_argument("--timezone")
    run.add_argument("--max-iterations", type=_nonneg_int)
    run.add_argument("--max-cost-usd", type=nonneg_float)
    run.add_argument("--max-tokens", type=_nonneg_int)
    run.add_argument("--max-duration-ms", type=_nonneg_int)
    run.add_argument("--data-dir")
    return parser.parse_args(argv)
