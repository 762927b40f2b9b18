"""The job files shipped in configs/jobs run under geolocod as they are,
shortened to 2 rounds of 5 inner steps: every site ends with the same
anchor. The streaming job is refused with its message (geolocod does not
run streaming fragments yet; `geoloco simulate` does)."""

import os
import re

from federation import Federation

CONFIGS = os.path.join(os.path.dirname(__file__), "../../configs/jobs")


def shortened(name, steps=True):
    text = open(os.path.join(CONFIGS, name)).read()
    text = re.sub(r"stop: *\{[^}]*\}", "stop: {rounds: 2}", text)
    if steps:
        text = re.sub(r"steps: *\d+", "steps: 5", text)
        text = re.sub(r"warmup: *\d+", "warmup: 2", text)
    return text


with Federation() as fed:
    fed.start()
    a = fed["site-a"]
    for name in ("mlp-diloco.yaml", "mlp-compressed.yaml", "gpt-diloco.yaml", "demo.yaml"):
        job = re.search(r"^name: *(\S+)", open(os.path.join(CONFIGS, name)).read(), re.M).group(1)
        a.cli("submit", fed.write_job(shortened(name), name))
        fed.wait_for(lambda: all((s.status(job) or {}).get("state") == "finished" for s in fed.sites), 240,
                     f"{name} to finish")
        digests = {s.status(job)["anchor_digest"] for s in fed.sites}
        assert len(digests) == 1, (name, digests)
        print(f"{name}: 2 rounds on 3 sites, anchor {digests.pop()}")
    r = a.cli("submit", fed.write_job(shortened("gpt-streaming.yaml", steps=False), "gpt-streaming.yaml"), check=False)
    assert r.returncode == 1 and "streaming.fragments > 1 is not run by geolocod yet" in r.stderr, r.stderr
    print("gpt-streaming.yaml: refused by geolocod with its message")
print("ok")
