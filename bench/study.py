#!/usr/bin/env python3
"""The DiLoCo study: does DiLoCo reach data parallelism's eval loss, for how
many fewer bytes, and how long does each take over a WAN link?

Every configuration trains at the same total compute (the same number of
inner samples or tokens summed over all sites) with `geoloco simulate`,
which runs each site's real built-in trainer and geolocod's round
arithmetic in one process (sim/README.md). Each configuration runs with
several seeds; the tables give the mean and the spread.

    bench/study.sh                 the default study (about 30 minutes on 2 cores)
    bench/study.sh --full          longer runs, every row on both models
    bench/study.sh --only gpt      one model's rows
    bench/study.sh --full --only gpt --headline --sites 4 --seeds 1 --no-write
                                   one longer check of the headline rows

Runs are cached by the hash of their job file, their arguments and the
geoloco binary (build/study-cache/), so a second run only redoes what
changed. The tables replace the part of bench/RESULTS.md between the study
markers; the plots go to bench/study/.
"""
import argparse
import copy
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The link models of the wall-clock columns, and the simulator's model of an
# exchange on them (common/wan_model.h): 3·RTT for a geolocod round (2·RTT
# for data parallelism's all-reduce, which it pays every step) plus the
# busiest site's bytes at the link rate.
LINKS = {"1G-100ms": (1e9, 100.0), "100M-100ms": (100e6, 100.0)}
ROUND_TRIPS, DATA_PARALLEL_ROUND_TRIPS = 3, 2  # kRoundTrips, kDataParallelRoundTrips there


def exchange_seconds(max_site_bytes, link, round_trips):
    bandwidth, rtt_ms = LINKS[link]
    return round_trips * rtt_ms / 1000 + max_site_bytes * 8 / bandwidth


# ---------------------------------------------------------------- the models

# The built-in models, their inner optimizer, and the settings each side
# trains with. Each side has its own tuned learning rate, as the papers
# compare: `dp_lr` for one site and data parallelism, `diloco_lr` and
# `outer` for DiLoCo, chosen from sweeps at the default scale (the
# "Learning rates" and "Outer optimizer" tables show the runs they were
# chosen from; bench/README.md says how).
MODELS = {
    "gpt": {"trainer": {"kind": "builtin", "model": "gpt", "layers": 2, "width": 128, "heads": 4, "context": 64},
            "inner": {"optimizer": "adamw", "batch": 16, "warmup": 20, "weight_decay": 0.01,
                      "clip": 1.0},
            "dp_lr": 0.004, "diloco_lr": 0.004, "lrs": [0.002, 0.004],
            "outer": {"optimizer": "nesterov", "lr": 1.0, "momentum": 0.5}},
    "mlp": {"trainer": {"kind": "builtin", "model": "mlp", "layers": 2, "width": 64},
            "inner": {"optimizer": "adamw", "batch": 32, "warmup": 10, "weight_decay": 0.01,
                      "clip": 1.0},
            "dp_lr": 0.002, "diloco_lr": 0.002, "lrs": [0.002, 0.003],
            "outer": {"optimizer": "nesterov", "lr": 0.8, "momentum": 0.6}},
}

# The papers' outer setting (DiLoCo, OpenDiLoCo): reported next to ours.
PAPERS_OUTER = {"optimizer": "nesterov", "lr": 0.7, "momentum": 0.9}


