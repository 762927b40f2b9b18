"""The part of geoloco.torch.DiLoCo that keeps a trainer's place across a
restart: state_dict()/load_state_dict(), and the file at `state_path` that
rank 0 writes after every sync and a restarted trainer resumes from. A
mixin: DiLoCo provides the collectives (_share), the client (next_round)
and the optimizer."""

import os
from typing import Any, Dict

import torch

__all__ = ["WrapperState"]


class WrapperState:
    def state_dict(self) -> Dict[str, Any]:
        """What a restarted trainer needs to keep its place, taken at a sync
        (right after a step() that synced, or before the first step): the
        round it syncs next, the inner steps taken (for the loop's data
        position and schedule), the inner optimizer's state and the layout.
        A restarted trainer is welcomed at a round's start, so a state taken
        inside a phase would pair moments with steps it no longer has: that is
        refused. With `state_path` the wrapper saves it after every sync."""
        if not self._at_sync_point:
            raise ValueError("state_dict() is taken at a sync: call it right after the step() that synced "
                             "(diloco.rounds changes) or before the first step, or pass state_path=")
        return self._state(self._state_round, self._state_steps)

    def _state(self, round_, steps):
        return {"format": "geoloco.torch/1", "round": round_, "steps": steps,
                "optimizer": self.optimizer.state_dict(),
                "layout": [(name, tuple(p.shape)) for name, p in self._params]}

    def load_state_dict(self, state: Dict[str, Any]) -> bool:
        """Restores a state_dict() when it belongs to the round this trainer
        is welcomed at (the job did not move on without it); before start()
        it waits for the welcome. Returns True when restored; otherwise the
        optimizer keeps its fresh state, as geoloco-train starts with zero
        moments on an anchor its saved state was not trained towards."""
        if self._mode is None:
            self._pending_state = state
            return False
        return self._apply_state(state)

    def _apply_state(self, state):
        layout = [(name, tuple(p.shape)) for name, p in self._params]
        welcome = self._share(self.next_round if self._rank == 0 else None)
        if state.get("format") != "geoloco.torch/1" or [(n, tuple(s)) for n, s in state["layout"]] != layout:
            raise ValueError("the saved state is not this model's (another layout or format)")
        if state["round"] != welcome:
            print("geoloco.torch: saved state of round %s not restored: this trainer is welcomed at round %s"
                  % (state["round"], welcome), flush=True)
            return False
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state["steps"])
        self._remember_state(welcome)
        self.resumed = welcome
        return True

    def _resume(self):
        self._remember_state(self._share(self.next_round if self._rank == 0 else None))
        state = self._pending_state
        if state is None and self.state_path and os.path.exists(self.state_path):
            # Rank 0 reads the file and every rank gets its contents.
            state = self._share(torch.load(self.state_path, map_location="cpu") if self._rank == 0 else None)
        self._pending_state = None
        if state is not None:
            self._apply_state(state)

    def _remember_state(self, next_round):
        self._state_round = next_round
        self._state_steps = self.steps

    def _save_state(self, write=True):
        """After a sync: the state tagged with the round synced next; rank 0
        writes it to state_path (`write`)."""
        self._at_sync_point = True
        self._remember_state(self._share(self.next_round if self._rank == 0 else None))
        if write and self.state_path and self._rank == 0:
            self._write_state(self.state_dict())

    def _write_state(self, state):
        tmp = self.state_path + ".tmp"
        torch.save(state, tmp)
        os.replace(tmp, self.state_path)  # whole or not at all
