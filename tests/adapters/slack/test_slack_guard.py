"""The Slack request guard (adapters/slack/guard.py): Slack's signature, checked as Slack
documents it, before anything is read; a bad, stale or missing one refused and counted; and
a form body read as what it is (a slash command whose text, channel or person merely
contains the word "payload" is still the command, not an interactivity payload)."""

from __future__ import annotations

import json
import time

from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway
from slack_sdk.signature import SignatureVerifier
from slack_support import sample, send, sign, slash_form, stored, vector


def test_the_documented_signature_example_verifies() -> None:
    doc = vector("signature")
    verifier = SignatureVerifier(doc["signing_secret"], clock=_Clock(int(doc["timestamp"])))
    body = doc["body"]
    assert (
        verifier.generate_signature(timestamp=doc["timestamp"], body=body)
        == (doc["expected_signature"])
    )
    headers = {
        "x-slack-request-timestamp": doc["timestamp"],
        "x-slack-signature": doc["expected_signature"],
    }
    assert verifier.is_valid_request(body, headers)
    assert not verifier.is_valid_request(body + "x", headers)
    # and our own signing helper is the same algorithm
    ours = sign(body.encode(), secret=doc["signing_secret"], timestamp=int(doc["timestamp"]))
    assert ours["X-Slack-Signature"] == doc["expected_signature"]


class _Clock:
    def __init__(self, now: int) -> None:
        self._now = now

    def now(self) -> float:
        return float(self._now)


async def test_bad_or_stale_signatures_are_refused_and_counted(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        body = json.dumps(vector("app_mention")).encode()
        bad = sign(body, secret="not-the-secret-at-all-0000000000")
        assert (await send(app.port, body, signed=bad))[0] == 401
        stale = sign(body, timestamp=int(time.time()) - 6 * 60)
        assert (await send(app.port, body, signed=stale))[0] == 401
        assert (await send(app.port, body, signed={}))[0] == 401
        auth = "jazz_bridge_auth_failures_total"
        assert sample(app, auth, platform="slack", reason="signature") == 1
        assert sample(app, auth, platform="slack", reason="stale") == 1
        assert sample(app, auth, platform="slack", reason="missing") == 1
        assert await stored(app) == 0
        # url_verification: the challenge comes back (signed, like every request)
        status, text = await send(app.port, json.dumps(vector("url_verification")).encode())
        assert status == 200
        assert vector("url_verification")["challenge"] in text
        assert await stored(app) == 0
        assert not fake.called("chat.postMessage")


def slash(text: str, *, channel_name: str, n: int = 0) -> bytes:
    """``/jazz`` from Ada in ``#channel_name``, with every field Slack sends."""
    return slash_form(
        text,
        channel_name=channel_name,
        trigger=f"trigger-review-{n}",
        team_domain="example",
        api_app_id="A0APP00001",
    )


async def test_jazz_works_in_a_channel_whose_name_contains_payload(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        # the control: the same command in a channel with an ordinary name
        status, text = await send(app.port, slash("help", channel_name="incidents"), form=True)
        assert status == 200 and "!status" in text, (status, text)
        # the same command in #payload-team: answered the same, not a 404
        body = slash("help", channel_name="payload-team", n=1)
        status, text = await send(app.port, body, form=True)
        assert status == 200 and "!status" in text, (status, text)


async def test_jazz_with_payload_in_its_text_gets_the_unknown_command_help(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        body = slash("payload", channel_name="incidents", n=2)
        status, text = await send(app.port, body, form=True)
        assert status == 200 and "Unknown command" in text, (status, text)
