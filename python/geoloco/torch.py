"""DiLoCo for a PyTorch training loop: wrap the model and its inner
optimizer, keep the loop.

    import geoloco.torch

    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    with geoloco.torch.DiLoCo(model, opt) as diloco:   # GEOLOCO_SOCKET, GEOLOCO_JOB
        for x, y in batches:
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if diloco.step(tokens=len(x), loss=loss.item()):
                break                                   # the job is over

The wrapper talks to the site's daemon (geolocod) through the local sync
protocol (geoloco.sync_client) and does what geoloco-train does:

- the job's first anchor: this trainer's initialization when the job is new,
  else the committed anchor, loaded into the model;
- the phases the job file sets (the daemon's WELCOME carries them): H inner
  steps, or a number of seconds (rank 0 decides, every rank follows);
- at each phase's end SYNC with the phase's tokens, mean loss and the
  trainer's own timing, then the new anchor from RESULT;
- Streaming DiLoCo: one fragment per round, its exchange overlapping τ steps,
  then the merge θ_f ← α·θ_f(local) + (1 − α)·θ_f(global), or the delayed
  merge θ_f ← θ_f(global) + (θ_f(local) − θ_f(at sync)), in float64 rounded
  once, the same bits as geoloco-train;
- plain DiLoCo trains in place: on rank 0 every CPU float32 parameter is a
  view of the job's shared memory, so nothing is copied per round; the inner
  optimizer and its state are the user's and carry across rounds.

Under torchrun (torch.distributed initialized, DDP inside the site), rank 0
talks to the daemon and every other rank receives the new parameters (and
each decision) by broadcast over the process group, so the replicas stay
identical. Only rank 0 needs the socket.
"""

import os
import time
from typing import Any, Optional

import torch
import torch.distributed as dist

from .streaming import merge_fragment, phase_steps
from .reconnect import FINISHED, wait_for_daemon
from .sync_client import PhasePlan, SyncClient, SyncError, layout_of

from .torch_checkpoint import load_checkpoint, save_parameters, unwrap
from .torch_group import SiteGroup, leave_process_group
from .torch_state import WrapperState

__all__ = ["DiLoCo", "leave_process_group", "load_checkpoint", "phase_steps", "save_parameters", "unwrap"]


class _Rejoined(Exception):
    """Raised on every rank when rank 0 lost its daemon and was welcomed
    again, or (`finished`) found the job finished meanwhile, its final
    anchor loaded from the checkpoint."""

    def __init__(self, finished):
        super().__init__("finished" if finished else "rejoined")
        self.finished = finished


