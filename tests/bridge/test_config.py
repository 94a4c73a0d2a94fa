"""Configuration: TOML and environment, bad keys refused by name (and by where they were
set), secrets masked, addresses and tokens checked with the rest, and the rules serve starts
by applied alike by serve, config check and doctor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from bridge import logs, rules
from bridge.cli import EXIT_CONFIG, EXIT_ERROR
from bridge.config import MIN_TOKEN_CHARS, load_settings
from bridge.errors import AdapterError, ConfigError
from bridge.plugins import load_specs
from bridge.ports import AdapterSpec

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
        ("[limits]\nmax_runs_per_user = -1\n", {}, "limits.max_runs_per_user"),
        ("", {"JAZZ_BRIDGE_LIMITS__MAX_RUNS_PER_TEAM": "two"}, "limits.max_runs_per_team"),
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


def test_config_check_reports_bad_values_with_the_config_exit_code(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[server]\nport = 70000\n[web]\ntoken = 5\n")
    out = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "config", "check", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode == EXIT_CONFIG
    assert "server.port" in out.stderr and "web.token" in out.stderr


def test_the_example_config_is_valid() -> None:
    example = Path(__file__).resolve().parents[2] / "deploy" / "config.example.toml"
    s = load_settings(example, adapter_sections=SECTIONS, environ={})
    assert s.root == Path("/srv/jazz-bridge")


def test_a_mistyped_secret_key_never_shows_its_value(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[slack]\nbot_tokne = "xoxb-1111-2222-secretvalue"\n')
    environ = {"JAZZ_BRIDGE_TELEGRAM__TOKN": "123456:ABCDEFsecretTOKEN"}
    with pytest.raises(ConfigError) as info:
        load_settings(cfg, adapter_sections=SECTIONS, environ=environ)
    message = str(info.value)
    assert "slack.bot_tokne: unknown key" in message and "telegram.tokn: unknown key" in message
    assert "secretvalue" not in message and "secretTOKEN" not in message


def test_environment_names_that_match_no_setting_are_refused_by_name() -> None:
    environ = {
        "JAZZ_BRIDGE_ISOLATON": "on",
        "JAZZ_BRIDGE_TELEGRAM_TOKEN": "123:abc",  # one underscore short
        "JAZZ_BRIDGE_CONFIG": "",  # the config file's own variable is not a setting
    }
    with pytest.raises(ConfigError) as info:
        load_settings(None, adapter_sections=SECTIONS, environ=environ)
    message = str(info.value)
    assert "JAZZ_BRIDGE_ISOLATON: no setting 'isolaton' (did you mean JAZZ_BRIDGE_ISOLATION?)" in (
        message
    )
    assert (
        "JAZZ_BRIDGE_TELEGRAM_TOKEN: no setting 'telegram_token' (did you mean "
        "JAZZ_BRIDGE_TELEGRAM__TOKEN?)" in message
    )
    assert "123:abc" not in message


def test_a_mistyped_section_or_key_suggests_the_whole_variable() -> None:
    environ = {
        "JAZZ_BRIDGE_SLACK_BOT_TOKN": "xoxb-1",
        "JAZZ_BRIDGE_TELEGRM__TOKEN": "1:a",
        "JAZZ_BRIDGE_SERVR__PORT": "9000",
    }
    with pytest.raises(ConfigError) as info:
        load_settings(None, adapter_sections=SECTIONS, environ=environ)
    message = str(info.value)
    assert "(did you mean JAZZ_BRIDGE_SLACK__BOT_TOKEN?)" in message
    assert "(did you mean JAZZ_BRIDGE_TELEGRAM__TOKEN?)" in message
    assert "(did you mean JAZZ_BRIDGE_SERVER__PORT?)" in message


def test_config_check_masks_every_extra_env_value_and_url_credentials(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[runner]\nextra_env = { OPENAI_API_KEY = "sk-proj-0123456789", LEVEL = "dbg" }\n'
        'daemon_url = "http://jazz:daemon-pass@127.0.0.1:4747"\n'
    )
    out = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "config", "check", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HTTPS_PROXY": "http://me:proxy-pass@proxy:3128"},
    )
    assert out.returncode == 0, out.stderr
    for secret in ("sk-proj-0123456789", "dbg", "daemon-pass", "proxy-pass"):
        assert secret not in out.stdout + out.stderr
    runner = json.loads(out.stdout)["runner"]
    assert runner["extra_env"] == {"OPENAI_API_KEY": "**********", "LEVEL": "**********"}
    assert runner["daemon_url"] == "http://jazz:***@127.0.0.1:4747"
    # and the log masker knows them: not one reaches a log line either
    settings = load_settings(cfg, adapter_sections=SECTIONS, environ={})
    masker = logs.SecretMasker(logs.secret_values(settings, environ={}))
    line = masker.mask("run env OPENAI_API_KEY=sk-proj-0123456789 via http://u:pw@h/ daemon-pass")
    assert line == "run env OPENAI_API_KEY=*** via http://u:***@h/ ***"


def test_a_list_given_as_plain_text_in_the_environment_is_named() -> None:
    environ = {
        "JAZZ_BRIDGE_SLACK__ALLOWED_TEAMS": "T0123",
        "JAZZ_BRIDGE_SLACK__BOT_TOKEN": "xoxb-1",
    }
    with pytest.raises(
        ConfigError, match=r"JAZZ_BRIDGE_SLACK__ALLOWED_TEAMS: a list or table"
    ) as info:
        load_settings(None, adapter_sections=SECTIONS, environ=environ)
    assert "BOT_TOKEN" not in str(info.value)


def test_a_whole_section_given_as_plain_text_in_the_environment_is_named() -> None:
    with pytest.raises(ConfigError, match=r": JAZZ_BRIDGE_SERVER: a list or table"):
        load_settings(None, adapter_sections=SECTIONS, environ={"JAZZ_BRIDGE_SERVER": "notjson"})


def test_command_line_errors_are_one_line_and_exit_2_or_78_for_the_config(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    runs = [
        (["init", "--root", str(blocker / "x")], {}, EXIT_ERROR),
        (["config", "check"], {"JAZZ_BRIDGE_SLACK__ALLOWED_TEAMS": "T0123"}, EXIT_CONFIG),
        (["homes", "archive", "web:x"], {"JAZZ_BRIDGE_ROOT": str(tmp_path / "nope")}, EXIT_ERROR),
    ]
    for args, extra, code in runs:
        done = subprocess.run(
            [sys.executable, "-m", "bridge.cli", *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin", "JAZZ_BRIDGE_ISOLATION": "off", **extra},
        )
        assert done.returncode == code, (args, done.stderr)
        assert done.stderr.startswith("jazz-bridge: error:"), (args, done.stderr)
        assert "Traceback" not in done.stderr, (args, done.stderr)
    assert not (tmp_path / "nope").exists()  # a wrong root is named, not made


class MatrixSettings(BaseModel):
    """A third party's section with a field that has no default."""

    model_config = ConfigDict(extra="forbid")
    homeserver: str


