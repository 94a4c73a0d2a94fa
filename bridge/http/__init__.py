"""The gateway's HTTP side: one aiohttp application and what guards it.

:mod:`.server` builds the application (health, readiness, metrics, the body gates and the
buffer cap every adapter's routes share); :mod:`.connections` limits connections per peer
before a byte is read; :mod:`.peers` tells which local account a loopback peer is;
:mod:`.ops` is the operators' console (``/ops``). Adapters add their own routes.
"""
