"""The job files shipped in configs/jobs run under geolocod as they are,
shortened to 2 rounds of 5 inner steps (the streaming job: 2 periods of 8
steps in 4 fragments, overlap 1): every site ends with the same anchor."""

import os
import re

from federation import Federation

CONFIGS = os.path.join(os.path.dirname(__file__), "../../configs/jobs")


def shortened(name, steps=5):
    text = open(os.path.join(CONFIGS, name)).read()
    text = re.sub(r"stop: *\{[^}]*\}", "stop: {rounds: 2}", text)
    text = re.sub(r"steps: *\d+", f"steps: {steps}", text)
    text = re.sub(r"warmup: *\d+", "warmup: 2", text)
    text = re.sub(r"overlap: *\d+", "overlap: 1", text)  # at most H/F
    return text


with Federation() as fed:
    fed.start()
    a = fed["site-a"]
    for name in ("mlp-diloco.yaml", "mlp-compressed.yaml", "gpt-diloco.yaml", "demo.yaml", "gpt-streaming.yaml"):
        job = re.search(r"^name: *(\S+)", open(os.path.join(CONFIGS, name)).read(), re.M).group(1)
        a.cli("submit", fed.write_job(shortened(name, 8 if "streaming" in name else 5), name))
        fed.wait_for(lambda: all((s.status(job) or {}).get("state") == "finished" for s in fed.sites), 240,
                     f"{name} to finish")
        digests = {s.status(job)["anchor_digest"] for s in fed.sites}
        assert len(digests) == 1, (name, digests)
        rounds = fed["site-a"].status(job)["round"]
        assert rounds == (8 if "streaming" in name else 2), (name, rounds)  # 2 periods of F rounds
        print(f"{name}: {rounds} rounds on 3 sites, anchor {digests.pop()}")
print("ok")
