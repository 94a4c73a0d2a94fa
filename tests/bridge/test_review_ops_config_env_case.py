"""Review: a run variable set as ``JAZZ_BRIDGE_RUNNER__EXTRA_ENV__<NAME>`` arrives lower-cased.

Every key is overridable as ``JAZZ_BRIDGE_<SECTION>__<KEY>``, and pydantic-settings also
takes a table's entries one variable each (``..._EXTRA_ENV__OPENAI_API_KEY=sk-...``). The
settings are case-insensitive, so the entry's name is lower-cased: the config loads without
a word, ``config check`` shows it (masked), and every run gets ``openai_api_key`` instead
of ``OPENAI_API_KEY``. Environment names are case-sensitive on Unix, so the provider key
silently does nothing. Either keep the name as written or refuse it naming the JSON form.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway

from bridge.config import load_settings
from bridge.errors import ConfigError
from bridge.plugins import load_specs

SECTIONS = {k: s.settings_model for k, s in load_specs().items()}
NAME = "JB_REVIEW_PROVIDER_KEY"


def test_a_table_entry_from_the_environment_keeps_its_name_or_is_refused() -> None:
    environ = {f"JAZZ_BRIDGE_RUNNER__EXTRA_ENV__{NAME}": "sk-review-0123456789"}
    try:
        settings = load_settings(None, adapter_sections=SECTIONS, environ=environ)
    except ConfigError:
        return  # refused, naming the variable: fine
    assert NAME in settings.runner.extra_env, (
        f"accepted, but runs would get {sorted(settings.runner.extra_env)} instead of {NAME}"
    )


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    env = gateway_env(tmp_path / "root", fake_dir, uid_range)
    env[f"JAZZ_BRIDGE_RUNNER__EXTRA_ENV__{NAME}"] = "sk-review-0123456789"
    yield env
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_the_run_sees_the_variable_under_the_name_configured(env: dict[str, str]) -> None:
    try:
        gateway = running_gateway(env)
        app_client = await gateway.__aenter__()
    except ConfigError:
        return  # refused at start: fine
    try:
        _, client = app_client
        await client.post("envcase", "hello")
        await client.wait_role("envcase", "assistant")
        [start] = client.starts("web:envcase")
        names = set(start["env"])
        assert json.loads(env["JAZZ_BRIDGE_RUNNER__EXTRA_ENV"]).keys() <= names  # JSON form ok
        assert NAME in names, f"the run got {sorted(n for n in names if 'provider' in n.lower())}"
    finally:
        await gateway.__aexit__(None, None, None)
