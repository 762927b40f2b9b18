"""Hostile peers against a running job: connections to site-b with a
certificate from another CA, with a valid certificate for a name not in the
federation, with a valid certificate claiming another site's name, and with
a peer's real certificate sending garbage, an oversized hello, a wrong
frame version, and frames of an earlier round; then a flood of idle TCP
connections. Each is refused with a reason in site-b's log and counted in
its metrics, the idle ones are closed at the connect timeout, and the job
goes on: one digest per round everywhere. Ends with the history checker."""

import ctypes
import os
import socket
import ssl
import struct
import time

from scenario import Commits, Federation, arguments, mlp_job, run

args = arguments(__doc__, rounds=40, idle_connections=200)
NAME = "hostile-peers"
XXH = ctypes.CDLL("libxxhash.so.0")
XXH.XXH3_64bits.restype = ctypes.c_uint64
XXH.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def frame(ftype, payload=b"", job=0, round_=0, chunk=0, version=1, size=None, fragment=0):
    """A frame as transport/frame.h lays it out (a hello's fragment: the sender's connections_per_peer)."""
    size = len(payload) if size is None else size
    header = struct.pack("<IBBHQQIIQQ", 0x31464C47, version, ftype, 0, job, round_, fragment, chunk, size,
                         XXH.XXH3_64bits(payload, len(payload)))
    return header + payload


def tls_connect(port, tls_dir):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # the attacker does not care who answers
    ctx.load_cert_chain(os.path.join(tls_dir, "site.pem"), os.path.join(tls_dir, "site.key"))
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return ctx.wrap_socket(raw)


def attack(port, tls_dir, data):
    """Sends `data` after the handshake; returns how the site answered."""
    try:
        s = tls_connect(port, tls_dir)
    except (ssl.SSLError, OSError) as e:
        return f"handshake refused ({type(e).__name__})"
    try:
        s.sendall(data)
        got = s.recv(65536)
        return "closed" if not got else f"answered {len(got)} bytes"
    except (ssl.SSLError, OSError) as e:
        return f"closed ({type(e).__name__})"
    finally:
        s.close()


def rejected(site):
    return site.metrics().get(("geoloco_rejected_frames_total", ()), 0)


def open_fds(site):
    return len(os.listdir(f"/proc/{site.process.pid}/fd"))


def body():
    with Federation(proxy=True, keep=args.keep) as fed:
        for s in fed.sites:
            s.env["GEOLOCO_TRAIN_STEP_DELAY_MS"] = "25"
        other_ca = os.path.join(fed.root, "other-ca")
        fed.run([fed.geoloco, "certs", "init", "--out", other_ca])
        fed.run([fed.geoloco, "certs", "issue", "--ca", other_ca, "--site", "site-a", "--out",
                 os.path.join(fed.root, "forged-a")])
        fed.run([fed.geoloco, "certs", "issue", "--ca", os.path.join(fed.root, "ca"), "--site", "site-z", "--out",
                 os.path.join(fed.root, "site-z")])
        fed.start()
        fed["site-a"].cli("submit", fed.write_job(mlp_job(rounds=args.rounds, steps=20, deadline="2s", min_sites=2)))
        commits = Commits(fed, "e2e")
        commits.wait_round(3, 120, "round 3")
        b = fed["site-b"]
        a_tls = os.path.join(fed["site-a"].dir, "tls")
        z_tls = os.path.join(fed.root, "site-z")
        hello_a = frame(1, b"site-a", fragment=2)  # slot 0 of 2 data connections, as tests/e2e/federation.py sets
        job = XXH.XXH3_64bits(b"e2e", 3) or 1  # the job's id on the wire (daemon/job_run.h)
        attacks = [
            ("another CA's certificate", os.path.join(fed.root, "forged-a"), hello_a, "TLS handshake"),
            ("a name not in the federation", z_tls, frame(1, b"site-z"), "which is not a peer of site-b"),
            ("a certificate claiming another site", z_tls, hello_a, "certificate is for 'site-z'"),
            ("garbage", a_tls, os.urandom(4096), "bad frame magic"),
            ("an oversized hello", a_tls, frame(1, b"site-a", size=1 << 20), "a hello of 1048576 bytes"),
            ("an oversized frame length", a_tls, frame(1, b"site-a", size=1 << 40), "exceeds the bound"),
            ("a wrong frame version", a_tls, frame(1, b"site-a", version=9), "frame version 9"),
            ("frames of an earlier round", a_tls,
             hello_a + frame(2, os.urandom(512), job=job, round_=1) + frame(3, os.urandom(512), job=job, round_=2),
             "stale frame from site-a: shard of round 1"),
            ("frames of another job", a_tls, hello_a + frame(2, os.urandom(512), job=1, round_=1),
             "this mesh serves job"),
        ]
        log_at = len(open(b.log_path).read())
        before = rejected(b)
        outcomes = []
        for what, tls_dir, data, expect in attacks:
            size = len(open(b.log_path).read())
            answer = attack(b.port, tls_dir, data)
            if expect:
                fed.wait_for(lambda: expect in open(b.log_path).read()[size:], 20,
                             f"site-b to refuse {what} ('{expect}')")
            outcomes.append(f"{what}: {answer}")
            print(outcomes[-1], flush=True)
        fed.wait_for(lambda: rejected(b) >= before + len(attacks) - 1, 20, "site-b to count the refusals")
        counted = rejected(b) - before

        # A flood of idle connections: accepted, never a TLS byte.
        fds = open_fds(b)
        at = commits.poll()
        idle = []
        for _ in range(args.idle_connections):
            idle.append(socket.create_connection(("127.0.0.1", b.port), timeout=10))
        peak = open_fds(b)
        time.sleep(5)  # past the connect timeout (3 s)
        closed = 0
        for s in idle:
            s.settimeout(0.5)
            try:
                if s.recv(1) == b"":
                    closed += 1
            except (ConnectionResetError, BrokenPipeError):
                closed += 1
            except socket.timeout:
                pass
            s.close()
        during = commits.poll()
        assert closed == len(idle), f"site-b closed only {closed} of {len(idle)} idle connections after 5 s"
        assert during > at, f"no round committed during the flood (round {at})"
        fed.wait_for(lambda: open_fds(b) <= fds + 5, 20, f"site-b's descriptors to come back to about {fds}")

        commits.finished(300)
        fed.check_history("e2e")
        log = open(b.log_path).read()[log_at:]
        assert "Segmentation" not in log and "terminate" not in log
    return (f"{len(attacks)} hostile connections refused ({counted:.0f} counted), {len(idle)} idle ones closed "
            f"(descriptors {fds} -> {peak} -> back), {args.rounds} rounds on one digest")


run(NAME, body)
