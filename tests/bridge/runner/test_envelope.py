"""The released Jazz CLI's (0.14.2) stdout envelope, read as it is.

Lines from the recordings of that CLI (docs/runner-contract.md, "Recordings"): it
sends no ``costKnown``, no ``artifacts`` (a ``webApp`` instead) and no failure ``code``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from bridge.runner.envelope import FREE_LOCAL_PROVIDERS, parse_envelope

# 01-plain-stdin.txt (a llamacpp agent)
PLAIN = (
    '{"ok":true,"answer":"Echo: hi there (user turns seen: 1)","costUSD":0,"tokenUsage":'
    '{"promptTokens":120,"completionTokens":8,"totalTokens":128},"toolCalls":[]}'
)
# 07-approval-argv.txt
TOOL = (
    '{"ok":true,"answer":"Tool said: {\\"workingDirectory\\":\\"<dir>\\",\\"exitCode\\":0,'
    '\\"stdout\\":\\"hello-from-tool\\",\\"stderr\\":\\"\\"}","costUSD":0,"tokenUsage":'
    '{"promptTokens":260,"completionTokens":28,"totalTokens":288},"toolCalls":[{"id":'
    '"call_fake_1","name":"execute_command","arguments":"{\\"command\\":\\"echo hello-from-tool'
    ' > tool-out.txt; echo hello-from-tool\\",\\"description\\":\\"write a marker file and say'
    ' hello\\"}"}]}'
)
# 10-fail500-stream.txt
FAIL500 = '{"ok":false,"error":"Server error (500): fake upstream exploded","costUSD":0}'


def parse(line: str, provider: str | None = None, exit_code: int = 0) -> Any:
    return parse_envelope(
        line, exit_code=exit_code, stderr_tail=[], duration_ms=1, provider=provider
    )


def with_cost(line: str, cost: object) -> str:
    env = json.loads(line)
    env["costUSD"] = cost
    return json.dumps(env)


def test_a_zero_cost_is_known_only_from_a_free_local_provider() -> None:
    """Without costKnown every released run was unpriced, and ``limits.daily_cost_usd``
    closed the gateway for the day after its first turn. Jazz prints costUSD 0 also when it
    has no price for the model: from a paid or an unknown provider it stays unknown."""
    assert {"llamacpp", "ollama"} <= FREE_LOCAL_PROVIDERS  # Jazz's LOCAL_SERVER_PROVIDERS
    for provider in [*sorted(FREE_LOCAL_PROVIDERS), "LlamaCpp"]:
        for line in (PLAIN, TOOL):
            result = parse(line, provider)
            assert result.ok and result.cost_known and result.cost_usd == 0.0, provider
    for paid in ["openai", "anthropic", "openrouter", "groq", "", None]:
        assert not parse(PLAIN, paid).cost_known, paid


def test_a_positive_cost_is_known_from_any_provider_no_amount_from_none() -> None:
    for provider in ["openai", None, "llamacpp"]:
        result = parse(with_cost(TOOL, 0.0123), provider)
        assert result.cost_known and result.cost_usd == pytest.approx(0.0123), provider
    for cost in [-1, "0.5", None, True, float("nan"), float("inf")]:
        result = parse(with_cost(PLAIN, cost), "llamacpp")
        assert not result.cost_known and result.cost_usd == 0.0, cost


@pytest.mark.parametrize(
    ("known", "cost", "provider", "expected"),
    [
        (False, 0, "llamacpp", False),  # the runner's word wins over the provider
        (False, 2.5, "openai", False),
        (True, 0, "openai", True),
        ("yes", 0, "llamacpp", False),  # not a boolean true
        (True, -3, "openai", False),
    ],
)
def test_cost_known_when_present_keeps_todays_rule(
    known: object, cost: object, provider: str, expected: bool
) -> None:
    assert parse(with_cost(PLAIN, 0), "llamacpp").cost_known  # absent: the new rule
    env = {**json.loads(PLAIN), "costUSD": cost, "costKnown": known}
    assert parse(json.dumps(env), provider).cost_known is expected


def test_the_released_failure_reads_as_failed_and_its_zero_is_priced_locally() -> None:
    result = parse(FAIL500, "llamacpp", exit_code=1)
    assert not result.ok
    assert (result.code, result.error) == ("failed", "Server error (500): fake upstream exploded")
    assert result.cost_known
    assert not parse(FAIL500, "openai", exit_code=1).cost_known


WEB_APP = {
    "id": "app-1",
    "mode": "static",
    "title": "Chart",
    "htmlPath": "/home/jazz/web-apps/app-1/index.html",
    "imagePath": "/home/jazz/web-apps/app-1/preview.png",
}


def with_web_app(web_app: object, **extra: object) -> str:
    return json.dumps({**json.loads(PLAIN), "webApp": web_app, **extra})


def test_a_web_app_becomes_an_image_and_an_html_file() -> None:
    result = parse(with_web_app(WEB_APP), "llamacpp")
    assert result.artifacts == [
        {
            "kind": "image",
            "path": "/home/jazz/web-apps/app-1/preview.png",
            "mediaType": "image/png",
            "tool": "create_web_app",
            "source": "rendered",
        },
        {
            "kind": "file",
            "path": "/home/jazz/web-apps/app-1/index.html",
            "mediaType": "text/html",
            "tool": "create_web_app",
            "source": "rendered",
        },
    ]


def test_a_web_app_image_gets_its_media_type_from_its_extension() -> None:
    app = {**WEB_APP, "imagePath": "/home/jazz/shot.jpg"}
    (image, _html) = parse(with_web_app(app)).artifacts
    assert image["mediaType"] == "image/jpeg"


@pytest.mark.parametrize("image", [None, 3, "", {"p": 1}, "absent"])
def test_only_string_paths_of_a_web_app_become_artifacts(image: object) -> None:
    app = {**WEB_APP, "imagePath": image}
    if image == "absent":
        del app["imagePath"]
    (page,) = parse(with_web_app(app)).artifacts
    assert (page["kind"], page["path"], page["mediaType"]) == ("file", app["htmlPath"], "text/html")
    for nothing in ["index.html", ["index.html"], {"htmlPath": 3, "imagePath": None}]:
        result = parse(with_web_app(nothing))
        assert result.ok and result.artifacts == [], nothing


def test_artifacts_and_a_web_app_are_both_kept_each_path_once() -> None:
    listed = [
        {
            "kind": "image",
            "path": WEB_APP["imagePath"],
            "mediaType": "image/png",
            "tool": "create_web_app",
            "source": "rendered",
        },
        {"kind": "file", "path": "/home/jazz/notes.md", "mediaType": "text/markdown"},
    ]
    result = parse(with_web_app(WEB_APP, artifacts=listed))
    paths = [a["path"] for a in result.artifacts]
    assert paths == [WEB_APP["imagePath"], "/home/jazz/notes.md", WEB_APP["htmlPath"]]


def test_the_envelope_parser_mends_lone_surrogates() -> None:
    """Half a surrogate pair in the runner's envelope is mended once, where it is read:
    Python keeps a lone surrogate as a str no UTF-8 encoder takes, and every surface (and
    SQLite, and a log file) then failed on it its own way. It is U+FFFD from the parse on."""
    line = json.dumps({"ok": True, "answer": "a \ud83d b", "tokenUsage": {}})
    result = parse_envelope(line, exit_code=0, stderr_tail=[], duration_ms=1)
    assert result.answer == "a \ufffd b"
    line = json.dumps({"ok": False, "code": "x\udc00", "error": "cut \ud83d"})
    result = parse_envelope(line, exit_code=1, stderr_tail=[], duration_ms=1)
    assert (result.code, result.error) == ("x\ufffd", "cut \ufffd")
