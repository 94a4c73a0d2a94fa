"""Files, modes, accounts and process identities for jazz-bridge's conversation homes.

This package knows nothing about chat: it imports nothing of ``bridge`` or ``adapters``.
"""
