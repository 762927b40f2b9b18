"""geoloco's Python side. For now: reading outer-state checkpoints (checkpoint.py)."""
from .sync_client import DaemonRefused, SyncClient, SyncError, layout_of  # noqa: F401  (the trainer-side sync client)
