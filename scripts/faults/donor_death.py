"""kill -9 of a donor in the middle of a STATE_SYNC: a restarted site asks
the coordinator for the committed state, and the other holders to help
(each sends a share); while the coordinator's share is on its slow link,
the coordinator is killed (and its link drops what it still carries). The
joining site notices that its frames stopped and hands its share to the
holders whose shares are in, keeping every frame already received (or,
with no such holder, goes on from the next one that offers, with what it
has); meanwhile a successor takes the coordinator's office and the job
goes on, and the old coordinator, restarted, rejoins as a participant.
Prints what the resume cost: the time from the donor's death to the state
in place, and what the others sent after it stopped, against the whole
state. Ends with the history checker."""

import re
import time

from scenario import Commits, Federation, arguments, link_name, mlp_job, run, wait_for_transfer

# A 4096-wide MLP: 3.3M parameters, 13 state frames per tensor (256 Ki values each), 26 MB per transfer:
# enough frames (26) for the other holders to be asked to help.
args = arguments(__doc__, rounds=16, width=4096, donor_rate="64M")
NAME = "donor-death"


def body():
    names = ("site-a", "site-b", "site-c", "site-d")
    with Federation(names=names, proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "25"
        fed.start()
        a, d = fed["site-a"], fed["site-d"]
        # 500 test images per eval: the eval of every anchor is not what this tests, and
        # all 10,000 through the 4096-wide MLP cost each site about ten rounds' training.
        job = mlp_job(sites=names, rounds=args.rounds, steps=10, width=args.width, deadline="3s", min_sites=2,
                      eval_items=500)
        a.cli("submit", fed.write_job(job))
        commits = Commits(fed, "e2e")
        commits.wait_round(3, 180, "round 3")

        # site-d goes down for two rounds; its link to the donor is slow.
        d.kill()
        commits.wait_round(commits.poll() + 2, 120, "two rounds without site-d")
        fed.proxy.set(link_name("site-a", "site-d"), both={"rate": args.donor_rate})
        size = len(open(d.log_path).read())
        d.start()
        # site-a sends the state, or its share of it: on a loaded machine another
        # holder's offer may reach site-d first, and site-a then helps with the rest.
        sending = re.compile(r"sending the (?:rest of the )?state of round \d+ to site-d")
        fed.wait_for(lambda: sending.search(open(a.log_path).read()), 60,
                     "site-a to start sending the state (or its share of it) to site-d")
        assert wait_for_transfer(fed, link_name("site-a", "site-d"), nbytes=6_000_000, seconds=60), \
            "the state's frames did not cross the a/d link"
        # What site-a wrote before it died would still arrive (its kernel
        # flushes its sockets): the link drops it, as a link to a crashed
        # host would, so the rest of site-a's share never comes.
        fed.proxy.set(link_name("site-a", "site-d"), both={"blackhole": True})
        a.kill()
        killed_at = time.monotonic()
        held = max(commits.rounds().values())
        print(f"killed the donor (the coordinator, site-a) mid-transfer, round {held}", flush=True)

        def received():
            return re.search(r"state of round (\d+) received from ([a-z, -]+?)(?: \(\d+ of its \d+ frames kept from "
                             r"before the transfer stalled\))?: \d+ parameters, (\d+) bytes in",
                             open(d.log_path).read()[size:])
        fed.wait_for(received, 60, "site-d to finish the state from the other sites")
        resumed_in = time.monotonic() - killed_at
        m = received()
        state_round, total = m.group(1), int(m.group(3))
        log = open(d.log_path).read()[size:]
        helped = re.findall(r"(site-[bc]) helps with the state of round " + state_round, log)
        handed = re.search(r"(\S+ \S+) info site-d \[e2e\] site-a sent no state frame for \d+ ms; its share goes to "
                           r"the others", log)
        resumed = re.search(r"(\S+ \S+) info site-d \[e2e\] the state of round " + state_round +
                            r" goes on from site-[bc]: the frames already here are kept", log)
        assert handed or resumed, f"site-a's share was neither handed to the others nor resumed:\n{log}"
        since = (handed or resumed).group(1)  # log times sort as text
        # After that, the others sent only what site-a had not delivered: not the whole state again.
        after = 0
        for other in ("site-b", "site-c"):
            for at, nbytes in re.findall(rf"(\S+ \S+) info {other} \[e2e\] the rest of the state of round {state_round} "
                                         rf"sent to site-d: (\d+) bytes", open(fed[other].log_path).read()):
                if at >= since:
                    after += int(nbytes)
        assert 0 < after < total, f"after site-a stopped, the others sent {after} bytes of a {total}-byte state"
        fed.proxy.heal()
        # The job goes on under a successor; the old coordinator comes back as
        # a participant of the new epoch, and every site finishes on one digest.
        commits.wait_round(held + 2, 120, "two commits under the successor")
        a.start()
        commits.finished(300)
        fed.check_history("e2e")
    how = "its share handed to the others" if handed else "the transfer resumed from another holder"
    return (f"donor killed mid-transfer ({len(helped)} other holders helping), {how}: they sent {after} of the "
            f"state's {total} bytes after it stopped; state in place {resumed_in:.1f} s after the kill; "
            f"{args.rounds} rounds on one digest, longest stall {commits.longest_stall:.1f} s")


run(NAME, body)
