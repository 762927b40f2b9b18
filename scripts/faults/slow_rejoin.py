"""A site rejoins over slow links while the others commit a round every few
seconds: with each of site-c's links capped (1 MB/s by default, shared by
the link's connections), site-c is killed, two rounds pass, and it comes
back while site-a and site-b go on; twice: first with its disk (it holds an
older committed round: only the rounds since may come, as the holders'
round-log entries, which it keeps in its own round log instead of writing
a checkpoint: killed again at once, it rebuilds them from its own
checkpoint), then as a replaced machine (its checkpoint and round log
deleted: the whole state once, consistent at the first try, then the rounds
committed meanwhile as entries), until it trains with the others. Never a
checksum mismatch, a transfer abandoned or a state that "moved past" in any
log. Each transfer, from the
request to the state in place, is held to 1.2x its bound: the bytes it
fetched over the capped links of the holders that sent them (plus one
second for the request, the offer and the step). Ends with the history
checker."""

import os
import re
import shutil
import time

from scenario import Commits, Federation, arguments, contributes_after, link_name, mlp_job, run

# A 2048-wide MLP: 1.6M parameters, a 13 MB state (14 frames of 1 MiB), 1.6 MB per round with q8.
# --bound-factor 0: the transfers' times are printed next to their bounds, not held to them (a
# model so large that this machine's two cores, not the capped links, set the pace).
args = arguments(__doc__, rounds=24, width=2048, rate="8M", steps=10, bound_factor=1.2, step_delay_ms=20)
NAME = "slow-rejoin"
RECEIVED = re.compile(r"state of round (\d+) received from ([a-z, -]+?)(?: \(\d+ of its \d+ frames kept from before "
                      r"the transfer stalled\))?: (\d+) parameters, (\d+) bytes in ([0-9.]+) s \([0-9.]+ MB/s\), "
                      r"anchor [0-9a-f]+( \(as [^)]*\))?(, stepped where this site's state lies)?")
BAD = ("checksum mismatch", "transfer abandoned", "moved past round", "abandoned:")


def rate_bytes(text):
    """'8M' (bit/s, as the proxy takes it) in bytes per second."""
    units = {"K": 1e3, "M": 1e6, "G": 1e9}
    return float(text[:-1]) * units[text[-1]] / 8 if text[-1] in units else float(text) / 8


def rejoin(fed, commits, lose_disk):
    """Kills site-c, lets two rounds pass, and starts it again (with its
    checkpoint and round log deleted when `lose_disk`: a replaced machine)
    until it trains with the others. Returns what its log says it took, and
    (with its disk) the most memory its daemon held through the catch-up."""
    c = fed["site-c"]
    c.kill()
    commits.wait_round(commits.poll() + 2, 120, "two rounds without site-c")
    if lose_disk:
        job_dir = os.path.join(c.dir, "data", "jobs", "e2e")
        os.remove(os.path.join(job_dir, "checkpoint.safetensors"))
        shutil.rmtree(os.path.join(job_dir, "deltas"))
    size = len(open(c.log_path).read())
    before = commits.poll()
    c.start()
    restarted = time.monotonic()
    peak = None if lose_disk else rebuilt_after_install(fed, c, size)
    contributes_after(fed, c, before, seconds=600)  # its work is in a round again
    took = time.monotonic() - restarted
    transfers = list(RECEIVED.finditer(open(c.log_path).read()[size:]))
    assert transfers, "site-c took no state"
    return before, commits.poll(), took, transfers, peak


