"""jazz-bridge's platform-neutral core: model, store, turns, runners, progress, server, CLI."""
