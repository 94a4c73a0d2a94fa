"""A person's file whose save is cut short (disk full, quota) leaves nothing half-written.

The attachment is saved into ``workspace/attachments/`` and named to the agent in the
prompt; a truncated file under the person's file name would pass for the complete one to
the agent (or to the person's next message that refers to it).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from provisioning.homes import Home, Homes
from provisioning.layout import init_root

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Homes(init_root(tmp_path / "r"), isolated=False).ensure("web:names")


def test_a_save_cut_short_leaves_no_partial_file(home: Home) -> None:
    """The disk fills (here: a file-size limit) half way through a person's file."""
    script = textwrap.dedent(
        f"""
        import resource, signal, sys
        from pathlib import Path
        from bridge.files import save_attachment
        from provisioning.homes import Homes
        from provisioning.layout import init_root

        home = Homes(init_root(Path({str(home.path.parents[1])!r})), isolated=False).ensure(
            "web:names"
        )
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            save_attachment(home, 8, "big.bin", b"x" * 100_000)
        except OSError as exc:
            print("refused:", exc)
            sys.exit(0)
        print("saved")
        sys.exit(1)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    left = sorted(p.name for p in (home.path / "workspace" / "attachments").iterdir())
    assert left == [], f"a truncated file was left looking complete: {left}"
