"""The local web chat: a page at ``/`` and a JSON API, the gateway's embedded default.

It needs no credentials, so ``jazz-bridge serve`` does real work on a fresh machine, and it
is the surface the core's end-to-end tests drive.
"""

from .spec import SPEC, WebSettings

__all__ = ["SPEC", "WebSettings"]
