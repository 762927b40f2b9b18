"""What a crash cannot show: the order of the disk writes and the messages
that depend on them. Two daemons run under strace (the coordinator and a
participant) with GEOLOCO_LOG_LEVEL=debug, which logs each control message
as it is handed to the transport, through a short job. From the system
calls it checks, for every round:
  - the participant's vote: the round's averaged Δ written to
    deltas/round-N.delta.tmp and fsync'd, renamed into place, the folder
    fsync'd, then its journal's `pending` record written and fdatasync'd,
    and only then its COMMIT handed on;
  - the coordinator's decisions: each PLAN and COMMITTED handed on only
    after its journal record (`plan`, `committed`) was written and
    fdatasync'd.
A kill -9 leaves the page cache to the kernel, so a missing fsync passes
every crash scenario; only a power loss would show it, and this order is
what a power loss relies on. SKIPs where strace cannot trace (no ptrace)."""

import os
import re
import shutil
import subprocess

from scenario import Commits, Federation, arguments, mlp_job, run, verdict

args = arguments(__doc__, rounds=8)
NAME = "durable-order"

CALL = re.compile(r"^(\d+)\s+(?:\S+\s+)?(\w+)\((.*)$")
RESUMED = re.compile(r"^(\d+)\s+(?:\S+\s+)?<\.\.\. (\w+) resumed>(.*)$")
FD_PATH = re.compile(r"^\d+<([^>]*)>")


def events(path):
    """The traced calls in the order they completed, and the order they began:
    (kind, subject, text, began, done) with `subject` the path of the call's
    file descriptor (or the rename's target), `text` a write's data."""
    out, pending = [], {}
    with open(path, errors="replace") as f:
        for index, line in enumerate(f):
            line = line.rstrip("\n")
            m = RESUMED.match(line)
            if m:
                pid, name = m.group(1), m.group(2)
                began, head = pending.pop((pid, name), (None, None))
                if began is not None and "= -1" not in m.group(3):
                    out.append((name, *describe(name, head), began, index))
                continue
            m = CALL.match(line)
            if not m:
                continue
            pid, name, rest = m.groups()
            if rest.endswith("<unfinished ...>"):
                pending[(pid, name)] = (index, rest)
            elif "= -1" not in rest.rsplit(")", 1)[-1]:
                out.append((name, *describe(name, rest), index, index))
    return out


def describe(name, args_text):
    """(subject, text) of a call's arguments as strace printed them."""
    if name.startswith("rename"):
        paths = re.findall(r'"([^"]*)"', args_text)
        return (paths[-1] if paths else ""), ""
    m = FD_PATH.match(args_text)
    subject = m.group(1) if m else ""
    text = args_text.replace('\\"', '"') if name in ("write", "writev", "pwrite64") else ""
    return subject, text


def first_after(evs, start, pred):
    for e in evs:
        if e[3] > start and pred(e):
            return e
    return None


def last_before(evs, end, pred):
    found = None
    for e in evs:
        if e[4] < end and pred(e):
            found = e
    return found


def sent_lines(evs, kind):
    """(round, began) of each debug line "<kind> of round N to X" the daemon wrote to its log."""
    out = []
    for e in evs:
        if e[0] in ("write", "writev") and e[1].endswith("geolocod.log"):
            for m in re.finditer(rf"\] {kind} of round (\d+) to ", e[2]):
                out.append((int(m.group(1)), e[3]))
    return out


def journaled_then_synced(evs, journal, record_type, round_, before):
    """The write of `journal`'s `record_type` record of `round_` and its
    fdatasync, both done before `before`; the reason when not."""
    record = last_before(evs, before, lambda e: e[0] in ("write", "writev", "pwrite64") and e[1] == journal
                         and f'"type":"{record_type}"' in e[2] and re.search(rf'"round":{round_}[,}}]', e[2]))
    if not record:
        return None, f"no {record_type} record of round {round_} in {journal} before it was sent"
    synced = first_after(evs, record[3], lambda e: e[0] in ("fdatasync", "fsync") and e[1] == journal)
    if not synced or synced[4] > before:
        return None, f"the {record_type} record of round {round_} was not fdatasync'd before it was sent"
    return record, ""


