"""Platform adapters; each finds the core through bridge's public model and ports."""
