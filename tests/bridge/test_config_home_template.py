"""``runner.home_template``: an existing directory, checked when the configuration loads, a
bad one refused naming the key and where it was set."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.config import load_settings
from bridge.errors import ConfigError
from bridge.plugins import load_specs

SECTIONS = {k: s.settings_model for k, s in load_specs().items()}
ENV = "JAZZ_BRIDGE_RUNNER__HOME_TEMPLATE"


def test_unset_by_default() -> None:
    assert load_settings(None, adapter_sections=SECTIONS, environ={}).runner.home_template is None


def test_an_existing_directory_is_taken_from_the_file_or_the_environment(tmp_path: Path) -> None:
    tpl = tmp_path / "template"
    tpl.mkdir()
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[runner]\nhome_template = "{tpl}"\n')
    assert load_settings(cfg, adapter_sections=SECTIONS, environ={}).runner.home_template == tpl
    s = load_settings(None, adapter_sections=SECTIONS, environ={ENV: str(tpl)})
    assert s.runner.home_template == tpl


def test_a_missing_directory_is_refused_naming_the_key_and_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-template"
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[runner]\nhome_template = "{missing}"\n')
    with pytest.raises(ConfigError) as err:
        load_settings(cfg, adapter_sections=SECTIONS, environ={})
    text = str(err.value)
    assert "runner.home_template" in text and "does not exist" in text, text
    assert str(missing) in text and f"[from {cfg}]" in text, text


def test_a_missing_directory_from_the_environment_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(None, adapter_sections=SECTIONS, environ={ENV: str(tmp_path / "gone")})
    text = str(err.value)
    assert "runner.home_template" in text and "does not exist" in text, text
    assert f"[from {ENV}]" in text, text


@pytest.mark.parametrize("kind", ["file", "link", "empty", "tilde"])
def test_what_is_not_a_directory_of_its_own_is_refused(tmp_path: Path, kind: str) -> None:
    real = tmp_path / "real"
    real.mkdir()
    value, needle = {
        "file": (tmp_path / "f.json", "is not a directory"),
        "link": (tmp_path / "link", "is a symbolic link"),
        "empty": ("", "is empty"),
        "tilde": ("~/template", "'~'"),
    }[kind]
    if kind == "file":
        (tmp_path / "f.json").write_text("{}")
    if kind == "link":
        (tmp_path / "link").symlink_to(real)
    with pytest.raises(ConfigError) as err:
        load_settings(None, adapter_sections=SECTIONS, environ={ENV: str(value)})
    text = str(err.value)
    assert "runner.home_template" in text and needle in text, text
    if kind == "link":
        assert str(real) in text  # the fix names the real directory