def check_voter(evs, job_dir):
    journal = os.path.join(job_dir, "journal")
    deltas = os.path.join(job_dir, "deltas")
    commits = sent_lines(evs, "commit")
    assert commits, "the participant's log names no COMMIT sent (is GEOLOCO_LOG_LEVEL=debug honoured?)"
    checked = set()
    for round_, sent in commits:
        record, why = journaled_then_synced(evs, journal, "pending", round_, sent)
        assert record, why
        named = re.compile(rf"round-0*{round_}\.delta$")  # the name is zero-padded
        renamed = last_before(evs, record[3], lambda e: e[0].startswith("rename") and os.path.dirname(e[1]) == deltas
                              and named.search(e[1]))
        entry = renamed[1] if renamed else os.path.join(deltas, f"round-{round_}.delta")
        assert renamed, f"round {round_}'s Δ was not renamed into {entry} before its vote was journaled"
        data_synced = last_before(evs, renamed[3], lambda e: e[0] in ("fsync", "fdatasync") and e[1] == entry + ".tmp")
        assert data_synced, f"round {round_}'s Δ was renamed into place before its data was fsync'd"
        folder_synced = first_after(evs, renamed[4], lambda e: e[0] in ("fsync", "fdatasync") and e[1] == deltas)
        assert folder_synced and folder_synced[4] < record[3], \
            f"round {round_}'s vote was journaled before the rename of its Δ was made durable (folder fsync)"
        checked.add(round_)
    return checked


def check_coordinator(evs, job_dir):
    journal = os.path.join(job_dir, "journal")
    checked = {}
    for kind, record_type in (("plan", "plan"), ("committed", "committed")):
        lines = sent_lines(evs, kind)
        assert lines, f"the coordinator's log names no {kind.upper()} sent"
        for round_, sent in lines:
            record, why = journaled_then_synced(evs, journal, record_type, round_, sent)
            assert record, why
        checked[kind] = {r for r, _ in lines}
    return checked


def cannot_trace():
    """Why strace cannot run here, or None."""
    if not shutil.which("strace"):
        return "strace is not installed (scripts/install-deps.sh installs it)"
    probe = subprocess.run(["strace", "-f", "-qq", "-e", "trace=none", "true"], capture_output=True, text=True)
    return f"strace cannot trace here: {probe.stderr.strip()[:200]}" if probe.returncode != 0 else None


def body():
    with Federation(proxy=False, keep=args.keep) as fed:
        traces = {}
        for name in ("site-a", "site-b"):
            s = fed[name]
            traces[name] = os.path.join(fed.root, f"{name}.strace")
            s.wrap = ["strace", "-f", "-qq", "-tt", "-y", "-s", "65536", "-o", traces[name], "-e",
                      "trace=write,writev,pwrite64,fsync,fdatasync,rename,renameat,renameat2"]
            s.env["GEOLOCO_LOG_LEVEL"] = "debug"
        fed.start()
        fed["site-a"].cli("submit", fed.write_job(mlp_job(rounds=args.rounds, steps=10, width=32, min_sites=3)))
        commits = Commits(fed, "e2e")
        commits.finished(240)
        for s in fed.sites:
            s.kill()
        job = lambda name: os.path.join(fed[name].dir, "data", "jobs", "e2e")
        voted = check_voter(events(traces["site-b"]), job("site-b"))
        decided = check_coordinator(events(traces["site-a"]), job("site-a"))
        assert len(voted) >= args.rounds - 1, f"only rounds {sorted(voted)} of {args.rounds} were checked"
        fed.check_history("e2e")
    return (f"site-b's {len(voted)} votes: Δ fsync'd, renamed, folder fsync'd, journaled and fdatasync'd before "
            f"each COMMIT; site-a's {len(decided['plan'])} plans and {len(decided['committed'])} commits journaled "
            f"and fdatasync'd before they were sent")


why_not = cannot_trace()
if why_not:
    verdict(NAME, None, why_not)
run(NAME, body)
