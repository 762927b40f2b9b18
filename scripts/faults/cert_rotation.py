"""Certificates rotate while the job runs, and a revoked site is cut off:
every site's certificate is renewed (`geoloco certs issue` again) and its
daemon reloaded with SIGHUP, one after another, mid-job; each reload is
applied, every live peer connection is replaced (all sites then see the
new certificates), and no round is lost or aborted. Then one site's
certificate is revoked (`geoloco certs revoke`) and the others reload with
the CRL: they close its connections and refuse it by name, the revoked
site's own reload with that CRL is refused, and the other two finish the
job. Ends with the history checker."""

import os
import re
import shutil
import signal
import time

from scenario import Commits, Federation, arguments, history_events, mlp_job, run

args = arguments(__doc__, rounds=24, days=400)
NAME = "cert-rotation"
SLOTS = 3  # 2 data connections and the control connection per peer pair (the harness's site files)


def metric(site, name, **labels):
    want = tuple(sorted(labels.items()))
    for (n, ls), v in site.metrics().items():
        if n == name and tuple(sorted(ls)) == want:
            return v
    return None


def log_of(site, since=0):
    with open(site.log_path) as f:
        return f.read()[since:]


def body():
    with Federation(proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "25"
        fed["site-a"].env["GEOLOCO_LOG_LEVEL"] = "debug"  # each failed dial is a debug line: counted below
        fed.start()
        a, b, c = fed["site-a"], fed["site-b"], fed["site-c"]
        a.cli("submit", fed.write_job(mlp_job(rounds=args.rounds, steps=20, deadline="2s", min_sites=2)))
        commits = Commits(fed, "e2e")
        commits.wait_round(2, 120, "round 2")
        ca = os.path.join(fed.root, "ca")

        # 1. Renew and reload every site in turn, while rounds commit.
        first = commits.poll()
        for s in fed.sites:
            size = len(log_of(s))
            fed.run([fed.geoloco, "certs", "issue", "--ca", ca, "--site", s.name, "--out",
                     os.path.join(s.dir, "tls"), "--days", str(args.days)])
            s.process.send_signal(signal.SIGHUP)
            fed.wait_for(lambda: "TLS reloaded" in log_of(s, size), 20, f"{s.name} to reload its certificate")
            assert metric(s, "geoloco_tls_reloads_total", result="applied") == 1, s.name
            commits.wait_round(commits.poll() + 1, 60, f"a commit after {s.name}'s reload")
        expected = time.time() + args.days * 86400
        # Every site replaced its connections to both peers at each of the three reloads it took part in.
        for s in fed.sites:
            fed.wait_for(lambda: metric(s, "geoloco_tls_connections_replaced_total") == 4 * SLOTS, 30,
                         f"{s.name} to replace {4 * SLOTS} connections")
            own = metric(s, "geoloco_tls_certificate_expiry_timestamp_seconds", certificate="site")
            assert abs(own - expected) < 3600, f"{s.name}'s certificate expires at {own}, expected about {expected}"
            for p in fed.sites:
                if p is not s:
                    seen = metric(s, "geoloco_tls_certificate_expiry_timestamp_seconds", certificate="peer", peer=p.name)
                    assert seen is not None and abs(seen - expected) < 3600, \
                        f"{s.name} sees {p.name}'s certificate expiring at {seen}, not the renewed one"
        rotated = commits.poll()
        assert rotated >= first + 3, f"only rounds {first}..{rotated} committed across the three reloads"

        # 2. Revoke site-c; a and b reload with the CRL and cut it off.
        fed.run([fed.geoloco, "certs", "revoke", "--ca", ca, "--cert", os.path.join(c.dir, "tls", "site.pem")])
        sizes = {}
        for s in (a, b, c):
            tls = os.path.join(s.dir, "tls")
            shutil.copy(os.path.join(ca, "crl.pem"), os.path.join(tls, "crl.pem"))
            with open(s.config) as f:
                text = f.read()
            with open(s.config, "w") as f:
                f.write(text.replace(f"key: {tls}/site.key}}", f"key: {tls}/site.key, crl: {tls}/crl.pem}}"))
            sizes[s.name] = len(log_of(s))
        for s in (a, b):
            s.process.send_signal(signal.SIGHUP)
        revoked_at = commits.poll()
        for s in (a, b):
            fed.wait_for(lambda: re.search(r"refused site-c: .*certificate revoked", log_of(s, sizes[s.name])), 20,
                         f"{s.name} to refuse site-c by name")
        c.process.send_signal(signal.SIGHUP)
        fed.wait_for(lambda: "TLS reload refused" in log_of(c, sizes["site-c"]), 20, "site-c's reload to be refused")
        assert "this site's certificate does not verify against the federation CA: certificate revoked" in \
            log_of(c, sizes["site-c"]), log_of(c, sizes["site-c"])
        assert metric(c, "geoloco_tls_reloads_total", result="refused") == 1

        # a and b finish without it; site-c commits nothing more.
        def majority_finished():
            commits.poll()
            return all((s.status("e2e") or {}).get("state") == "finished" for s in (a, b))
        fed.wait_for(majority_finished, 300, "site-a and site-b to finish")
        # site-a dials the revoked site-c with the backoff of any failed dial
        # (each slot doubles its wait up to transport.reconnect_max, 0.5 s in
        # the harness's site files), knocks or not: counted over 10 s.
        window_start = len(log_of(a))
        time.sleep(10)
        dials = len(re.findall(r"dial site-c slot \d+: ", log_of(a, window_start)))
        bound = SLOTS / 0.5 * 10
        assert 0 < dials <= bound * 1.1, f"site-a dialed the revoked site-c {dials} times in 10 s (bound {bound:.0f})"
        c_round = c.status("e2e")["round"]
        assert c_round <= revoked_at + 1, f"site-c committed up to round {c_round} after its revocation at {revoked_at}"
        c.kill(signal.SIGTERM)
        fed.check_history("e2e", down=("site-c",))
        # No attempt was given up while the certificates rotated (up to the revocation).
        for s in fed.sites:
            lost = [e for e in history_events(s) if e.get("event") == "aborted" and e["round"] <= rotated]
            assert not lost, f"{s.name}: attempts aborted while certificates rotated: {lost}"
    return (f"3 certificates renewed and reloaded mid-job (rounds {first}..{rotated}), {4 * SLOTS} connections "
            f"replaced on each site, 0 aborts; site-c revoked at round {revoked_at}, refused by name, the others "
            f"finished {args.rounds} rounds; site-a dialed it {dials} times in 10 s (backoff bound {bound:.0f}); longest stall "
            f"{commits.longest_stall:.1f} s")


run(NAME, body)
