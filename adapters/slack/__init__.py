"""The Slack adapter: teams chat with Jazz agents in channels, threads and DMs.

slack-bolt's ``AsyncApp`` mounted at ``POST /slack/events`` on the gateway's aiohttp server
(or Socket Mode), the real ``AsyncWebClient`` for replies.
"""

from .spec import SPEC, SlackSettings

__all__ = ["SPEC", "SlackSettings"]
