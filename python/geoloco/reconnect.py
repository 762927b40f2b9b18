"""Waiting for a site's daemon that went away mid-job (geoloco.torch uses
it): connect again until it answers, unless the job's folder says the job
is over. Standard library only; the clock and the sleep are parameters, so
the decisions are tested without a daemon."""

import time
from typing import Any, Callable

from .sync_client import DaemonRefused, SyncError, job_state

__all__ = ["FINISHED", "wait_for_daemon"]

FINISHED = "finished"


def wait_for_daemon(socket_path: str, job: str, seconds: float, connect: Callable[[float], Any], lost: SyncError,
                    sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> Any:
    """Calls connect(timeout) until it succeeds, for up to `seconds`, and
    returns its value. Before each try, the job's status.json (next to the
    socket) decides: finished returns FINISHED (the job's final anchor is in
    its checkpoint); cancelled or failed raise SyncError("io") naming the
    state and the daemon's reason. A try that finds nobody listening
    (SyncError "timeout" ... "no daemon answered"), or a connection reset or
    closed (io: a dying daemon's listening socket can still accept; a daemon
    may ask to connect again) is tried again; any other error is raised.
    `lost`: the error that lost the daemon, named in the messages."""
    deadline = clock() + seconds
    while True:
        state = job_state(socket_path)
        if state is not None and state[0] == FINISHED:
            return FINISHED
        if state is not None and state[0] in ("failed", "cancelled"):
            raise SyncError("io", "%s: job %s is %s on this site (%s); `geoloco status %s` shows it"
                            % (lost.message, job, state[0], state[1], job))
        left = deadline - clock()
        if left <= 0:
            raise SyncError("io", "%s, and geolocod did not serve job %s again within %.0f s; `geoloco status %s` "
                            "says why; a loop started again once geolocod runs is welcomed at the committed anchor"
                            % (lost.message, job, seconds, job))
        try:
            return connect(min(left, 1.0))
        except SyncError as e:
            if e.code == "io":
                sleep(0.2)
            elif isinstance(e, DaemonRefused) or e.code != "timeout" or "no daemon answered" not in e.message:
                raise
