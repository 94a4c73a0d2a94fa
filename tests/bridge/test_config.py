"""Configuration: TOML and environment, bad keys refused by name, secrets masked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.config import load_settings
from bridge.errors import ConfigError
from bridge.plugins import load_specs

SECTIONS = {k: s.settings_model for k, s in load_specs().items()}


def test_defaults_are_the_embedded_default() -> None:
    s = load_settings(None, adapter_sections=SECTIONS, environ={})
    assert s.root == Path("jazz-bridge-home")
    assert (s.server.host, s.server.port) == ("127.0.0.1", 8787)
    assert s.isolation == "auto"
    assert s.runner.approval_policy == "low-risk"
    assert (s.limits.max_concurrent_runs, s.limits.max_queued_per_conversation) == (4, 5)
    assert s.web.enabled is True  # type: ignore[attr-defined]


def test_toml_and_environment_overrides(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('root = "/srv/jb"\n[server]\nport = 9000\n[runner]\ncommand = ["/opt/jazz"]\n')
    s = load_settings(
        cfg,
        adapter_sections=SECTIONS,
        environ={
            "JAZZ_BRIDGE_SERVER__PORT": "9100",
            "JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS": "2",
        },
    )
    assert s.root == Path("/srv/jb")
    assert s.server.port == 9100
    assert s.runner.command == ["/opt/jazz"]
    assert s.limits.max_concurrent_runs == 2


def test_config_file_from_environment_variable(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('isolation = "off"\n')
    s = load_settings(None, adapter_sections=SECTIONS, environ={"JAZZ_BRIDGE_CONFIG": str(cfg)})
    assert s.isolation == "off"


@pytest.mark.parametrize(
    ("toml", "env", "needle"),
    [
        ('rooot = "/x"\n', {}, "rooot: unknown key"),
        ("[server]\nprot = 1\n", {}, "server.prot: unknown key"),
        ('[server]\nport = "abc"\n', {}, "server.port"),
        ('isolation = "maybe"\n', {}, "isolation"),
        ("", {"JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS": "0"}, "limits.max_concurrent_runs"),
        ("", {"JAZZ_BRIDGE_RUNNER__BOGUS": "1"}, "runner.bogus: unknown key"),
        ('[web]\ntokn = "x"\n', {}, "web.tokn: unknown key"),
    ],
)
def test_bad_config_is_refused_naming_the_key(
    tmp_path: Path, toml: str, env: dict[str, str], needle: str
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml)
    with pytest.raises(ConfigError) as err:
        load_settings(cfg, adapter_sections=SECTIONS, environ=env)
    assert needle in str(err.value)


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("root = \n")
    with pytest.raises(ConfigError, match=r"bad\.toml is not valid TOML"):
        load_settings(cfg, adapter_sections=SECTIONS, environ={})


def test_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml", adapter_sections=SECTIONS, environ={})


def test_config_check_masks_secrets(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[web]\ntoken = "super-secret-value"\n[runner]\ndaemon_token = "dt-secret"\n')
    out = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "config", "check", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "super-secret-value" not in out.stdout + out.stderr
    assert "dt-secret" not in out.stdout + out.stderr
    data = json.loads(out.stdout)
    assert data["web"]["token"] == "**********"


def test_config_check_reports_bad_values_with_exit_2(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[server]\nport = 70000\n[web]\ntoken = 5\n")
    out = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "config", "check", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode == 2
    assert "server.port" in out.stderr and "web.token" in out.stderr


def test_the_example_config_is_valid() -> None:
    example = Path(__file__).resolve().parents[2] / "deploy" / "config.example.toml"
    s = load_settings(example, adapter_sections=SECTIONS, environ={})
    assert s.root == Path("/srv/jazz-bridge")
