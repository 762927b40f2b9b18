"""geoloco's Python side. For now: reading outer-state checkpoints (checkpoint.py)."""
