#!/usr/bin/env bash
# Set up jazz-bridge on a fresh machine and run it on its embedded default:
# a home under the working directory, SQLite, the web chat on http://127.0.0.1:8787.
# Extra arguments go to `jazz-bridge serve` (e.g. --config jazz-bridge.toml).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
[ -x "$here/.venv/bin/python" ] || "$PY" -m venv "$here/.venv"
"$here/.venv/bin/pip" install -q --disable-pip-version-check -e "$here"
exec "$here/.venv/bin/jazz-bridge" serve "$@"
