"""A bad setting is named with where it was set: the variable that overrides the file, or the
file. Before, ``port = 8080`` in the file and ``JAZZ_BRIDGE_SERVER__PORT=abc`` read
"invalid configuration (file good.toml, environment JAZZ_BRIDGE_*): server.port ... (got
'abc')", and the operator looked for 'abc' in a file that did not hold it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.config import load_settings
from bridge.errors import ConfigError


def test_a_bad_value_names_the_variable_or_the_file_that_set_it(tmp_path: Path) -> None:
    config = tmp_path / "good.toml"
    config.write_text("[server]\nport = 8080\nhost = 5\n\n[limits]\nmax_concurrent_runs = 2\n")
    env = {"JAZZ_BRIDGE_SERVER__PORT": "abc", "jazz_bridge_limits__max_concurrent_runs": "0"}
    with pytest.raises(ConfigError) as caught:
        load_settings(config, environ=env)
    lines = {line.split(":")[0].strip(): line for line in str(caught.value).splitlines()[1:]}
    assert lines.keys() == {"server.port", "server.host", "limits.max_concurrent_runs"}, caught
    assert lines["server.port"].endswith("[from JAZZ_BRIDGE_SERVER__PORT]"), lines
    assert lines["limits.max_concurrent_runs"].endswith(
        "[from JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS]"
    ), lines
    assert lines["server.host"].endswith(f"[from {config}]"), lines
