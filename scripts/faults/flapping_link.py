"""A flapping link: site-b/site-c reset every few seconds and refused for a
moment each time, while the job runs. Rounds go on (a site cut off for a
moment is left out of a round or two, then back), every site ends on the
same digest, and nothing is lost or counted twice. Ends with the history
checker."""

from scenario import Commits, Federation, arguments, link_name, mlp_job, run

# stall_bound: a flap costs a round or two, never more (a loop of plans
# and aborts once stalled this scenario for 124 s while it still finished).
args = arguments(__doc__, rounds=12, period="3s", down="300ms", stall_bound=20.0)
NAME = "flapping-link"


def body():
    with Federation(proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "20"
        fed.start()
        flapping = link_name("site-b", "site-c")
        fed["site-a"].cli("submit", fed.write_job(mlp_job(rounds=args.rounds, steps=20, deadline="2s")))
        commits = Commits(fed, "e2e")
        commits.wait_round(1, 120, "round 1")
        fed.proxy.set(flapping, flap={"period": args.period, "down": args.down})
        commits.finished(300)
        stats = fed.proxy.stats()[flapping]
        fed.check_history("e2e")
        assert stats["resets"] >= 2, f"the link was reset {stats['resets']} time(s): the flapping did not happen"
        assert commits.longest_stall <= args.stall_bound, (
            f"no commit for {commits.longest_stall:.1f} s while the link flapped (bound {args.stall_bound} s)")
    return (f"{args.rounds} rounds committed while {flapping} flapped ({args.period}/{args.down}): "
            f"{stats['resets']} connection resets, {stats['refused']} refused, longest stall "
            f"{commits.longest_stall:.1f} s")


run(NAME, body)
