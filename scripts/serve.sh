#!/usr/bin/env bash
# Set up jazz-bridge on a fresh machine and run it on its embedded default:
# a home under the working directory, SQLite, the web chat on http://127.0.0.1:8787.
# Extra arguments go to `jazz-bridge serve` (e.g. --config jazz-bridge.toml).
# The install is editable (code changes need none); it is redone only when pyproject.toml
# (the dependencies) changed since the last one, so a restart needs no package index.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
[ -x "$here/.venv/bin/python" ] || "$PY" -m venv "$here/.venv"
stamp="$here/.venv/.jazz-bridge-installed"
want=$(sha256sum "$here/pyproject.toml" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ] || [ ! -x "$here/.venv/bin/jazz-bridge" ]; then
  "$here/.venv/bin/pip" install -q --disable-pip-version-check -e "$here"
  printf '%s\n' "$want" >"$stamp"
fi
if ! command -v jazz-bridge >/dev/null 2>&1; then
  echo "jazz-bridge: the command line is $here/.venv/bin/jazz-bridge" \
    "(export PATH=\"$here/.venv/bin:\$PATH\" to type it as jazz-bridge)" >&2
fi
exec "$here/.venv/bin/jazz-bridge" serve "$@"