def _no_adapter(ctx: Any) -> Any:
    raise AssertionError("never started in these tests")


MATRIX = AdapterSpec("matrix", "matrix", MatrixSettings, _no_adapter, lambda s: s is not None)
CLASH = AdapterSpec("logger", "log", MatrixSettings, _no_adapter, lambda s: True)


def test_a_third_party_section_with_required_fields_is_off_until_configured() -> None:
    sections = {**SECTIONS, "matrix": MatrixSettings}
    assert load_settings(None, adapter_sections=sections, environ={}).section("matrix") is None
    environ = {"JAZZ_BRIDGE_MATRIX__HOMESERVER": "https://matrix.example.org"}
    configured = load_settings(None, adapter_sections=sections, environ=environ)
    assert configured.section("matrix").homeserver == "https://matrix.example.org"


def test_a_broken_or_clashing_adapter_plugin(caplog: pytest.LogCaptureFixture) -> None:
    def ep(name: str, value: str) -> EntryPoint:
        return EntryPoint(name=name, value=value, group="jazz_bridge.adapters")

    # one that cannot be imported is skipped (every other command still works), loudly
    found = load_specs([ep("matrix", f"{__name__}:MATRIX"), ep("broken", "no_such_mod:SPEC")])
    assert sorted(found) == ["matrix"]
    assert "adapter broken (no_such_mod:SPEC) is not loaded" in caplog.text
    # one that claims a section of the gateway's own is refused, naming it
    with pytest.raises(AdapterError, match=r"claims \[log\], a section of the gateway's own"):
        load_specs([ep("logger", f"{__name__}:CLASH")])


