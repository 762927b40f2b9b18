"""kill -9 of the donor in the middle of a STATE_SYNC: a restarted site
asks the coordinator for the committed state; while its frames are on
the (slow) link, the coordinator is killed. The joining site notices the
stall, asks the next site, and the transfer goes on from it with the frames
already received kept (only the missing ones are sent); meanwhile a
successor takes the coordinator's office and the job goes on, and the old
coordinator, restarted, rejoins as a participant. Prints what
the resume cost: the time from the donor's death to the state in place,
and the frames kept and sent again. Ends with the history checker."""

import re
import time

from scenario import Commits, Federation, arguments, link_name, mlp_job, run, wait_for_transfer

# A 1536-wide MLP: 1.2M parameters, 2 state frames per tensor (1 Mi values each), 9.8 MB per transfer.
args = arguments(__doc__, rounds=24, width=1536, donor_rate="32M")
NAME = "donor-death"


def body():
    names = ("site-a", "site-b", "site-c", "site-d")
    with Federation(names=names, proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "25"
        fed.start()
        a, d = fed["site-a"], fed["site-d"]
        job = mlp_job(sites=names, rounds=args.rounds, steps=20, width=args.width, deadline="3s", min_sites=2)
        a.cli("submit", fed.write_job(job))
        commits = Commits(fed, "e2e")
        commits.wait_round(3, 180, "round 3")

        # site-d goes down for two rounds; its link to the donor is slow.
        d.kill()
        commits.wait_round(commits.poll() + 2, 120, "two rounds without site-d")
        fed.proxy.set(link_name("site-a", "site-d"), both={"rate": args.donor_rate})
        size = len(open(d.log_path).read())
        d.start()
        fed.wait_for(lambda: "sending the state of round" in open(a.log_path).read(), 60,
                     "site-a to start sending the state to site-d")
        assert wait_for_transfer(fed, link_name("site-a", "site-d"), nbytes=4_000_000, seconds=60), \
            "the state's frames did not cross the a/d link"
        a.kill()
        killed_at = time.monotonic()
        held = max(commits.rounds().values())
        print(f"killed the donor (the coordinator, site-a) mid-transfer, round {held}", flush=True)

        def received():
            return re.search(r"state of round (\d+) received from (site-[bcd]) \((\d+) of its (\d+) frames kept "
                             r"from site-a, which stopped sending\)", open(d.log_path).read()[size:])
        fed.wait_for(received, 60, "site-d to finish the state from another site")
        resumed_in = time.monotonic() - killed_at
        m = received()
        kept, frames, donor = int(m.group(3)), int(m.group(4)), m.group(2)
        assert 0 < kept < frames, f"{kept} of {frames} frames kept: the transfer did not resume"
        # The second donor sent only what was missing: less than the whole state.
        total = int(re.search(r"kept from site-a, which stopped sending\): \d+ parameters, (\d+) bytes",
                              m.string[m.start():]).group(1))
        rest = re.search(rf"the rest of the state of round {m.group(1)} sent to site-d: (\d+) bytes",
                         open(fed[donor].log_path).read())
        assert rest, f"{donor} did not log sending the rest of the state"
        resent = int(rest.group(1))
        assert resent < total, f"{donor} sent {resent} bytes of a {total}-byte state: not only the missing frames"
        # The job goes on under a successor; the old coordinator comes back as
        # a participant of the new epoch, and every site finishes on one digest.
        commits.wait_round(held + 2, 120, "two commits under the successor")
        a.start()
        commits.finished(300)
        fed.check_history("e2e")
    return (f"donor killed after {kept} of {frames} state frames; {donor} sent the other {frames - kept} "
            f"({resent} of the state's {total} bytes), state in place {resumed_in:.1f} s after the kill; {args.rounds} rounds on one digest, "
            f"longest stall {commits.longest_stall:.1f} s")


run(NAME, body)
