#!/usr/bin/env bash
# Set up everything the tests need on a fresh machine, then run them.
# Used as-is by .ci/run. Extra arguments go to pytest (one session, whose fake runner
# JB_TEST_RUNNER=documented|released picks).
#
# Without arguments there are two sessions at once, each in its own uid band and temporary
# directory: the whole suite (against the fake of the documented runner contract), and
# every end-to-end test (those built on tests/bridge/gateway_harness.py's fake runner) again
# against the fake of the released Jazz CLI (tests/fakes/fake_jazz.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  # Debian's Chromium for the browser tests (Playwright drives it; it downloads nothing)
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
if ! command -v systemd-analyze >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  # Debian's systemd for the unit checks (systemd-analyze verify/security, sysusers, tmpfiles)
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
if [ "$#" -gt 0 ]; then
  exec .venv/bin/python -m pytest -q "$@"
fi

released_log=$(mktemp)
main_tmp=$(mktemp -d)
released_tmp=$(mktemp -d)
trap 'rm -f "$released_log"' EXIT
# (tests/conftest.py keeps only the end-to-end tests in that session)
JB_TEST_RUNNER=released JB_TEST_UID_BAND=75000-78999 \
  .venv/bin/python -m pytest -q -p no:cacheprovider --basetemp="$released_tmp" \
  >"$released_log" 2>&1 &
released=$!
status=0
JB_TEST_UID_BAND=71000-74799 .venv/bin/python -m pytest -q --basetemp="$main_tmp" || status=$?
released_status=0
wait "$released" || released_status=$?
echo
echo "=== the end-to-end tests against the released Jazz CLI's fake ==="
cat "$released_log"
if [ "$status" = 0 ] && [ "$released_status" = 0 ]; then
  # a passing run leaves nothing in /tmp: what accumulates there lengthens the walk a freed
  # uid gets before it serves again (provisioning/leftovers.py), on this machine's next runs
  rm -rf "$main_tmp" "$released_tmp" || echo "could not remove all of $main_tmp $released_tmp"
  exit 0
fi
echo "the tests' files (screenshots, logs, roots) are kept: $main_tmp (whole suite)," \
  "$released_tmp (released CLI's fake)"
exit 1