def _cli(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={
            "PATH": "/usr/bin:/bin",
            "JAZZ_BRIDGE_ISOLATION": "off",
            "JAZZ_BRIDGE_ROOT": str(tmp_path / "root"),
            "JAZZ_BRIDGE_SERVER__PORT": "0",
            **env,
        },
    )


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"JAZZ_BRIDGE_SERVER__HOST": "0.0.0.0"}, "the web chat is bound to 0.0.0.0, beyond"),
        ({"JAZZ_BRIDGE_WEB__ENABLED": "false"}, "no adapter is enabled: "),
    ],
)
def test_config_check_and_doctor_refuse_what_serve_refuses(
    tmp_path: Path, env: dict[str, str], says: str
) -> None:
    served = _cli(tmp_path, env, "serve")
    assert served.returncode == EXIT_CONFIG, served.stderr[-2000:]
    refusal = served.stderr.strip().splitlines()[-1]
    assert refusal.startswith(f"jazz-bridge: error: {says}"), refusal
    assert not (tmp_path / "root").exists()  # refused before it made anything
    checked = _cli(tmp_path, env, "config", "check")
    assert checked.returncode == EXIT_CONFIG, checked.stdout + checked.stderr
    assert checked.stderr.strip().splitlines()[-1] == refusal
    doctor = _cli(tmp_path, env, "doctor")
    assert doctor.returncode == 1
    message = refusal.removeprefix("jazz-bridge: error: ")
    assert f"FAIL configuration is valid -> {message}" in doctor.stdout.splitlines()
    # with the fix the refusal names, config check passes
    fixed = {
        **env,
        "JAZZ_BRIDGE_WEB__ENABLED": "true",
        "JAZZ_BRIDGE_WEB__TOKEN": "a-web-token-0123456789",
    }
    assert _cli(tmp_path, fixed, "config", "check").returncode == 0


def _must_have_a_room(settings: Any, core: Any) -> list[str]:
    return [] if settings.room else ["matrix.room is required (JAZZ_BRIDGE_MATRIX__ROOM)"]


class RoomSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool = False
    room: str = ""


ROOMS = AdapterSpec(
    "matrix", "matrix", RoomSettings, _no_adapter, lambda s: s.enabled, check=_must_have_a_room
)


def test_an_adapter_is_held_to_its_rules_only_when_enabled() -> None:
    specs = {**load_specs(), "matrix": ROOMS}
    sections = {k: s.settings_model for k, s in specs.items()}
    off = load_settings(None, adapter_sections=sections, environ={})
    assert rules.problems(off, specs) == []
    on = {"JAZZ_BRIDGE_MATRIX__ENABLED": "true"}
    broken = load_settings(None, adapter_sections=sections, environ=on)
    assert rules.problems(broken, specs) == ["matrix.room is required (JAZZ_BRIDGE_MATRIX__ROOM)"]
    with pytest.raises(AdapterError) as refused:
        rules.require(broken, specs)
    assert str(refused.value) == "matrix.room is required (JAZZ_BRIDGE_MATRIX__ROOM)"
    fixed = load_settings(
        None, adapter_sections=sections, environ={**on, "JAZZ_BRIDGE_MATRIX__ROOM": "!ops"}
    )
    rules.require(fixed, specs)


