"""Streaming DiLoCo's arithmetic on the trainer's side, as geoloco-train does
it (diloco/fragments.h, inner/train), with numpy only: which inner steps a
phase has when fragments sync one per round, and how a fragment's new global
values are merged into the local replica."""

from typing import Optional

import numpy as np

__all__ = ["merge_fragment", "phase_steps"]


def _steps_through_round(k: int, fragments: int, h: int) -> int:
    """Inner steps when round k (>= 1) syncs (diloco/fragments.h)."""
    if k == 0:
        return 0
    f = max(fragments, 1)
    return (k - 1) // f * h + ((k - 1) % f + 1) * h // f


def phase_steps(round_: int, first_round: int, fragments: int, h: int) -> int:
    """Inner steps of the phase that ends with round `round_`'s sync, as
    geolocod's schedule has them (diloco/fragments.h: phase_steps)."""
    k = round_ - first_round + 1 if round_ >= first_round else 1
    return _steps_through_round(k, fragments, h) - _steps_through_round(k - 1, fragments, h)


def merge_fragment(global_values: np.ndarray, local: np.ndarray, at_sync: Optional[np.ndarray], alpha: float,
                   delayed: bool) -> np.ndarray:
    """A fragment's tensor after its round: float32 arrays in, float32 out,
    computed in float64 and rounded once, so every trainer gets the same bits.

    - delayed: θ ← θ(global) + (θ(local) − θ(at sync)), the local progress
      made while the exchange was in flight kept on top of the new anchor;
    - else θ ← α·θ(local) + (1 − α)·θ(global); α = 0 is the global values
      bit for bit."""
    if delayed:
        if at_sync is None:
            raise ValueError("the delayed merge needs the values the fragment was synced with")
        return (global_values.astype(np.float64)
                + (local.astype(np.float64) - at_sync.astype(np.float64))).astype(np.float32)
    if alpha == 0:
        return np.array(global_values, dtype=np.float32, copy=True)
    return (alpha * local.astype(np.float64) + (1.0 - alpha) * global_values.astype(np.float64)).astype(np.float32)
