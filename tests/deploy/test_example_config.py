"""deploy/config.example.toml documents every key of every section, each with a comment.

The keys come from the code, not from a list kept here: the core's sections
(``bridge.config.CoreSettings``) and every adapter spec's ``settings_model`` found through
the entry points. A key added without documenting it in the example fails this test, and
so does a documented key the code no longer has. A key may be set (``key = value``) or shown
commented out (``# key = value``, for optional values and secrets); either way it needs an
explanation: a comment on its line, or a comment above the group of keys it belongs to
(the keys right below the comment, up to the next blank line).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from pydantic import BaseModel

from bridge.config import CoreSettings, load_settings
from bridge.plugins import load_specs

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "config.example.toml"
SECTION = re.compile(r"^\[([a-z_]+)\]\s*(#.*)?$")
KEY = re.compile(r"^(#\s*)?([a-z_][a-z0-9_]*)\s*=\s*(.*)$")


def code_keys() -> dict[str, set[str]]:
    """Section ("" for the top level) -> the keys the code accepts."""
    keys: dict[str, set[str]] = {"": set()}
    for name, field in CoreSettings.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            keys[name] = set(kind.model_fields)
        else:
            keys[""].add(name)
    for section, spec in load_specs().items():
        keys[section] = set(spec.settings_model.model_fields)
    return keys


def documented_keys(text: str) -> tuple[dict[str, set[str]], list[str]]:
    """Section -> keys shown (set or commented out); and the keys with no explanation."""
    keys: dict[str, set[str]] = {"": set()}
    section = ""
    unexplained: list[str] = []
    previous_is_prose = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            previous_is_prose = False
            continue
        if m := SECTION.match(line):
            section = m.group(1)
            keys.setdefault(section, set())
            previous_is_prose = False
            continue
        if m := KEY.match(line):
            _commented, name, rest = m.groups()
            keys[section].add(name)
            inline = "#" in _after_value(rest)
            if not (inline or previous_is_prose):
                unexplained.append(f"{section or '(top level)'}.{name}")
            continue  # a comment above a group of keys explains all of them
        previous_is_prose = line.startswith("#")
    return keys, unexplained


def _after_value(rest: str) -> str:
    """What follows a TOML value on its line (strings may contain '#')."""
    in_string: str | None = None
    for i, ch in enumerate(rest):
        if in_string:
            if ch == in_string:
                in_string = None
        elif ch in "\"'":
            in_string = ch
        elif ch == "#":
            return rest[i:]
    return ""


def test_every_key_of_every_section_is_in_the_example_with_a_comment() -> None:
    want = code_keys()
    shown, unexplained = documented_keys(EXAMPLE.read_text())
    missing = sorted(
        f"{section or '(top level)'}.{key}"
        for section, keys in want.items()
        for key in keys - shown.get(section, set())
    )
    assert not missing, f"keys missing from {EXAMPLE.name} (document them there): {missing}"
    stale = sorted(
        f"{section or '(top level)'}.{key}"
        for section, keys in shown.items()
        for key in keys - want.get(section, set())
    )
    assert not stale, f"{EXAMPLE.name} shows keys the code does not have: {stale}"
    assert not unexplained, f"keys without a comment in {EXAMPLE.name}: {unexplained}"


def test_the_example_loads_and_its_commented_out_keys_are_valid_too(tmp_path: Path) -> None:
    specs = load_specs()
    sections = {k: s.settings_model for k, s in specs.items()}
    settings = load_settings(EXAMPLE, adapter_sections=sections, environ={})
    assert settings.root == Path("/srv/jazz-bridge")
    # uncomment every "# key = value" line: the documented values must be accepted as well
    uncommented = "\n".join(
        re.sub(r"^#\s*(?=[a-z_][a-z0-9_]*\s*=)", "", line)
        for line in EXAMPLE.read_text().splitlines()
    )
    tomllib.loads(uncommented)
    # a directory the loader requires to exist (runner.home_template): one that exists here
    template = tmp_path / "home-template"
    template.mkdir()
    uncommented, found = re.subn(
        r'(?m)^home_template = ".*?"', f'home_template = "{template}"', uncommented
    )
    assert found == 1
    full = tmp_path / "full.toml"
    full.write_text(uncommented)
    load_settings(full, adapter_sections=sections, environ={})