def test_a_platform_configured_without_its_token_is_a_warning_everywhere(tmp_path: Path) -> None:
    """The token switches an adapter on: without it the section stays off, and serve, config
    check and doctor all say so (a warning: none of them fails for it)."""
    env = {"JAZZ_BRIDGE_TELEGRAM__ALLOWED_USERS": "[1]"}
    warning = (
        "telegram is configured (allowed_users) but has no token: set telegram.token "
        "(JAZZ_BRIDGE_TELEGRAM__TOKEN); it stays off"
    )
    checked = _cli(tmp_path, env, "config", "check")
    assert checked.returncode == 0, checked.stderr
    assert warning in checked.stderr and "WARNING" in checked.stderr
    doctor = _cli(tmp_path, env, "doctor")
    assert f"WARN configured sections are on -> {warning}" in doctor.stdout  # in its report
    # serve says it before anything else (here it then refuses: no adapter left on)
    served = _cli(tmp_path, {**env, "JAZZ_BRIDGE_WEB__ENABLED": "false"}, "serve")
    assert served.returncode == EXIT_CONFIG and warning in served.stderr
    slack = {"JAZZ_BRIDGE_SLACK__ALLOWED_TEAMS": '["T1"]', "JAZZ_BRIDGE_SLACK__MODE": "socket"}
    loaded = load_settings(None, adapter_sections=SECTIONS, environ=slack)
    assert rules.warnings(loaded, load_specs()) == [
        "slack is configured (mode, allowed_teams) but has no bot token: set slack.bot_token "
        "(JAZZ_BRIDGE_SLACK__BOT_TOKEN); it stays off"
    ]


def test_no_warning_for_a_section_left_at_its_defaults_or_switched_off() -> None:
    specs = load_specs()
    example = Path(__file__).resolve().parents[2] / "deploy" / "config.example.toml"
    spelled_out = load_settings(example, adapter_sections=SECTIONS, environ={})
    assert rules.warnings(spelled_out, specs) == []  # every key at its default: not configured
    off = {"JAZZ_BRIDGE_TELEGRAM__ALLOWED_USERS": "[1]", "JAZZ_BRIDGE_TELEGRAM__ENABLED": "false"}
    assert rules.warnings(load_settings(None, adapter_sections=SECTIONS, environ=off), specs) == []
    on = {"JAZZ_BRIDGE_TELEGRAM__ALLOWED_USERS": "[1]", "JAZZ_BRIDGE_TELEGRAM__TOKEN": "1:a"}
    assert rules.warnings(load_settings(None, adapter_sections=SECTIONS, environ=on), specs) == []


# -- where a value was set -------------------------------------------------------------------


def test_a_bad_value_names_the_variable_or_the_file_that_set_it(tmp_path: Path) -> None:
    """A bad setting is named with where it was set: the variable that overrides the file, or the
    file. Before, ``port = 8080`` in the file and ``JAZZ_BRIDGE_SERVER__PORT=abc`` read
    "invalid configuration (file good.toml, environment JAZZ_BRIDGE_*): server.port ... (got
    'abc')", and the operator looked for 'abc' in a file that did not hold it."""
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


NAME = "JB_TEST_PROVIDER_KEY"


def test_a_table_entry_from_the_environment_keeps_its_name_or_is_refused() -> None:
    """A run variable set as ``JAZZ_BRIDGE_RUNNER__EXTRA_ENV__<NAME>``: the settings are
    case-insensitive, so the table entry's name was lower-cased; the config loaded without
    a word, ``config check`` showed it (masked), and every run got ``openai_api_key``
    instead of ``OPENAI_API_KEY``. Either keep the name as written or refuse it naming the
    JSON form (the run's side: tests/bridge/engine/test_turns.py)."""
    environ = {f"JAZZ_BRIDGE_RUNNER__EXTRA_ENV__{NAME}": "sk-runenv-0123456789"}
    try:
        settings = load_settings(None, adapter_sections=SECTIONS, environ=environ)
    except ConfigError:
        return  # refused, naming the variable: fine
    assert NAME in settings.runner.extra_env, (
        f"accepted, but runs would get {sorted(settings.runner.extra_env)} instead of {NAME}"
    )


