"""Bad input, each refused with its message, and nothing starts or changes:
a malformed job file (syntax, and a bad value), a job naming a site the
federation does not have, a submission from a user without permission, and
an external trainer whose layout differs from the job's. Then `geoloco
cancel` ends the job on every site."""

import os
import shutil
import subprocess
import sys

from federation import Federation, mlp_job

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../python"))
from geoloco import sync_client  # noqa: E402

with Federation(names=("site-a", "site-b"), log_format="json") as fed:
    fed.start()
    a = fed["site-a"]

    def refused(path, *expected):
        r = a.cli("submit", path, check=False)
        assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
        for e in expected:
            assert e in r.stderr, (e, r.stderr)
        print(f"refused: {r.stderr.strip().splitlines()[0]}")

    syntax = fed.write_job("name: broken\nsites: [site-a, site-b\ncoordinator: site-a\n", "syntax.yaml")
    refused(syntax, "syntax.yaml:")
    bad_value = fed.write_job(mlp_job(sites=("site-a", "site-b")).replace("lr: 0.7", "lr: fast"), "bad-value.yaml")
    refused(bad_value, "bad-value.yaml:", "outer.lr")
    unknown = fed.write_job(mlp_job(sites=("site-a", "site-x")), "unknown-site.yaml")
    refused(unknown, "site-x")

    # A user outside root and the geoloco group (nobody) may not submit.
    # Running the CLI as nobody needs root; elsewhere the case is skipped,
    # and the test is reported as skipped once the rest has passed.
    skipped = []
    if os.geteuid() == 0:
        good = fed.write_job(mlp_job(sites=("site-a", "site-b")), "good.yaml")
        os.chmod(fed.root, 0o755)
        os.chmod(os.path.dirname(a.socket), 0o755)
        os.chmod(good, 0o644)
        # A copy of the CLI nobody can reach: the build tree may lie in a folder only its owner enters.
        cli = os.path.join(fed.root, "geoloco")
        shutil.copy(fed.geoloco, cli)
        os.chmod(cli, 0o755)
        r = subprocess.run([cli, "submit", good, "--socket", a.socket], capture_output=True, text=True,
                           user=65534, group=65534, extra_groups=[], timeout=30)
        assert r.returncode != 0, (r.returncode, r.stdout, r.stderr)
        assert "geoloco group" in r.stderr, r.stderr
        print(f"refused for nobody (exit {r.returncode}): {r.stderr.strip().splitlines()[-1]}")
        assert a.status()["jobs"] == [], a.status()  # nothing started
    else:
        skipped.append("not root: a submission as another user (nobody) needs root to run the CLI as it")

    # An external trainer with the wrong layout.
    ext = fed.write_job(f"""name: ext
sites: [site-a, site-b]
coordinator: site-a
trainer: {{kind: external}}
inner: {{steps: 10}}
straggler: {{deadline: 5s, min_sites: 2}}
stop: {{rounds: 3}}
""", "external.yaml")
    a.cli("submit", ext)
    sock = os.path.join(a.dir, "data", "jobs", "ext", "sync.sock")
    right = sync_client.layout_of([("w", (10, 4)), ("b", (4,))])
    first = sync_client.SyncClient.connect(sock, "ext", right, connect_timeout=30)
    first.params[:] = 0.5
    first.send_initial()
    anchor = a.status("ext")["anchor_digest"]
    first.close()
    wrong = sync_client.layout_of([("w", (10, 5)), ("b", (5,))])
    try:
        sync_client.SyncClient.connect(sock, "ext", wrong, connect_timeout=30, welcome_timeout=30)
        raise AssertionError("a trainer with another layout was welcomed")
    except sync_client.DaemonRefused as e:
        print(f"refused trainer: {e}")
        assert "layout" in str(e), e
    st = a.status("ext")
    assert st["anchor_digest"] == anchor and st["round"] == 0, st  # nothing changed

    # log_format: json: every line of the daemon's log is one JSON object.
    import json
    lines = [l for l in open(a.log_path).read().splitlines() if l.strip()]
    records = [json.loads(l) for l in lines]
    assert all({"time", "level", "site", "message"} <= r.keys() for r in records), records[:3]
    assert any("layout" in r["message"] and r["level"] == "warning" for r in records), \
        [r["message"] for r in records][-10:]
    print(f"{len(records)} log lines, each a JSON object")

    # geoloco cancel on a non-coordinator ends the job on every site.
    out = fed["site-b"].cli("cancel", "ext").stdout
    assert "cancelled" in out, out
    fed.wait_for(lambda: all((s.status("ext") or {}).get("state") == "cancelled" for s in fed.sites), 60,
                 "the job to be cancelled on both sites")
    again = fed["site-a"].cli("cancel", "nope", check=False)
    assert again.returncode == 1 and "no job named 'nope'" in again.stderr, (again.returncode, again.stderr)
    print("cancelled on both sites; cancelling an unknown job says so")
for why in skipped:
    print(f"SKIPPED: {why}")
if skipped:
    sys.exit(77)  # ctest: skipped, not passed; every other check above passed
print("ok")
