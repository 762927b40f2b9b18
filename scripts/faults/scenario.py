"""What every fault scenario shares: the federation harness of the
end-to-end tests (real geolocod daemons on loopback, each pair of sites
through geoloco-faultproxy), a clock that watches the job's commits, and the
one-line verdict each scenario ends with.

A scenario prints `VERDICT <name>: PASS ...`, `FAIL ...` or (when it cannot
run on this machine, e.g. without root) `SKIP ...` as its last line and
exits 0 (PASS), 1 (FAIL) or 77 (SKIP); every wait is bounded."""

import argparse
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "e2e"))

from federation import Federation, link_name, mlp_job  # noqa: E402,F401


def arguments(doc, **defaults):
    """The scenario's command line: --repeat, --seed, and its own options."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--repeat", type=int, default=defaults.pop("repeat", 1), help="how many times to inject the fault")
    p.add_argument("--seed", type=int, default=defaults.pop("seed", 1), help="of the random choices")
    p.add_argument("--keep", action="store_true", help="keep the federation's folder (logs, histories) at the end")
    for name, value in defaults.items():
        p.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    return p.parse_args()


class Commits:
    """Watches the highest round committed on each site, and the longest
    time with no new commit anywhere."""

    def __init__(self, fed, job):
        self.fed, self.job = fed, job
        self.last_round = 0
        self.last_time = time.monotonic()
        self.longest_stall = 0.0

    def rounds(self):
        """The round each live site has committed (a stopped or frozen site: 0)."""
        out = {}
        for s in self.fed.sites:
            alive = s.process and s.process.poll() is None and not getattr(s, "frozen", False)
            st = s.status(self.job) if alive else None
            out[s.name] = (st or {}).get("round", 0)
        return out

    def poll(self):
        now = time.monotonic()
        top = max(self.rounds().values())
        if top > self.last_round:
            self.last_round, self.last_time = top, now
        self.longest_stall = max(self.longest_stall, now - self.last_time)
        return top

    def wait_round(self, target, seconds, what):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.poll() >= target:
                return
            time.sleep(0.2)
        self.fed.fail(f"timed out after {seconds} s waiting for {what} (round {self.last_round})")

    def finished(self, seconds):
        def done():
            self.poll()
            return all((s.status(self.job) or {}).get("state") == "finished" for s in self.fed.sites)
        self.fed.wait_for(done, seconds, f"job {self.job} to finish")


def epoch_of(site, job="e2e"):
    """The office `site` follows: (epoch, coordinator) from its status."""
    st = site.status(job) or {}
    return st.get("epoch", 0), st.get("coordinator", "")


def contributes_after(fed, site, round_, seconds=120, job="e2e"):
    """Waits (bounded) until `site` contributed to a round after `round_`."""
    fed.wait_for(lambda: any(r["contributed"] for r in (site.status(job) or {}).get("rounds", [])
                             if r["round"] > round_), seconds, f"{site.name} to contribute after round {round_}")


def wait_for_transfer(fed, link, nbytes=20000, seconds=30):
    """Waits until `nbytes` more have crossed `link` (both ways) through the
    proxy: an exchange in flight on it. Returns whether they did in time."""
    def carried():
        s = fed.proxy.stats()[link]
        return s["up"]["written"] + s["down"]["written"]
    before = carried()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if carried() > before + nbytes:
            return True
        time.sleep(0.02)
    return False


def history_events(site, job="e2e"):
    """The events of a site's history, read from its disk: every complete
    line (a kill -9 may leave the last one torn)."""
    with open(os.path.join(site.dir, "data", "jobs", job, "history.jsonl")) as f:
        return [json.loads(line) for line in f if line.endswith("\n") and line.strip()]


def signal_site(site, sig):
    """SIGSTOP or SIGCONT of a site's daemon and trainer: a machine that
    stands still, then goes on."""
    site.frozen = sig == signal.SIGSTOP  # its control socket does not answer meanwhile
    os.killpg(site.process.pid, sig)
    for pid in site.trainer_pids():
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def verdict(name, passed, text):
    """passed: True, False, or None for a scenario that cannot run here (SKIP)."""
    word = "SKIP" if passed is None else "PASS" if passed else "FAIL"
    print(f"VERDICT {name}: {word} {text}", flush=True)
    # A skip says so with its exit code (77, as ctest's SKIP_RETURN_CODE and
    # run-all.sh read it), so that no line of output can turn a failure into one.
    sys.exit(77 if passed is None else 0 if passed else 1)


def run(name, body):
    """Runs body(); an AssertionError (a failed wait or check) is the verdict FAIL."""
    try:
        text = body()
    except AssertionError as e:
        print(str(e), file=sys.stderr)
        verdict(name, False, str(e).splitlines()[0] if str(e) else "assertion failed")
    verdict(name, True, text)
