"""A site's trainer killed, hung, and slowed 5x while the job runs (carry).

- killed (kill -9 of geoloco-train): its daemon starts it again, and the
  site contributes again;
- hung (SIGSTOP of the trainer for several deadlines): the rounds close
  without that site, and when it resumes its late work is carried into a
  later round;
- slowed 5x (the trainer stopped four fifths of the time): the site is a
  straggler, left out of rounds and carried. 5x, not less: a phase of 20
  steps of 25 ms then ends 2 s after the others', past the 1 s deadline
  however loaded the machine is (at 3x it ended about 1 s after, and the
  site sometimes made the deadline).
Every token is committed once or dropped with a reason; ends with the
history checker."""

import os
import signal
import threading
import time

from scenario import Commits, Federation, arguments, contributes_after, mlp_job, run

args = arguments(__doc__, rounds=40, hang_seconds=6.0, slow_seconds=8.0)
NAME = "trainer-faults"


def trainer_pid(site):
    pids = site.trainer_pids()
    assert pids, f"{site.name} has no trainer running"
    return pids[0]



def body():
    with Federation(proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "25"
        fed.start()
        a, b, c = fed["site-a"], fed["site-b"], fed["site-c"]
        a.cli("submit", fed.write_job(mlp_job(rounds=args.rounds, steps=20, deadline="1s", min_sites=2)))
        commits = Commits(fed, "e2e")
        commits.wait_round(2, 120, "round 2")

        # Killed.
        old = trainer_pid(b)
        os.kill(old, signal.SIGKILL)
        at = commits.poll()
        fed.wait_for(lambda: b.trainer_pids() and b.trainer_pids()[0] != old, 30, "site-b's trainer to be started again")
        contributes_after(fed, b, at + 1)
        print(f"site-b's trainer killed at round {at}: started again, contributing", flush=True)

        # Hung.
        pid = trainer_pid(c)
        os.kill(pid, signal.SIGSTOP)
        at = commits.poll()
        try:
            time.sleep(args.hang_seconds)
            during = commits.poll()
        finally:
            os.kill(pid, signal.SIGCONT)
        assert during >= at + 2, f"only rounds {at}..{during} committed while site-c's trainer hung"
        left_out = [r["round"] for r in a.status("e2e")["rounds"] if at < r["round"] <= during
                    and "site-c" not in r["participants"]]
        assert left_out, "site-c was never left out while its trainer hung"
        contributes_after(fed, c, during)
        print(f"site-c's trainer hung {args.hang_seconds:.0f} s: left out of rounds {left_out[0]}..{left_out[-1]}",
              flush=True)

        # Slowed 5x: stopped 400 ms of every 500 ms.
        pid = trainer_pid(b)
        at = commits.poll()
        stop = threading.Event()

        def duty_cycle():
            while not stop.is_set():
                os.kill(pid, signal.SIGSTOP)
                time.sleep(0.4)
                os.kill(pid, signal.SIGCONT)
                time.sleep(0.1)

        t = threading.Thread(target=duty_cycle)
        t.start()
        try:
            time.sleep(args.slow_seconds)
        finally:
            stop.set()
            t.join()
            os.kill(pid, signal.SIGCONT)
        during = commits.poll()
        rounds = [r for r in a.status("e2e")["rounds"] if at < r["round"] <= during]
        late = [r["round"] for r in rounds if "site-b" in r["late"]]
        without = [r["round"] for r in rounds if "site-b" not in r["participants"]]
        assert without, f"site-b was never left out while slowed 5x (rounds {at}..{during})"
        print(f"site-b slowed 5x for {args.slow_seconds:.0f} s: left out of {len(without)} round(s), late work in "
              f"{late}", flush=True)
        contributes_after(fed, b, during)

        commits.finished(300)
        checked = fed.check_history("e2e")
        tokens = [l for l in checked.splitlines() if l.startswith("tokens:")]
    return f"trainer killed, hung and slowed: {args.rounds} rounds; {tokens[0] if tokens else ''}"


run(NAME, body)
