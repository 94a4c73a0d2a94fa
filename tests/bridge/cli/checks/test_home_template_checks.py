"""``doctor``'s check of ``runner.home_template``: what a new home is seeded from."""

from __future__ import annotations

import json
from pathlib import Path

from bridge.cli.checks import home_template_checks


def template(tmp_path: Path, *, agent: str | None = "default", config: str | None = "{}") -> Path:
    tpl = tmp_path / "template"
    (tpl / "agents").mkdir(parents=True)
    if config is not None:
        (tpl / "config.json").write_text(config)
    if agent is not None:
        (tpl / "agents" / f"{agent}.json").write_text(json.dumps({"id": agent}))
    return tpl


def test_unset_is_a_warning_only_for_the_released_cli() -> None:
    [check] = home_template_checks(None, "default", released_cli=True)
    assert check.ok and check.warn
    assert check.line().startswith(
        "WARN runner.home_template is not set: the released Jazz CLI fails every run in a new "
        "home with 'No agent found' -> "
    )
    assert home_template_checks(None, "default", released_cli=False) == []


def test_a_complete_template_is_ok(tmp_path: Path) -> None:
    tpl = template(tmp_path)
    [check] = home_template_checks(tpl, "default", released_cli=True)
    assert check.ok and not check.warn
    assert check.line() == f"OK   home template {tpl} has config.json and agents/default.json"


def test_what_is_missing_is_named(tmp_path: Path) -> None:
    tpl = template(tmp_path, agent="other", config=None)
    [check] = home_template_checks(tpl, "default", released_cli=False)
    assert check.ok and check.warn
    assert "config.json (no such file)" in check.fix
    assert "agents/default.json (no such file)" in check.fix


def test_a_config_that_is_not_json_and_links_are_named(tmp_path: Path) -> None:
    tpl = template(tmp_path, config="{not json")
    (tpl / "agents" / "extra.json").symlink_to("/etc/passwd")
    checks = home_template_checks(tpl, "default", released_cli=True)
    assert [c.warn for c in checks] == [True, True]
    assert "config.json (not valid JSON" in checks[0].fix
    assert "agents/extra.json" in checks[1].fix and "never followed" in checks[1].fix