# -- platform addresses and hand-set tokens --------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("JAZZ_BRIDGE_TELEGRAM__API_URL", "http://[::1/bot", "Invalid IPv6 URL"),
        ("JAZZ_BRIDGE_TELEGRAM__FILE_URL", "ftp://files.example/bot", "http:// or https://"),
        ("JAZZ_BRIDGE_SLACK__API_URL", "slack.com/api/", "http:// or https://"),
        ("JAZZ_BRIDGE_SLACK__API_URL", "https://slack.com:api/", "not a valid address"),
        ("JAZZ_BRIDGE_RUNNER__DAEMON_URL", "http:///runs", "with a host"),
    ],
)
def test_a_bad_address_is_named_with_its_key(key: str, value: str, why: str) -> None:
    """Platform and daemon addresses are checked with the configuration: a typo is named by
    ``config check`` with its key, not found as a traceback (or a silent failure to connect)
    when the client is made."""
    sections = {name: spec.settings_model for name, spec in load_specs().items()}
    with pytest.raises(ConfigError) as caught:
        load_settings(None, adapter_sections=sections, environ={key: value})
    dotted = key.removeprefix("JAZZ_BRIDGE_").replace("__", ".").lower()
    assert dotted in str(caught.value) and why in str(caught.value), caught.value


def test_the_defaults_and_local_addresses_are_taken() -> None:
    sections = {name: spec.settings_model for name, spec in load_specs().items()}
    env = {
        "JAZZ_BRIDGE_TELEGRAM__API_URL": "http://[::1]:8081/bot",
        "JAZZ_BRIDGE_SLACK__API_URL": "http://127.0.0.1:9999/api/",
    }
    assert load_settings(None, adapter_sections=sections, environ=env) is not None
    assert load_settings(None, adapter_sections=sections, environ={}) is not None


BOT_TOKEN = "123456:AAE-real-looking-bot-token_xyz"


def test_an_unreadable_platform_address_is_named_not_a_traceback(tmp_path: Path) -> None:
    """A platform address the client library cannot read is a clear error, not a trace.

    ``telegram.api_url = "http://[::1/bot"`` (an IPv6 address missing its closing bracket):
    the Telegram library raised a ValueError nothing expected, and ``jazz-bridge serve`` died
    with a 40-line Python traceback (exit status 1) that named neither Telegram nor the setting.
    Now the address is checked with the configuration (``config check`` names it too); an
    adapter failing at start in a way nobody foresaw is still one line (``app._adapter_step``)."""
    env = {
        "PATH": os.environ["PATH"],
        "JAZZ_BRIDGE_ROOT": str(tmp_path / "root"),
        "JAZZ_BRIDGE_SERVER__PORT": "0",
        "JAZZ_BRIDGE_ISOLATION": "off",
        "JAZZ_BRIDGE_TELEGRAM__TOKEN": BOT_TOKEN,
        "JAZZ_BRIDGE_TELEGRAM__MODE": "polling",
        "JAZZ_BRIDGE_TELEGRAM__ALLOW_EVERYONE": "true",
        "JAZZ_BRIDGE_TELEGRAM__API_URL": "http://[::1/bot",
    }
    done = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "serve"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = done.stderr.strip().splitlines()
    print(f"\nexit status {done.returncode}; last line: {lines[-1] if lines else ''!r}")
    assert not [line for line in lines if line.startswith("Traceback")], done.stderr[-3000:]
    assert done.returncode == EXIT_CONFIG
    error = done.stderr[done.stderr.index("jazz-bridge: error: ") :]
    assert "telegram.api_url" in error and "Invalid IPv6 URL" in error, error
    assert BOT_TOKEN not in done.stderr


@pytest.mark.parametrize("key", ["JAZZ_BRIDGE_WEB__TOKEN", "JAZZ_BRIDGE_OPS__TOKEN"])
def test_a_short_token_is_refused_naming_the_key_not_the_token(key: str) -> None:
    """A hand-set token too short to be a secret is refused with a line that says so.

    ``web.token = "x"`` (or ``ops.token``) was taken: a chat or the operators' view guarded by
    a password anyone guesses. ``config check`` and ``serve`` now refuse it, naming the key
    and its length, never the token."""
    short = "pa55word"
    sections = {name: spec.settings_model for name, spec in load_specs().items()}
    with pytest.raises(ConfigError) as caught:
        load_settings(None, adapter_sections=sections, environ={key: short})
    text = str(caught.value)
    section = key.removeprefix("JAZZ_BRIDGE_").split("__")[0].lower()
    assert f"{section}.token" in text and f"is {len(short)} characters" in text, text
    assert short not in text, "the token itself was printed"
    settings = load_settings(None, adapter_sections=sections, environ={key: "k" * MIN_TOKEN_CHARS})
    assert settings is not None