def peak_bytes(pid):
    """The most memory the process has held (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def rebuilt_after_install(fed, c, size):
    """With its disk, site-c is given the rounds it missed as entries it
    steps on its own state; it keeps them in its own round log instead of
    writing a checkpoint. Killed at once and started again, it rebuilds
    the installed round from its older checkpoint through those entries."""
    kept = re.compile(r"rounds (\d+)\.\.(\d+) are kept in this site's round log")
    fed.wait_for(lambda: kept.search(open(c.log_path).read()[size:]), 120, "site-c to keep the installed rounds")
    peak = peak_bytes(c.process.pid)
    c.kill()
    text = open(c.log_path).read()[size:]
    first, installed = (int(x) for x in kept.search(text).groups())
    assert f"checkpoint of round {installed} saved" not in text, f"site-c wrote a checkpoint of round {installed}"
    size = len(open(c.log_path).read())
    c.start()
    replayed = re.compile(r"rounds (\d+)\.\.(\d+) replayed from the round log on the checkpoint of round (\d+)")
    fed.wait_for(lambda: replayed.search(open(c.log_path).read()[size:]), 60, "site-c to replay its round log")
    frm, to, on = (int(x) for x in replayed.search(open(c.log_path).read()[size:]).groups())
    assert on < first and to >= installed, \
        f"site-c replayed rounds {frm}..{to} on its checkpoint of round {on}, not through rounds {first}..{installed}"
    print(f"site-c kept rounds {first}..{installed} of the installed state in its round log; killed at once and "
          f"started again, it replayed rounds {frm}..{to} on its checkpoint of round {on}", flush=True)
    return peak


def check_transfers(transfers, per_link, whole_first):
    """Each transfer within 1.2x its bound; the whole state at most once, first."""
    whole = [m for m in transfers if "of the round log, on round" not in (m.group(6) or "")]
    if whole_first:
        assert len(whole) == 1 and transfers[0] is whole[0], "the whole state was not taken exactly once, first:\n" + \
            "\n".join(m.group(0) for m in transfers)
    else:
        assert not whole, "the whole state was taken though site-c's disk held a committed round:\n" + \
            "\n".join(m.group(0) for m in whole)
    # Nothing else reads its state while it catches up (a trainer's base is
    # copied apart): no copy of anchor and momentum is stepped.
    copied = [m.group(0) for m in transfers if m not in whole and not m.group(7)]
    assert not copied, "site-c stepped the rounds it was sent on a copy of its state:\n" + "\n".join(copied)
    lines = []
    for m in transfers:
        senders = [s for s in re.split(r", | and ", m.group(2)) if s]
        nbytes, seconds = int(m.group(4)), float(m.group(5))
        bound = nbytes / (per_link * len(senders))
        lines.append(f"  round {m.group(1)}: {nbytes} bytes from {len(senders)} holder(s) in {seconds:.2f} s, "
                     f"bound {bound:.2f} s ({seconds / bound:.2f}x){m.group(6) or ''}{m.group(7) or ''}")
        if args.bound_factor > 0:
            assert seconds <= args.bound_factor * bound + 1.0, f"over {args.bound_factor}x the bound: {lines[-1]}"
    print("\n".join(lines), flush=True)
    return len(transfers) - len(whole)


def body():
    per_link = rate_bytes(args.rate)
    with Federation(proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = str(args.step_delay_ms)
        fed.start()
        job = mlp_job(rounds=args.rounds, steps=args.steps, width=args.width, deadline="4s", min_sites=2, every=5,
                      compression="[{quantize: {bits: 8}}, zstd]", eval_items=200)
        fed["site-a"].cli("submit", fed.write_job(job))
        commits = Commits(fed, "e2e")
        commits.wait_round(3, 240, "round 3")
        for peer in ("site-a", "site-b"):
            fed.proxy.set(link_name(peer, "site-c"), both={"rate": args.rate})
        results = []
        for lose_disk in (False, True):
            before, after, took, transfers, peak = rejoin(fed, commits, lose_disk)
            if peak:
                params = int(transfers[0].group(3))
                print(f"site-c's daemon held at most {peak / params:.1f} bytes a parameter (VmHWM, {peak} bytes) "
                      f"from its start through the catch-up", flush=True)
            print(f"site-c back {'without' if lose_disk else 'with'} its disk after round {before}: trains again "
                  f"{took:.1f} s later, at round {after}", flush=True)
            catch_ups = check_transfers(transfers, per_link, whole_first=lose_disk)
            first = transfers[0]
            results.append(f"{'a replaced machine' if lose_disk else 'a restart'} trained again in {took:.1f} s "
                           f"(rounds {before}..{after} committed meanwhile; first transfer {first.group(4)} bytes in "
                           f"{first.group(5)} s, {catch_ups} of {len(transfers)} transfers round-log entries only)")
        for s in fed.sites:
            text = open(s.log_path).read()
            for bad in BAD:
                assert bad not in text, f"{s.name}'s log says '{bad}':\n" + "\n".join(
                    l for l in text.splitlines() if bad in l)
        fed.proxy.heal()
        commits.finished(600)
        fed.check_history("e2e")
    return (f"site-c rejoined over {args.rate}bit/s links while the others committed: " + "; ".join(results) +
            f"; no checksum mismatch or abandoned transfer; {args.rounds} rounds on one digest")


run(NAME, body)
