"""The runner as one file every conversation account can start: a zip application.

Why it exists: isolated runs start as conversation accounts, which often cannot read where
the gateway is installed (a virtualenv under ``/root``). The gateway therefore writes the
runner under ``<root>/tools/`` as one file readable by every account and starts it with an
interpreter every account can run (``python jazz-reference-runner.pyz run ...``). The
archive holds this package's modules and a ``__main__`` that calls :func:`.cli.main`; it is
the same bytes on every build (sorted names, fixed times and modes, no compression), so a
gateway start rewrites the copy only when the runner itself changed.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
SUFFIX = ".pyz"
MAIN = b"import sys\n\nfrom reference_runner.cli import main\n\nsys.exit(main())\n"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can have


def archive() -> bytes:
    """The zip application's bytes: ``__main__.py`` and ``reference_runner/*.py``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as zf:
        _add(zf, "__main__.py", MAIN)
        for path in sorted(PACKAGE.glob("*.py")):
            _add(zf, f"{PACKAGE.name}/{path.name}", path.read_bytes())
    return buffer.getvalue()


def _add(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=_EPOCH)
    info.external_attr = 0o644 << 16
    zf.writestr(info, data)
