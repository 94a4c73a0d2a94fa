"""Review: a secret inside a structured ``extra`` field is masked only when JSON leaves it as is.

``SecretMasker._mask_value`` turns a dict/list extra into ``json.dumps(value)`` (ASCII
escapes on) and then looks for each secret in that text. A secret holding a character JSON
escapes (``"``, ``\\``, any non-ASCII letter: common in generated passwords and in
passphrases) no longer appears verbatim, so it is written to the log; a log reader's JSON
decoder turns the escapes back into the secret.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest

from bridge.cli import setup_logging
from bridge.config import load_settings
from bridge.logs import stop_writer
from bridge.plugins import load_specs

SECTIONS = {k: s.settings_model for k, s in load_specs().items()}
SECRETS = ['Zq"7k-Lm9pX2-provider', "Zq\\7k-Lm9pX2-backslash", "pässwort-für-den-proxy"]


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    stop_writer()
    root.handlers[:] = handlers
    root.setLevel(level)


class Stream(io.StringIO):
    def isatty(self) -> bool:
        return False


@pytest.mark.parametrize("secret", SECRETS, ids=["quote", "backslash", "non-ascii"])
def test_a_secret_in_a_nested_extra_is_masked(monkeypatch: pytest.MonkeyPatch, secret: str) -> None:
    err = Stream()
    monkeypatch.setattr(sys, "stderr", err)
    env = {"JAZZ_BRIDGE_RUNNER__EXTRA_ENV": json.dumps({"PROVIDER_KEY": secret})}
    setup_logging(load_settings(None, adapter_sections=SECTIONS, environ=env))
    logging.getLogger("jazz_bridge.review").info(
        "starting run", extra={"runner_env": {"PROVIDER_KEY": secret}}
    )
    logging.getLogger("jazz_bridge.review").info("flat", extra={"key": secret})
    lines = [json.loads(line) for line in err.getvalue().splitlines() if line.strip()]
    by_msg = {r["msg"]: r for r in lines}
    assert secret not in str(by_msg["flat"]["key"])  # a flat extra is masked
    nested = by_msg["starting run"]["runner_env"]
    decoded = json.loads(nested) if isinstance(nested, str) else nested
    assert secret not in _strings(decoded), f"logged: {nested!r}"


def _strings(value: object) -> str:
    """Every string inside ``value`` (as a reader of the decoded log line sees them)."""
    if isinstance(value, dict):
        return " ".join(_strings(v) for v in (*value.keys(), *value.values()))
    if isinstance(value, list):
        return " ".join(_strings(v) for v in value)
    return str(value)
