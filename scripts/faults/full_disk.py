"""A full disk: a site's data folder on a small tmpfs, filled while the job
runs. Saving its checkpoint and status fails with "No space left on device"
and leaves no half-written file; the history's records wait in memory while
the site's trainer work is kept out of rounds; once there is room the
records are written, in order, and the site contributes again. Then the
same on the acting coordinator (its data folder on a small tmpfs from the
start): it cannot journal its next decision, sends nothing of it, and hands
the office on; the job goes on under a successor, which the old
coordinator follows though it cannot journal that; once its disk is freed
it catches up and contributes again without a restart, and again once
restarted on its own folder. Needs root
(to mount the tmpfs): otherwise the verdict is SKIP. Ends with the history
checker."""

import contextlib
import glob
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

from scenario import Commits, Federation, arguments, contributes_after, epoch_of, mlp_job, run, verdict

args = arguments(__doc__, rounds=50)
NAME = "full-disk"


def body():
    with Federation(proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "25"
        # The coordinator's data folder is small from the start: restarting
        # it there later would hand the office on at once (its connections
        # close), and the coordinator's part needs it in office.
        with small_data_folder(fed["site-a"], size="8m") as data_a:
            fed.start()
            fed["site-a"].cli("submit", fed.write_job(
                mlp_job(rounds=args.rounds, steps=20, deadline="2s", min_sites=2, every=1)))
            commits = Commits(fed, "e2e")
            commits.wait_round(3, 120, "round 3")
            note, listed = full_disk(fed, commits)
            print(note, flush=True)
            # The rounds site-b listed on the full disk were written once there
            # was room: started again, it lists them all.
            now = {r["round"] for r in fed["site-b"].status("e2e")["rounds"]}
            missing = sorted(set(listed) - now)
            assert not missing, f"site-b, started again, no longer lists rounds {missing}"
            note += f"; started again, it lists all {len(listed)} rounds it had listed"
            epoch, holder, freed = coordinator_full_disk(fed, commits, data_a)
            # Freed, the old coordinator resumes on its own: no restart.
            a = fed["site-a"]
            contributes_after(fed, a, freed)
            assert epoch_of(a)[0] >= epoch, f"site-a follows {epoch_of(a)}, older than epoch {epoch} of {holder}"
            said = a.status("e2e").get("message", "")
            assert "cannot journal" not in said, f"site-a's status still says it cannot journal: {said}"
            back = commits.poll()
        # Started again on its own folder, it follows the office and contributes too.
        contributes_after(fed, a, back)
        note += (f"; full disk on the coordinator site-a: it said it cannot journal, {holder} took epoch {epoch} and "
                 f"the job went on; freed, site-a contributed again without a restart, and again once restarted "
                 f"on its own folder")
        commits.finished(300)
        fed.check_history("e2e")
    return note


@contextlib.contextmanager
def kept_full(data):
    """Keeps `data`'s filesystem full while inside: whatever the daemon frees
    (a round-log entry cut, a refused write's temporary file removed) is
    taken again within 20 ms, so the journal stays unwritable rather than
    finding room between a deletion and the next large write."""
    stop = threading.Event()
    path = os.path.join(data, "filler-top-up")

    def top_up():
        with open(path, "ab", buffering=0) as f:
            block = b"\0" * 4096
            while not stop.is_set():
                try:
                    while f.write(block):
                        pass
                except OSError:
                    pass
                try:
                    f.write(b"\0")  # the last bytes of a page
                except OSError:
                    pass
                time.sleep(0.02)

    t = threading.Thread(target=top_up, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
        os.remove(path)


def coordinator_full_disk(fed, commits, data):
    """The acting coordinator's data folder filled: it cannot journal its
    next decision, says so, hands the office on after a heartbeat timeout,
    and the job goes on under a successor. Returns the successor's epoch,
    its name, and the round when the disk was freed."""
    a = fed["site-a"]
    assert epoch_of(a)[1] == "site-a", f"site-a does not hold the office: {epoch_of(a)}"
    size = len(open(a.log_path).read())
    filler = os.path.join(data, "filler")
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)
    with kept_full(data):
        fed.wait_for(lambda: "cannot journal" in open(a.log_path).read()[size:], 60,
                     "site-a to say it cannot journal a decision")
        # Counted by its metrics too.
        fed.wait_for(lambda: a.metrics().get(("geoloco_journal_write_failures_total", (("job", "e2e"),)), 0) > 0, 30,
                     "site-a's metrics to count its refused journal writes")
        fed.wait_for(lambda: epoch_of(fed["site-b"])[0] > 0 and epoch_of(fed["site-b"])[1] != "site-a", 60,
                     "a successor to take the office from the full coordinator")
        epoch, holder = epoch_of(fed["site-b"])
        at = commits.poll()
        commits.wait_round(at + 3, 120, f"three rounds under {holder} while site-a's disk is full")
    os.remove(filler)
    return epoch, holder, commits.poll()


@contextlib.contextmanager
def small_data_folder(site, size="4m"):
    """The site's data folder on a small tmpfs (a copy of what it held),
    restarted there if it was running; at the end what it wrote there goes
    back to its real folder and it is restarted on it."""
    running = site.process is not None and site.process.poll() is None
    if running:
        site.kill()
    data = os.path.join(site.dir, "data")
    saved = data + ".saved"
    os.makedirs(data, exist_ok=True)
    os.rename(data, saved)
    os.makedirs(data)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", data], check=True)
    try:
        # The built-in trainer's decompressed dataset is a cache, larger than
        # the small disk: left behind (the trainer decompresses it again, and
        # does not cache it on a disk it would fill).
        for cache in glob.glob(os.path.join(saved, "jobs", "*", "dataset-cache")):
            shutil.rmtree(cache)
        subprocess.run(["cp", "-a", saved + "/.", data], check=True)
        if running:
            site.start()
        yield data
    finally:
        # What the site wrote on the small disk (its history above all) goes
        # back to its real folder.
        site.kill()
        subprocess.run(["rm", "-rf", saved], check=False)
        os.makedirs(saved)
        subprocess.run(["cp", "-a", data + "/.", saved], check=False)
        subprocess.run(["umount", "-l", data], check=False)
        os.rmdir(data)
        os.rename(saved, data)
        filler = os.path.join(data, "filler")
        if os.path.exists(filler):
            os.remove(filler)
        site.start()


def full_disk(fed, commits):
    """site-b's data folder on a tmpfs with room for little more than its state, then filled."""
    b = fed["site-b"]
    size = len(open(b.log_path).read())
    with small_data_folder(b) as data:
        commits.wait_round(commits.poll() + 2, 120, "two rounds with site-b on the small disk")
        filler = os.path.join(data, "filler")
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)
        at = commits.poll()
        fed.wait_for(lambda: "No space left on device" in open(b.log_path).read()[size:], 60,
                     "site-b to say its disk is full")
        commits.wait_round(at + 8, 120, "eight rounds while site-b's disk is full")
        leftovers = [n for n in os.listdir(os.path.join(data, "jobs", "e2e")) if n.endswith(".tmp")]
        assert not leftovers, f"half-written files left on the full disk: {leftovers}"
        log = open(b.log_path).read()[size:]
        assert "the history cannot be written" in log, "site-b never said its history could not be written"
        os.remove(filler)
        freed = commits.poll()
        contributes_after(fed, b, freed)
        log = open(b.log_path).read()[size:]
        again = re.search(r"the history is written again after ([0-9.]+) s \((\d+) waiting", log)
        assert again, "site-b never wrote its waiting history records"
        listed = [r["round"] for r in b.status("e2e")["rounds"]]
        return (f"full disk on site-b: checkpoints and history refused with 'No space left on device', no partial "
                f"file, {again.group(2)} history records written {float(again.group(1)):.0f} s later, went on"), listed


def can_mount_tmpfs():
    """Whether this machine lets us mount a tmpfs (root, and not a container that forbids it)."""
    if os.geteuid() != 0:
        return "needs root to mount a tmpfs as the site's data folder"
    probe = tempfile.mkdtemp(prefix="geoloco-tmpfs-probe-")
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", probe], capture_output=True, text=True)
        if r.returncode != 0:
            return f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}"
        subprocess.run(["umount", probe], check=False)
        return None
    finally:
        os.rmdir(probe)


why_not = can_mount_tmpfs()
if why_not:
    verdict(NAME, None, why_not)
run(NAME, body)
