"""A slow link: site-a/site-c at 10 Mbit/s (1% of a 1 Gbit/s link) with a
300 ms round trip, the other links clean. The job finishes with one digest
per round everywhere, and the bytes the proxy carried on the slow link match
what the two daemons say they sent to each other (frame bytes, plus TLS's
records and handshakes). Ends with the history checker."""

from scenario import Commits, Federation, arguments, link_name, mlp_job, run

args = arguments(__doc__, rounds=8)
NAME = "slow-link"


def body():
    with Federation(proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "10"
        fed.start()
        slow = link_name("site-a", "site-c")
        fed.proxy.set(slow, both={"latency": "150ms", "jitter": "10ms", "rate": "10M"})
        fed["site-a"].cli("submit", fed.write_job(mlp_job(rounds=args.rounds, steps=20, width=64, deadline="3s")))
        commits = Commits(fed, "e2e")
        commits.finished(300)
        checked = fed.check_history("e2e")
        stats = fed.proxy.stats()[slow]
        a_sent = fed["site-a"].metrics()[("geoloco_peer_sent_bytes_total", (("peer", "site-c"),))]
        c_sent = fed["site-c"].metrics()[("geoloco_peer_sent_bytes_total", (("peer", "site-a"),))]
        # TLS adds a 22-byte header per record of at most 16 KiB, and a few KiB of
        # handshake per connection; it never removes bytes.
        allowance = 16384 * stats["accepted"]
        for what, frames, carried in (("site-a to site-c", a_sent, stats["up"]["written"]),
                                      ("site-c to site-a", c_sent, stats["down"]["written"])):
            print(f"{what}: {frames:.0f} frame bytes by the daemon's count, {carried} bytes through the proxy")
            assert frames <= carried <= frames * 1.01 + allowance, \
                f"{what}: the daemon counts {frames:.0f} frame bytes, the proxy carried {carried}"
        assert stats["up"]["dropped"] == 0 and stats["down"]["dropped"] == 0, stats
        rounds_line = [l for l in checked.splitlines() if l.startswith("rounds:")]
    return (f"{args.rounds} rounds over a 10 Mbit/s 300 ms link, {rounds_line[0] if rounds_line else ''}; "
            f"proxy carried {stats['up']['written']}/{stats['down']['written']} bytes, matching the daemons' counts")


run(NAME, body)