class Run:
    """One configuration at one seed: a job file and simulate's arguments."""

    def __init__(self, model, sites, steps, h, seed, dp=False, outer=None, compression=None, streaming=None,
                 inner=None, data="interleaved"):
        self.model, self.sites, self.steps, self.h, self.seed, self.dp = model, sites, steps, h, seed, dp
        base = copy.deepcopy(MODELS[model])
        base["inner"]["lr"] = base["dp_lr"] if dp else base["diloco_lr"]
        job = {"name": "study", "sites": [f"site-{i + 1}" for i in range(sites)], "coordinator": "site-1",
               "seed": seed, "trainer": dict(base["trainer"], data=data),
               "inner": dict(base["inner"], steps=h, **(inner or {})),
               "outer": outer or base["outer"],
               "straggler": {"deadline": "60s", "min_sites": sites}, "stop": {"rounds": steps // h}}
        if compression is not None:
            job["compression"] = compression
        if streaming is not None:
            job["streaming"] = streaming
        self.job = job
        self.args = ["--data-parallel"] if dp else []

    def key(self, binary_digest):
        text = json.dumps([self.job, self.args, binary_digest], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:20]


def file_digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def execute(run, binary, cache_dir, binary_digest):
    """Runs (or reads from the cache) one simulation; returns its measured figures."""
    key = run.key(binary_digest)
    path = os.path.join(cache_dir, key + ".json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    job_path = os.path.join(cache_dir, key + ".job.json")
    with open(job_path, "w") as f:
        json.dump(run.job, f)
    started = time.monotonic()
    with open(os.path.join(cache_dir, key + ".stderr"), "w") as err:
        proc = subprocess.Popen([binary, "simulate", job_path, "--json"] + run.args, stdout=subprocess.PIPE,
                                stderr=err, text=True)
        out = proc.stdout.read()
        proc.stdout.close()
        # wait4, not wait: the child's own CPU time is the run's compute.
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        with open(os.path.join(cache_dir, key + ".stderr")) as f:
            raise RuntimeError(f"geoloco simulate {job_path} {' '.join(run.args)} exited {proc.returncode}: "
                               f"{f.read().strip()[-400:]}")
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    summary = next(line for line in lines if line.get("summary"))
    result = {"wall_seconds": time.monotonic() - started, "cpu_seconds": usage.ru_utime + usage.ru_stime,
              "parameters": summary["parameters"], "summary": summary,
              "rounds": [line for line in lines if not line.get("summary")]}
    with open(path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(path + ".tmp", path)
    return result


def run_all(runs, binary, cache_dir, jobs):
    os.makedirs(cache_dir, exist_ok=True)
    digest = file_digest(binary)
    # Tables share cells (the tuned setting appears in several): each distinct run once.
    unique = list({r.key(digest): r for r in runs}.values())
    todo = [r for r in unique if not os.path.exists(os.path.join(cache_dir, r.key(digest) + ".json"))]
    print(f"study: {len(unique)} distinct runs, {len(unique) - len(todo)} cached, {len(todo)} to simulate with "
          f"{jobs} at a time", flush=True)
    done = [0]
    started = time.monotonic()

    def one(r):
        res = execute(r, binary, cache_dir, digest)
        done[0] += 1
        print(f"  [{done[0]}/{len(unique)}] {describe(r)}: eval {final_loss(res):.4f} "
              f"({res['wall_seconds']:.0f} s; {time.monotonic() - started:.0f} s in all)", flush=True)
        return res

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        by_key = dict(zip((r.key(digest) for r in unique), pool.map(one, unique)))
    return [by_key[r.key(digest)] for r in runs]


# ---------------------------------------------------------------- figures of a run


def final_loss(res):
    losses = [r["eval_loss"] for r in res["rounds"] if r.get("eval_loss") is not None]
    return losses[-1]


def final_accuracy(res):
    acc = [r.get("accuracy") for r in res["rounds"] if r.get("eval_loss") is not None]
    return acc[-1] if acc else None


def bytes_per_site(run, res):
    """Bytes each site sent, averaged over the sites (DiLoCo: measured by the
    exchange; data parallelism: the all-reduce bound the simulator computes)."""
    if run.dp:
        return sum(r["bytes_per_site"] for r in res["rounds"]) if run.sites > 1 else 0
    totals = [0] * run.sites
    for r in res["rounds"]:
        for i, b in enumerate(r["bytes_sent"]):
            totals[i] += b
    return sum(totals) / run.sites


def curve(run, res, step_seconds, link):
    """(bytes per site so far, wall-clock seconds so far, eval loss) after each
    evaluated round, on `link`. A site computes H steps of step_seconds, then
    exchanges; with Streaming DiLoCo each fragment's exchange hides behind τ
    steps, and only what exceeds them adds to the wall-clock."""
    points, sent, wall = [], 0.0, 0.0
    overlap = (run.job.get("streaming") or {}).get("overlap", 0)
    fragments = (run.job.get("streaming") or {}).get("fragments", 1)
    for r in res["rounds"]:
        if run.dp:
            per_step = r["bytes_per_site"] / run.h if run.sites > 1 else 0
            sent += r["bytes_per_site"] if run.sites > 1 else 0
            exchange = exchange_seconds(per_step, link, DATA_PARALLEL_ROUND_TRIPS) if run.sites > 1 else 0
            wall += run.h * (step_seconds + exchange)
        else:
            busiest = max(r["bytes_sent"])
            sent += sum(r["bytes_sent"]) / run.sites
            wall += run.h / fragments * step_seconds + max(0.0, exchange_seconds(busiest, link, ROUND_TRIPS) -
                                                          overlap * step_seconds)
        if r.get("eval_loss") is not None:
            points.append((sent, wall, r["eval_loss"]))
    return points


def describe(run):
    j = run.job
    if run.dp:
        return (f"{run.model} {'one site' if run.sites == 1 else f'data parallel k={run.sites}'} "
                f"lr {j['inner']['lr']} seed {run.seed}")
    return (f"{run.model} DiLoCo k={run.sites} H={run.h} inner lr {j['inner']['lr']} "
            f"outer {j['outer'].get('lr')}/{j['outer'].get('momentum', 0)} "
            f"{j['trainer']['data']} {json.dumps(j.get('compression', 'fp32'))} seed {run.seed}")


# ---------------------------------------------------------------- the study's tables

Q8 = [{"quantize": {"bits": 8}}, "zstd"]
Q4 = [{"quantize": {"bits": 4}}, "zstd"]


def sparse(density, feedback=True):
    """SparseLoCo's setting: top-k at `density`, 2-bit values, with or without error feedback."""
    return {"pipeline": [{"topk": {"density": density}}, {"quantize": {"bits": 2}}, "zstd"],
            "error_feedback": "on" if feedback else "off"}


def outer_label(o):
    return f"Nesterov lr {o['lr']}, momentum {o.get('momentum', 0)}"


def tables(model, scale, seeds):
    """The study's tables for one model: (title, what the rows vary, [(label, [Run per seed])])."""
    budget, h = scale["site_steps"], scale["h"]
    k_main = 4
    spec = MODELS[model]
    ours = outer_label(spec["outer"])

    def cell(k, hh=h, **kw):
        steps = budget // k
        steps -= steps % hh
        return [Run(model, k, steps, hh, seed, **kw) for seed in seeds]

    def dp(k, **kw):
        return cell(k, dp=True, **kw)

    out = [("Baselines and sites", f"equal compute: one site runs k times the steps; data parallelism all-reduces "
            f"every step with the global batch of k sites, inner lr {spec['dp_lr']}; DiLoCo inner lr "
            f"{spec['diloco_lr']}, {ours}, int8 + zstd",
            [("one site alone", dp(1))] +
            [(f"data parallel, k = {k}", dp(k)) for k in scale["sites"]] +
            [(f"DiLoCo, k = {k}, H = {h}", cell(k, compression=Q8)) for k in scale["sites"]])]
    extra = [
        ("Learning rates", f"k = {k_main}, H = {h}, int8 + zstd, {ours}: each side's inner lr swept; the "
         f"other tables use data parallelism's {spec['dp_lr']} and DiLoCo's {spec['diloco_lr']}",
         [(f"data parallel, inner lr {lr}", dp(k_main, inner={"lr": lr})) for lr in spec["lrs"]] +
         [(f"DiLoCo, inner lr {lr}", cell(k_main, compression=Q8, inner={"lr": lr})) for lr in spec["lrs"]]),
        ("Inner steps per round", f"k = {k_main}, int8 + zstd, {ours}",
         [(f"H = {hh}", cell(k_main, hh, compression=Q8)) for hh in scale.get("h_range", [h])]),
        ("Outer optimizer and data", f"k = {k_main}, H = {h}, int8 + zstd; momentum 0 with lr 1 is plain "
         "averaging; 0.7 / 0.9 is the DiLoCo paper's setting",
         [(outer_label(o), cell(k_main, compression=Q8, outer=dict(o, optimizer="nesterov")))
          for o in [{"lr": 1.0, "momentum": 0.0}, {"lr": 1.4, "momentum": 0.0}, {"lr": 1.0, "momentum": 0.5},
                    {"lr": 0.8, "momentum": 0.6}, {"lr": 0.5, "momentum": 0.8}, PAPERS_OUTER]] +
         [(f"{ours}, inner lr warm-up of 10 steps in every phase",
           cell(k_main, compression=Q8, inner={"phase_warmup": 10})),
          (f"contiguous shards (each site its own part of the data), {ours}",
           cell(k_main, compression=Q8, data="contiguous"))]),
        ("Compression", f"k = {k_main}, H = {h}, {ours}",
         [("fp32 (none)", cell(k_main)), ("int8 + zstd", cell(k_main, compression=Q8)),
          ("int4 + zstd", cell(k_main, compression=Q4)),
          ("top-k 3% + 2-bit, error feedback", cell(k_main, compression=sparse(0.03))),
          ("top-k 1% + 2-bit, error feedback", cell(k_main, compression=sparse(0.01))),
          ("top-k 1% + 2-bit, no error feedback", cell(k_main, compression=sparse(0.01, False)))]),
        ("Streaming DiLoCo", f"k = {k_main}, H = {h}, int8 + zstd, {ours}, α = 0.5 where it applies",
         [("F = 1 (plain)", cell(k_main, compression=Q8))] +
         [(f"F = {f}, τ = {tau}", cell(k_main, compression=Q8,
                                      streaming={"fragments": f, "overlap": tau, "alpha": 0.5}))
          for f, tau in [(2, 0), (2, 5), (4, 5)]]),
        ("Delayed outer step", f"k = {k_main}, H = {h}, int8 + zstd, {ours}: the synchronous outer step against "
         f"the delayed one, whose exchange runs behind the next {h - 1} steps; compute share is the modelled "
         "fraction of the wall-clock a site computes",
         [("synchronous (the site waits for the round)", cell(k_main, compression=Q8)),
          (f"delayed (merge: delayed, τ = {h - 1})",
           cell(k_main, compression=Q8, streaming={"merge": "delayed", "overlap": h - 1}))]),
    ]
    return out + [t for t in extra if t[0] in scale["tables"]]


ALL_TABLES = ["Learning rates", "Inner steps per round", "Outer optimizer and data", "Compression",
              "Streaming DiLoCo", "Delayed outer step"]

SCALES = {
    # site_steps: inner steps summed over the sites of a cell.
    # The default fits in about 30 minutes on 2 cores: gpt's two headline
    # cells dominate it; mlp runs every table with 16 to 64 rounds of H = 50.
    # tables: which of the tables after the headline one a model runs.
    "default": {"gpt": {"site_steps": 2160, "h": 30, "sites": [4], "tables": ["Learning rates", "Delayed outer step"]},
                "mlp": {"site_steps": 12800, "h": 50, "sites": [2, 4, 8], "tables": ALL_TABLES,
                        "h_range": [10, 50, 100]}},
    "full": {"gpt": {"site_steps": 5760, "h": 30, "sites": [2, 4, 8], "tables": ALL_TABLES, "h_range": [10, 30, 90]},
             "mlp": {"site_steps": 51200, "h": 50, "sites": [2, 4, 8], "tables": ALL_TABLES,
                     "h_range": [10, 50, 100]}},
}


# ---------------------------------------------------------------- the report


def mean_spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    return statistics.fmean(values), (max(values) - min(values)) / 2


def fmt(value, spread=None, digits=4):
    if value is None:
        return "–"
    text = f"{value:.{digits}f}"
    return text + (f" ± {spread:.{digits}f}" if spread else "")


def human_bytes(n):
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def summarize(model, title, note, rows, results, step_seconds, references):
    """One markdown table; `references` maps a number of sites to data
    parallelism's (eval loss, bytes per site) with that many sites: each row
    is compared with data parallelism across as many sites as it has."""
    acc_col = model == "mlp"
    head = ["configuration", "seeds", "final eval loss", "vs data parallel"]
    head += ["accuracy"] if acc_col else []
    head += ["bytes per site", "fewer bytes than data parallel", "compute s (all sites)"]
    head += [f"wall-clock, {link}" for link in LINKS] + [f"compute share, {link}" for link in LINKS]
    lines = [f"#### {model}: {title}", "", note + ".", "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    for label, runs in rows:
        res = [results[id(r)] for r in runs]
        loss, loss_spread = mean_spread([final_loss(x) for x in res])
        acc, acc_spread = mean_spread([final_accuracy(x) for x in res])
        sent = statistics.fmean(bytes_per_site(r, x) for r, x in zip(runs, res))
        cpu = statistics.fmean(x["cpu_seconds"] for x in res)
        walls = {link: statistics.fmean(curve(r, x, step_seconds, link)[-1][1] for r, x in zip(runs, res))
                 for link in LINKS}
        reference = references.get(runs[0].sites) if not (runs[0].dp and runs[0].sites > 1) else None
        vs = f"{(loss / reference[0] - 1) * 100:+.1f}%" if reference else "–"
        fewer = f"{reference[1] / sent:,.0f}x" if reference and sent > 0 else "–"
        cells = [label, str(len(runs)), fmt(loss, loss_spread), vs]
        cells += [fmt(acc, acc_spread)] if acc_col else []
        # A site's compute share of the wall-clock: its steps at the measured step time over the modelled wall.
        shares = {link: statistics.fmean(r.steps * step_seconds / curve(r, x, step_seconds, link)[-1][1]
                                         for r, x in zip(runs, res)) for link in LINKS}
        cells += [human_bytes(sent), fewer, f"{cpu:.0f}"] + [f"{walls[link]:,.0f} s" for link in LINKS]
        cells += [f"{shares[link] * 100:.1f}%" for link in LINKS]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def plot(model, headline, results, step_seconds, out_dir):
    """Loss against bytes sent and against wall-clock on each link, one curve
    per configuration of the headline table (seed 1's run)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    paths = []
    panels = [("bytes", "bytes sent per site", None)] + [("wall", f"wall-clock, {link} (s)", link) for link in LINKS]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5))
    for ax, (kind, xlabel, link) in zip(axes, panels):
        for index, (label, runs) in enumerate(headline):
            run = runs[0]
            pts = curve(run, results[id(run)], step_seconds, link or "1G-100ms")
            if kind == "bytes" and bytes_per_site(run, results[id(run)]) == 0:
                continue  # one site sends nothing: no place on a log axis
            xs = [p[0] if kind == "bytes" else p[1] for p in pts]
            # One colour per configuration in every panel (the bytes panel has no one-site curve).
            ax.plot(xs, [p[2] for p in pts], marker="o", markersize=3, label=label, color=f"C{index}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("eval loss")
        ax.set_xscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[-1].legend(fontsize=8)
    fig.suptitle(f"{model}: eval loss at equal compute (seed {headline[0][1][0].seed})")
    fig.tight_layout()
    path = os.path.join(out_dir, f"{model}-loss.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)
    return paths


MARK_BEGIN, MARK_END = "<!-- study: begin (bench/study.sh writes this part) -->", "<!-- study: end -->"


def write_results(text, results_md):
    with open(results_md) as f:
        doc = f.read()
    block = f"{MARK_BEGIN}\n{text}\n{MARK_END}"
    if MARK_BEGIN in doc and MARK_END in doc:
        before, rest = doc.split(MARK_BEGIN, 1)
        doc = before + block + rest.split(MARK_END, 1)[1]
    else:
        doc = doc.rstrip("\n") + "\n\n## The DiLoCo study (bench/study.sh)\n\n" + block + "\n"
    with open(results_md, "w") as f:
        f.write(doc)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true", help="longer runs, every table on both models")
    ap.add_argument("--only", choices=sorted(MODELS), help="one model's tables")
    ap.add_argument("--seeds", type=int, default=2, help="seeds per configuration (default 2)")
    ap.add_argument("--headline", action="store_true", help="only the first table (baselines and sites)")
    ap.add_argument("--sites", type=int, nargs="+", help="the site counts k of the first table (default: the scale's)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="simulations at a time")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "bin", "geoloco"))
    ap.add_argument("--cache", default=os.path.join(ROOT, "build", "study-cache"))
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "RESULTS.md"))
    ap.add_argument("--plots", default=os.path.join(ROOT, "bench", "study"))
    ap.add_argument("--no-write", action="store_true", help="print the tables, leave RESULTS.md as it is")
    a = ap.parse_args()
    scale_name = "full" if a.full else "default"
    seeds = list(range(1, a.seeds + 1))
    models = [a.only] if a.only else list(MODELS)
    scales = {m: dict(SCALES[scale_name][m]) for m in models}
    for scale in scales.values():
        if a.sites:
            scale["sites"] = a.sites
        if a.headline:
            scale["tables"] = []
    plan = {m: tables(m, scales[m], seeds) for m in models}
    runs = [r for m in models for _, _, rows in plan[m] for _, rs in rows for r in rs]
    started = time.monotonic()
    results = dict(zip((id(r) for r in runs), run_all(runs, a.binary, a.cache, a.jobs)))
    os.makedirs(a.plots, exist_ok=True)
    distinct = len({json.dumps([r.job, r.args], sort_keys=True) for r in runs})
    text = [f"`bench/study.sh{' --full' if a.full else ''}`, {time.strftime('%Y-%m-%d')}, {distinct} distinct runs "
            f"(seeds {seeds[0]}-{seeds[-1]}), {time.monotonic() - started:.0f} s on {os.cpu_count()} cores "
            "(cached runs not counted)."]
    for m in models:
        scale = scales[m]
        headline = plan[m][0][2]
        one_site = headline[0][1]
        # A site's seconds per inner step: the one-site run's CPU time over its steps.
        step_seconds = statistics.fmean(results[id(r)]["cpu_seconds"] / r.steps for r in one_site)
        references = {}
        for label, rows in headline:
            if rows[0].dp and rows[0].sites > 1:
                references[rows[0].sites] = (statistics.fmean(final_loss(results[id(r)]) for r in rows),
                                             statistics.fmean(bytes_per_site(r, results[id(r)]) for r in rows))
        text.append(f"\n### {m}: {scale['site_steps']} inner steps summed over the sites per configuration "
                    f"(batch {MODELS[m]['inner']['batch']} per site), a site step measured at "
                    f"{step_seconds * 1000:.1f} ms")
        for title, note, rows in plan[m]:
            text.append("")
            text += summarize(m, title, note + "; each row compared with data parallelism across as many sites",
                              rows, results, step_seconds, references)
        for path in plot(m, headline, results, step_seconds, a.plots):
            text.append(f"\n![{m}]({os.path.relpath(path, os.path.dirname(a.results))})")
    report = "\n".join(text)
    print(report)
    if not a.no_write:
        write_results(report, a.results)


if __name__ == "__main__":
    main()