class DiLoCo(SiteGroup, WrapperState):
    """See the module docstring. `job` and `socket` default to GEOLOCO_JOB
    and GEOLOCO_SOCKET (set by geolocod when it starts the trainer).
    `sync_every`, `overlap` and `alpha` are for a daemon that sends no phase
    plan; with one, they must agree with it. `timeout`: seconds to wait for
    the daemon's answers, `connect_timeout` for its socket to appear.
    `reconnect`: seconds to wait for a daemon that went away mid-job (a
    restart) before giving up; 0: give up at once. A job the daemon ended
    (cancelled, finished, failed: its folder's status.json says so) is not
    waited for. `process_group`: the site's group (default: the
    default group when torch.distributed is initialized). `state_path`: a
    file where rank 0 keeps the wrapper's state after every sync (see
    state_dict()), and from which a restarted trainer resumes."""

    def __init__(self, model: torch.nn.Module, inner_optimizer: torch.optim.Optimizer, *, job: Optional[str] = None,
                 socket: Optional[str] = None, timeout: float = 600.0, connect_timeout: float = 30.0,
                 reconnect: float = 300.0, sync_every: Optional[int] = None, overlap: Optional[int] = None,
                 alpha: Optional[float] = None, process_group: Optional[Any] = None,
                 state_path: Optional[str] = None) -> None:
        self.model = model
        self.optimizer = inner_optimizer
        self.job = job if job is not None else os.environ.get("GEOLOCO_JOB")
        self.socket = socket if socket is not None else os.environ.get("GEOLOCO_SOCKET")
        self.timeout = float(timeout)
        self.connect_timeout = float(connect_timeout)
        self.reconnect = float(reconnect)
        self.reconnects = 0      # times the wrapper was welcomed again after losing its daemon
        self._asked = {"sync_every": sync_every, "overlap_steps": overlap, "alpha": alpha}
        self._group = process_group
        self._distributed = dist.is_available() and dist.is_initialized()
        self._rank = dist.get_rank(process_group) if self._distributed else 0
        self._client = None
        self._in_flight = []
        self._params = [(name, p) for name, p in unwrap(model).named_parameters()]
        self.plan = None
        self.stopped = False
        self.rounds = 0          # rounds this trainer synced
        self.steps = 0           # inner steps since the wrapper started
        self._views = False
        self.state_path = state_path
        self.resumed = None      # after start(): the round whose state was restored, or None
        self._pending_state = None
        self._mode = None
        self._at_sync_point = True  # no step since start() or since the last sync

    # --- start and end ----------------------------------------------------

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, kind, value, traceback):
        self.close(merge=kind is None)  # after an error, leave without waiting for the daemon
        return False

    def start(self) -> "DiLoCo":
        """Connects (rank 0), takes the job's anchor into the model on every rank."""
        for name, p in self._params:
            if p.dtype != torch.float32:
                raise TypeError("parameter %s is %s; geoloco exchanges float32 parameters" % (name, p.dtype))
        try:
            self.plan, streaming, self._schedule_fragments = self._on_rank0(self._connect)
        except BaseException:
            self.close()
            raise
        self._mode = "streaming" if streaming else "plain"
        self._first_round = self.plan.first_round
        self._fragments = len(self._client.fragments) if self._client else 0
        if self._rank == 0:
            if self._mode == "plain":
                self._views = self._segment_views()
            if not self._views:
                self._segment_to_model()
        self._broadcast_params()
        self._in_flight = []
        self._at_sync = {}
        self._since_handout = 0
        self._new_phase()
        self._last_sync = self._phase_started
        self._waited = 0.0
        self._resume()
        return self

    def close(self, merge: bool = True) -> None:
        """Leaves the daemon (rank 0). A fragment still in flight is merged
        first (`merge`; every rank calls close), as geoloco-train merges at its
        last step. The model keeps its parameters (copied out of the shared
        memory when they were views of it)."""
        if merge and self._in_flight and not self.stopped and self.plan is not None:
            try:
                self._merge()
            except _Rejoined as r:
                self._after_rejoin(r)  # every rank: the committed anchor (the final one when the job finished)
        self._leave_segment()

    # --- the loop's side --------------------------------------------------

    @property
    def total_steps(self) -> Optional[int]:
        """Inner steps of the whole job when it stops after a number of rounds
        of H steps (for the user's learning-rate schedule); None otherwise."""
        p = self.plan
        return p.stop_rounds * p.sync_every if p and p.stop_rounds and p.sync_every else None

    @property
    def next_round(self) -> Optional[int]:
        """The round this trainer syncs next (rank 0; None elsewhere)."""
        if self._client is None:
            return None
        return min(f.next_round for f in self._client.fragments)

    def step(self, tokens: int, loss: Optional[float] = None) -> bool:
        """Call once per inner step, after the optimizer's step. `tokens`:
        this rank's work in the step (tokens, samples); the SYNC carries the
        site's sum over its ranks. `loss`: the step's training loss (a float;
        the SYNC carries the mean over the phase and the ranks). Returns True when the job is over:
        the model then holds the job's final anchor (what the daemon's
        checkpoint holds), streaming or not. Every rank calls it."""
        if self.stopped:
            return True
        self._at_sync_point = False
        self.steps += 1
        self._phase_steps += 1
        self._since_handout += 1
        self._phase_tokens += int(tokens)
        if loss is not None:
            self._phase_loss += float(loss)
            self._phase_losses += 1
        try:
            if self._in_flight and self._since_handout >= self.plan.overlap_steps:
                if self._merge():
                    return True
            if not self._phase_over():
                return False
            self._sum_over_ranks()
            if self._mode == "plain":
                return self._sync_plain()
            self._hand_out()
            if self.plan.overlap_steps == 0:
                return self._merge()
            return False
        except _Rejoined as r:
            return self._after_rejoin(r)

    # --- rank 0's work, shared ----------------------------------------------

    def _on_rank0(self, work):
        """Runs `work` on rank 0 and shares its value with every rank; when it
        fails, every rank raises (with rank 0's message), so no rank is left
        waiting in a collective for a rank 0 that gave up. When the daemon
        went away and came back (_rejoin_rank0), every rank raises _Rejoined."""
        outcome = None
        if self._rank == 0:
            try:
                try:
                    outcome = ("ok", work())
                except SyncError as e:
                    # Mid-run only: a daemon lost while start() connects is start()'s error.
                    if e.code != "io" or self._client is None or self._mode is None or self.reconnect <= 0:
                        raise
                    outcome = ("rejoined", self._rejoin_rank0(e))
            except Exception as e:  # shared, then raised again on rank 0 below
                if not self._distributed:
                    raise self._explained(e) from e
                outcome = ("failed", "%s: %s" % (type(e).__name__, self._explained(e)))
                failure = e
        outcome = self._share(outcome)
        if outcome[0] == "rejoined":
            raise _Rejoined(outcome[1])  # True: the job finished meanwhile
        if outcome[0] == "failed":
            if self._rank == 0:
                raise self._explained(failure) from failure
            raise RuntimeError("rank 0 of this site failed: %s" % outcome[1])
        return outcome[1]

    def _explained(self, e):
        """The error with what a user can do about it, where the cause is known."""
        if isinstance(e, SyncError) and e.code == "timeout" and "no daemon answered" in str(e):
            return SyncError("timeout", "%s: is geolocod running with job '%s' on this site, and is %s its "
                             "socket (<data_dir>/jobs/<job>/sync.sock)?" % (e.message, self.job, self.socket))
        if isinstance(e, SyncError) and e.code == "io" and self._client is not None:
            return SyncError("io", "%s: the job was cancelled or has finished, or geolocod stopped; `geoloco "
                             "status %s` says which; a loop started again once geolocod runs is welcomed at "
                             "the committed anchor" % (e.message, self.job))
        return e

    def _connect(self, connect_timeout=None):
        if not self.socket or not self.job:
            raise ValueError("the daemon's socket and the job's name are needed: pass socket= and job=, or set "
                             "GEOLOCO_SOCKET and GEOLOCO_JOB (geolocod sets them for a trainer it starts)")
        layout = layout_of([(name, tuple(p.shape)) for name, p in self._params])
        self._client = SyncClient.connect(
            self.socket, self.job, layout, welcome_timeout=self.timeout,
            connect_timeout=self.connect_timeout if connect_timeout is None else connect_timeout)
        self.plan = self._plan(self._client.plan)
        if not self._client.anchor_ready:
            self._model_to_segment()
            self._client.send_initial(self.timeout)
        rounds = {f.next_round for f in self._client.fragments}
        schedule_fragments = 1 if len(rounds) == 1 else len(self._client.fragments)
        return self.plan, self._streaming(), schedule_fragments

    # --- a daemon that went away --------------------------------------------

    def _rejoin_rank0(self, lost):
        """Rank 0, after the connection to the daemon was lost (`lost`): waits
        up to `reconnect` seconds for geolocod to serve the job again (a
        restart) and is welcomed anew, the model holding the committed anchor;
        returns False. A job the daemon ended is not waited for: its folder's
        status.json says so. Finished: the model takes the final anchor from
        the job's checkpoint and this returns True (the loop ends as with the
        last RESULT); cancelled or failed: an error naming the state and the
        daemon's reason."""
        print("geoloco.torch: lost geolocod (%s); waiting up to %.0f s for it to serve job %s again"
              % (lost.message, self.reconnect, self.job), flush=True)
        self._leave_segment()
        plan_before = self.plan

        def connect(timeout):
            try:
                return self._connect(connect_timeout=timeout)
            except SyncError:
                if self._client is not None:  # welcomed, then lost in INIT
                    self._client.close()
                    self._client = None
                raise
        outcome = wait_for_daemon(self.socket, self.job, self.reconnect, connect, lost)
        if outcome == FINISHED:
            return self._take_final_checkpoint()
        plan, streaming, schedule_fragments = outcome
        if plan != plan_before or streaming != (self._mode == "streaming"):
            raise SyncError("mismatch", "geolocod came back with another plan for job %s: %s, not %s"
                            % (self.job, plan, plan_before))
        self._schedule_fragments = schedule_fragments
        if self._mode == "plain":
            self._views = self._segment_views()
        if not self._views:
            self._segment_to_model()
        print("geoloco.torch: geolocod is back; welcomed at round %d with the committed anchor" % self.next_round,
              flush=True)
        return False

    def _leave_segment(self):
        """Rank 0: the parameters leave the shared memory (copied when they
        were views of it), and the client goes."""
        if self._views:
            with torch.no_grad():
                for _, p in self._params:
                    p.data = p.data.clone()
            self._views = False
        if self._client is not None:
            self._client.close()
            self._client = None

    def _take_final_checkpoint(self):
        path = os.path.join(os.path.dirname(self.socket), "checkpoint.safetensors")
        ckpt = load_checkpoint(self.model, path)
        print("geoloco.torch: job %s finished meanwhile; the model holds its final anchor (round %d, %s)"
              % (self.job, ckpt.round, path), flush=True)
        return True

    def _after_rejoin(self, rejoined):
        """Every rank, after rank 0 was welcomed again (or found the job
        finished): rank 0's parameters on every rank, and a fresh phase. The
        inner optimizer keeps its state and the loop its place in the data;
        the phase the daemon lost is trained again from the anchor. Returns
        what step() returns: True when the job is over."""
        self._broadcast_params()
        self._check_replicas()
        self._in_flight = []
        self._at_sync = {}
        if rejoined.finished:
            self.stopped = True
            return True
        self.reconnects += 1
        self._since_handout = 0
        self._new_phase()
        self._last_sync = self._phase_started
        self._waited = 0.0
        self._save_state()  # tagged with the round it is welcomed at
        return False

    # --- decisions --------------------------------------------------------

    def _plan(self, sent):
        asked = {k: v for k, v in self._asked.items() if v is not None}
        if sent is None:
            if "sync_every" not in asked:
                raise SyncError("unsupported", "the daemon sent no phase plan; pass sync_every= (and overlap=, "
                                "alpha= for Streaming DiLoCo)")
            return PhasePlan(int(asked["sync_every"]), 0.0, 1, int(asked.get("overlap_steps", 0)),
                             float(asked.get("alpha", 0.0)), False, 1, 0)
        for key, value in asked.items():
            if getattr(sent, key) != value:
                raise ValueError("%s=%r disagrees with the job, whose %s is %r: leave it out to follow the job"
                                 % (key.replace("_steps", ""), value, key, getattr(sent, key)))
        return sent

    def _streaming(self):
        rounds = {f.next_round for f in self._client.fragments}
        p = self.plan
        # As geoloco-train's plan_sync decides it (a delayed merge comes with its overlap).
        streaming = len(rounds) > 1 or p.overlap_steps > 0 or p.alpha > 0
        if streaming and p.sync_seconds > 0:
            raise ValueError("Streaming DiLoCo needs phases of H steps, not of seconds")
        return streaming

    def _phase_length(self):
        """Steps of the phase starting now (rank 0's schedule, shared once per
        phase); None for time-based phases."""
        p = self.plan
        if p.sync_every == 0:
            return None
        if self._mode == "plain":
            return p.sync_every
        length = None
        if self._rank == 0:
            length = phase_steps(self.next_round, self._first_round, self._schedule_fragments, p.sync_every)
        return self._share(length)

    def _phase_over(self):
        p = self.plan
        if self._in_flight:
            return False
        if self._length == "due":  # after the merge: the table says which round is next
            self._length = self._phase_length()
        if self._length is not None:
            return self._phase_steps >= self._length
        # Time-based: rank 0's clock decides, every rank follows.
        over = None
        if self._rank == 0:
            over = (time.monotonic() - self._phase_started >= p.sync_seconds and self._phase_steps >= p.min_steps)
        return self._share(over)

    # --- plain DiLoCo -----------------------------------------------------

    def _sync_plain(self):
        def work():
            if not self._views:
                self._model_to_segment()
            timing = self._timing()
            rounds = [f.next_round for f in self._client.fragments]
            if self.state_path:
                # Saved before the SYNC, tagged with the round after it: a
                # trainer killed while the daemon finishes this round (which
                # the daemon keeps) is welcomed at that round and resumes.
                self._write_state(self._state(max(rounds) + 1, self.steps))
            for f, round_ in enumerate(rounds):
                self._client.sync(round_, f, self._phase_tokens, self._mean_loss(), timing)
            stop = False
            waited = time.monotonic()
            for _ in rounds:
                stop = self._client.wait_result(self.timeout).stop or stop
            self._waited += time.monotonic() - waited
            if not self._views:
                self._segment_to_model()
            return stop
        stop = self._on_rank0(work)
        self._broadcast_params()
        self._end_phase()
        self._save_state(write=False)  # written before the SYNC
        self.stopped = stop
        return stop

    # --- Streaming DiLoCo -------------------------------------------------

    def _hand_out(self):
        self._on_rank0(self._hand_out_rank0)
        if self._rank != 0:
            self._in_flight = [None]  # the other ranks only need to know one is out
        self._end_phase()
        self._since_handout = 0

    def _hand_out_rank0(self):
        round_ = self.next_round
        timing = self._timing()
        due = [f for f, d in enumerate(self._client.fragments) if d.next_round == round_]
        for f in due:
            names = set(self._client.fragment_tensors(f))
            with torch.no_grad():
                for name, p in self._params:
                    if name in names:
                        self._client.tensor(name)[...] = p.detach().cpu().numpy()
                        if self.plan.merge_delayed:
                            self._at_sync[name] = self._client.tensor(name).copy()
            self._client.sync(round_, f, self._phase_tokens, self._mean_loss(), timing)
        self._in_flight = due

    def _merge(self):
        stop = self._on_rank0(self._merge_rank0)
        self._in_flight = []
        self._broadcast_params()
        self._save_state()
        self.stopped = stop
        return stop

    def _merge_rank0(self):
        stop = False
        waited = time.monotonic()
        for _ in self._in_flight:
            result = self._client.wait_result(self.timeout)
            stop = stop or result.stop
            names = set(self._client.fragment_tensors(result.fragment))
            with torch.no_grad():
                for name, p in self._params:
                    if name in names:
                        merged = self._merged(name, p)
                        p.copy_(torch.from_numpy(merged).to(p.device))
        self._waited += time.monotonic() - waited
        self._at_sync = {}
        if stop:
            # The job's result is its final anchor, which the segment holds
            # (each fragment as its last round left it): the model takes it.
            # (geoloco-train ends on its merged replica instead; its process ends there.)
            self._segment_to_model()
        return stop

    def _merged(self, name, p):
        plan = self.plan
        local = p.detach().cpu().numpy()
        return merge_fragment(self._client.tensor(name), local, self._at_sync.get(name), plan.alpha,
                              plan.merge_delayed)

    # --- helpers ----------------------------------------------------------

    def _sum_over_ranks(self):
        """The site's tokens and loss of the phase: every rank's, summed."""
        if not self._distributed:
            return
        t = torch.tensor([float(self._phase_tokens), self._phase_loss, float(self._phase_losses)],
                         dtype=torch.float64, device=self._params[0][1].device)
        dist.all_reduce(t, group=self._group)
        self._phase_tokens, self._phase_loss, self._phase_losses = int(t[0].item()), t[1].item(), int(t[2].item())

    def _mean_loss(self):
        return self._phase_loss / self._phase_losses if self._phase_losses else 0.0

    def _timing(self):
        # The trainer's seconds since its previous SYNC, and of them the ones
        # not spent waiting for the daemon (its RESULTs): the compute share
        # geoloco watch shows.
        now = time.monotonic()
        loop = now - self._last_sync
        compute = max(loop - self._waited, 0.0)
        self._last_sync = now
        self._waited = 0.0
        return (compute, loop)

    def _end_phase(self):
        self.rounds += 1
        self._new_phase()

    def _new_phase(self):
        self._length = "due"
        self._phase_steps = 0
        self._phase_tokens = 0
        self._phase_loss = 0.0
        self._phase_losses = 0
        self._phase_started = time.monotonic()

    def _segment_views(self):
        """Makes every parameter a view of the segment when all are CPU
        float32 and contiguous (then nothing is copied per round)."""
        if not all(p.device.type == "cpu" and p.is_contiguous() for _, p in self._params):
            return False
        with torch.no_grad():
            for name, p in self._params:
                p.data = torch.from_numpy(self._client.tensor(name))
        return True

    def _model_to_segment(self):
        with torch.no_grad():
            for name, p in self._params:
                self._client.tensor(name)[...] = p.detach().cpu().numpy()

    def _segment_to_model(self):
        with torch.no_grad():
            for name, p in self._params:
                p.copy_(torch.from_numpy(self._client.tensor(name)).to(p.device))
