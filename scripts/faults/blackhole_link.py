"""A blackholed link: for a while every byte between site-a (the
coordinator) and site-c vanishes, and the connections look alive. site-c is
left out (its heartbeats never arrive), the other two go on; when the
blackhole ends, site-c rejoins (taking the committed state from a peer) and
the job finishes with one digest per round everywhere. Ends with the
history checker."""

import time

from scenario import Commits, Federation, arguments, link_name, mlp_job, run

# stall_bound: the others go on without the cut-off site after a heartbeat
# timeout (a loop of plans and aborts once stalled this scenario for 146 s).
args = arguments(__doc__, rounds=30, blackhole_seconds=10.0, stall_bound=30.0)
NAME = "blackhole-link"


def body():
    with Federation(proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "40"
        fed.start()
        hole = link_name("site-a", "site-c")
        fed["site-a"].cli("submit", fed.write_job(mlp_job(rounds=args.rounds, steps=20, deadline="2s", min_sites=2)))
        commits = Commits(fed, "e2e")
        commits.wait_round(2, 120, "round 2")
        fed.proxy.set(hole, both={"blackhole": True})
        start_round = commits.poll()
        time.sleep(args.blackhole_seconds)
        during = commits.poll()
        fed.proxy.heal()
        assert during > start_round, f"no round committed during the blackhole (round {during})"
        a = fed["site-a"].status("e2e")
        without = [r["round"] for r in a["rounds"] if r["round"] > start_round + 1 and "site-c" not in r["participants"]]
        assert without, "site-c was never left out: the blackhole did not cut it off"
        commits.finished(300)
        stats = fed.proxy.stats()[hole]
        fed.check_history("e2e")
        c = fed["site-c"].status("e2e")
        assert c["round"] == args.rounds, c
        back = [r["round"] for r in c["rounds"] if r["contributed"] and r["round"] > without[-1]]
        assert back, f"site-c never contributed after the blackhole ended (left out up to round {without[-1]})"
        assert commits.longest_stall <= args.stall_bound, (
            f"no commit for {commits.longest_stall:.1f} s (bound {args.stall_bound} s)")
        assert stats["up"]["dropped"] + stats["down"]["dropped"] > 0, stats
    return (f"site-c left out of rounds {without[0]}..{without[-1]} while {hole} dropped "
            f"{stats['up']['dropped'] + stats['down']['dropped']} bytes; it rejoined and the job finished "
            f"{args.rounds} rounds")


run(NAME, body)
