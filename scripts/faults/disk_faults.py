"""Damaged state on disk: a site's checkpoint with flipped bytes, another's
cut short, and the coordinator's with its round changed (tensors intact),
each found on a restart after kill -9. Each is refused with a message that
says what is wrong, kept aside (never loaded silently wrong), and the site
takes the committed state from a peer and contributes again. Ends with the
history checker. (A full disk is full_disk.py.)"""

import os
import re

from scenario import Commits, Federation, arguments, contributes_after, mlp_job, run

STEPS = ("flip", "truncate", "round")
args = arguments(__doc__, rounds=40, only=",".join(STEPS))
NAME = "disk-faults"


def checkpoint(site):
    return os.path.join(site.dir, "data", "jobs", "e2e", "checkpoint.safetensors")


def flip_bytes(path):
    with open(path, "r+b") as f:
        size = os.path.getsize(path)
        f.seek(size - 4096)
        block = bytearray(f.read(64))
        f.seek(size - 4096)
        f.write(bytes(b ^ 0xFF for b in block))


def truncate(path):
    os.truncate(path, os.path.getsize(path) // 2)


def checkpoint_round(path):
    with open(path, "rb") as f:
        m = re.search(rb'"round":"(\d+)"', f.read())
    assert m, "no round in the checkpoint's header"
    return m.group(1).decode()


def bump_round(path):
    with open(path, "r+b") as f:
        data = f.read()
    m = re.search(rb'"round":"(\d+)"', data)
    assert m, "no round in the checkpoint's header"
    old = m.group(1)
    new = str(int(old) + 1).encode()
    assert len(new) == len(old), "the round's digits changed length: pick another round"
    with open(path, "r+b") as f:
        f.seek(m.start(1))
        f.write(new)
    return int(old)


def body():
    notes = []
    with Federation(proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "25"
        fed.start()
        fed["site-a"].cli("submit", fed.write_job(
            mlp_job(rounds=args.rounds, steps=20, deadline="2s", min_sites=2, every=1)))
        commits = Commits(fed, "e2e")
        commits.wait_round(3, 120, "round 3")
        steps = args.only.split(",")
        for key, site, damage, what in (("flip", fed["site-b"], flip_bytes, "flipped bytes"),
                                        ("truncate", fed["site-c"], truncate, "cut short"),
                                        ("round", fed["site-a"], bump_round, "round changed")):
            if key not in steps:
                continue
            top = commits.poll()
            assert top < args.rounds - 6, f"the job is nearly over at round {top}: raise --rounds"
            site.kill()
            # One more round makes 9 into 10, a header of another length: the
            # round changed in place must keep its digits, so skip such a round.
            for _ in range(3):
                if damage is not bump_round or set(checkpoint_round(checkpoint(site))) != {"9"}:
                    break
                site.start()
                commits.wait_round(commits.poll() + 2, 60, f"two more rounds before damaging {site.name}'s round")
                site.kill()
            detail = damage(checkpoint(site))
            size = len(open(site.log_path).read())
            site.start()
            restarted_at = max(commits.rounds().values())
            contributes_after(fed, site, restarted_at)
            log = open(site.log_path).read()[size:]
            if damage is bump_round:
                # The journal is the truth: the checkpoint's round (or, when the
                # kill fell between the journal's commit and the checkpoint, its
                # anchor) disagrees with it, and the state comes from a peer.
                # Or, when no round above the real one is committed yet, it
                # asks for the committed state and is given the real round,
                # not the one its checkpoint claims.
                got = re.search(r"state of round (\d+) received from site-[bc]", log)
                assert got, log[-3000:]
                assert (f"the checkpoint holds round {detail + 1}, the journal's last committed round is" in log or
                        f"the checkpoint's anchor of round {detail + 1} is" in log or
                        int(got.group(1)) <= detail), log[-3000:]
                notes.append(f"{site.name}: {what} (round {detail} -> {detail + 1}): refused, state from a peer")
            else:
                assert "cannot be used" in log and ".damaged" in log, log[-3000:]
                assert os.path.exists(checkpoint(site) + ".damaged")
                reason = re.search(r"cannot be used \(([^)]*)\)", log).group(1).split(": ", 1)[-1]
                notes.append(f"{site.name}: {what}: refused ({reason[:60]}), kept aside, state from a peer")
            print(notes[-1], flush=True)

        commits.finished(300)
        fed.check_history("e2e")
    return "; ".join(notes)


run(NAME, body)
