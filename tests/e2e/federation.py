"""A federation of geolocod processes on loopback, for the end-to-end tests
and the demo: certificates from `geoloco certs`, one site file per site with
short timeouts, daemons started and killed as separate processes, and the
CLI (`geoloco submit/status`) to talk to them. Standard library only.

Every wait is bounded; a test that runs out of time fails with the sites'
last status and log tails, never hangs."""

import fcntl
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

# One line at a time, so a failure's output reads in the order it happened
# (ctest hands a test's stdout and stderr through one pipe).
sys.stdout.reconfigure(line_buffering=True)


_held_ports = []  # lock files of the ports this process reserved, held until it exits


def _port_range():
    """Ports below the kernel's ephemeral range: no outgoing connection and no
    bind to port 0 is ever given one, so a port chosen here stays free while a
    site is down or starting, whatever else runs on the machine."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return max(1024, low - 12000), low


def free_ports(count):
    """`count` loopback ports reserved for this process until it exits. They
    lie outside the ephemeral range (see _port_range), and each is claimed by
    an exclusive lock on a file named after it, so two harnesses that run at
    once (ctest -j2) never pick the same one; a port is taken only if it binds
    now, with SO_REUSEADDR as the daemons bind."""
    folder = os.path.join(tempfile.gettempdir(), "geoloco-test-ports")
    os.makedirs(folder, exist_ok=True)
    try:
        os.chmod(folder, 0o1777)  # shared by every user's test runs, like /tmp
    except OSError:
        pass
    low, high = _port_range()
    ports = []
    start = random.randrange(low, high)
    for i in range(high - low):
        if len(ports) == count:
            break
        port = low + (start - low + i) % (high - low)
        try:
            fd = os.open(os.path.join(folder, str(port)), os.O_CREAT | os.O_RDWR, 0o666)
        except OSError:  # another user's lock file: leave that port to them
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            os.close(fd)
            continue
        finally:
            s.close()
        _held_ports.append(fd)
        ports.append(port)
    if len(ports) < count:
        raise AssertionError(f"only {len(ports)} of {count} free loopback ports in {low}-{high - 1}")
    return ports


class Site:
    def __init__(self, fed, name, port, metrics_port):
        self.fed, self.name, self.port, self.metrics_port = fed, name, port, metrics_port
        self.dir = os.path.join(fed.root, name)
        self.socket = os.path.join(fed.root, "run", name + ".sock")
        self.config = os.path.join(self.dir, "site.yaml")
        self.log_path = os.path.join(self.dir, "geolocod.log")
        self.process = None
        self.env = {}
        self.wrap = []  # a command the daemon runs under (e.g. strace), none by default

    def write_config(self, sites):
        peers = "\n".join(
            "  - {name: %s, address: 127.0.0.1:%d}" % (s.name, self.fed.peer_port(self, s)) for s in sites if s is not self)
        tls = os.path.join(self.dir, "tls")
        with open(self.config, "w") as f:
            f.write(f"""name: {self.name}
listen: 127.0.0.1:{self.port}
peers:
{peers}
tls: {{ca: {tls}/ca.pem, cert: {tls}/site.pem, key: {tls}/site.key}}
data_dir: {self.dir}/data
metrics: 127.0.0.1:{self.metrics_port}
control_socket: {self.socket}
log_format: {self.fed.log_format}
heartbeat: {{interval: {self.fed.heartbeat_interval}, timeout: {self.fed.heartbeat_timeout}}}
transport: {{connections_per_peer: 2, read_timeout: {self.fed.read_timeout}, keepalive_interval: 0.5s, connect_timeout: 3s,
            reconnect_max: 0.5s{self.fed.transport_extra}}}
{self.fed.site_extra}""")

    def start(self, extra_env=None):
        assert self.process is None or self.process.poll() is not None, f"{self.name} already runs"
        env = dict(os.environ)
        env.update(self.env)
        env.update(extra_env or {})
        log = open(self.log_path, "a")
        self.process = subprocess.Popen(
            [*self.wrap, self.fed.geolocod, "--config", self.config, "--trainer", self.fed.trainer],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.fed.wait_for(lambda: os.path.exists(self.socket) and self.cli_ok("status"),
                          20, f"{self.name}'s control socket")

    def kill(self, sig=signal.SIGKILL):
        """Kills the daemon and, with SIGKILL, its trainer too (a machine that dies)."""
        if self.process and self.process.poll() is None:
            if sig == signal.SIGKILL:
                os.killpg(self.process.pid, signal.SIGKILL)
                # The trainer runs in its own process group: kill it as a crash would.
                for pid in self.trainer_pids():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            else:
                self.process.send_signal(sig)
            self.process.wait(timeout=60)

    def trainer_pids(self):
        pids = []
        data = os.path.join(self.dir, "data")
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().decode(errors="replace")
            except OSError:
                continue
            if "geoloco-train" in cmd and data in cmd:
                pids.append(int(pid))
        return pids

    def cli(self, *args, check=True, timeout=60):
        r = subprocess.run([self.fed.geoloco, *args, "--socket", self.socket], capture_output=True, text=True,
                           timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"geoloco {' '.join(args)} on {self.name}: exit {r.returncode}\n{r.stdout}{r.stderr}")
        return r

    def cli_ok(self, *args):
        try:
            return subprocess.run([self.fed.geoloco, *args, "--socket", self.socket], capture_output=True,
                                  timeout=10).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def status(self, job=None):
        args = ["status", "--json"] + ([job] if job else [])
        r = self.cli(*args, check=False)
        if r.returncode != 0:
            return None
        reply = json.loads(r.stdout)
        jobs = reply.get("jobs", [])
        if job:
            jobs = [j for j in jobs if j["name"] == job]
            return jobs[-1] if jobs else None
        return reply

    def metrics(self):
        """The site's metrics as {(name, ((label, value), ...)): value}."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).read().decode()
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            key, value = line.rsplit(" ", 1)
            name, _, labels = key.partition("{")
            pairs = tuple(tuple(kv.split("=", 1)) for kv in labels.rstrip("}").split(",") if kv) if labels else ()
            out[(name, tuple((k, v.strip('"')) for k, v in pairs))] = float(value)
        return out

    def log_tail(self, lines=30):
        try:
            with open(self.log_path) as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""


class Federation:
    def __init__(self, names=("site-a", "site-b", "site-c"), build=None, log_format="text",
                 heartbeat_interval="0.3s", heartbeat_timeout="4s", read_timeout="2s", keep=False, rate_limit="0",
                 trainer=None, site_extra="", proxy=False, proxy_faults=""):
        """trainer: the built-in trainer's program, relative to the build folder
        (default bin/geoloco-train); site_extra: lines added to every site file.
        proxy: every pair of sites talks through one geoloco-faultproxy, one
        link per pair named "site-a/site-b" (the names sorted: the first
        dials); proxy_faults: the links' faults in the proxy's file, e.g.
        "both: {latency: 50ms}"."""
        build = build or os.environ.get("GEOLOCO_BUILD", os.path.join(os.path.dirname(__file__), "../../build"))
        self.geolocod = os.path.join(build, "bin", "geolocod")
        self.geoloco = os.path.join(build, "bin", "geoloco")
        self.trainer = os.path.join(build, trainer or os.path.join("bin", "geoloco-train"))
        self.site_extra = site_extra
        for p in (self.geolocod, self.geoloco, self.trainer):
            assert os.path.exists(p), f"{p} is missing: build first (cmake --build build)"
        self.root = tempfile.mkdtemp(prefix="geoloco-e2e-")
        self.keep = keep
        self.log_format = log_format
        self.heartbeat_interval, self.heartbeat_timeout, self.read_timeout = \
            heartbeat_interval, heartbeat_timeout, read_timeout
        # Each site's egress cap in bit/s, e.g. "1G" (transport.rate_limit); "0": none.
        self.transport_extra = f", rate_limit: {rate_limit}" if str(rate_limit) != "0" else ""
        os.makedirs(os.path.join(self.root, "run"))
        ports = free_ports(2 * len(names))
        self.sites = [Site(self, n, ports[2 * i], ports[2 * i + 1]) for i, n in enumerate(names)]
        self.by_name = {s.name: s for s in self.sites}
        self.proxy = Proxy(self, build, proxy_faults) if proxy else None
        ca = os.path.join(self.root, "ca")
        self.run([self.geoloco, "certs", "init", "--out", ca])
        for s in self.sites:
            os.makedirs(s.dir)
            self.run([self.geoloco, "certs", "issue", "--ca", ca, "--site", s.name, "--out",
                      os.path.join(s.dir, "tls")])
            s.write_config(self.sites)

    @staticmethod
    def run(cmd):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout}{r.stderr}")
        return r

    def __getitem__(self, name):
        return self.by_name[name]

    def peer_port(self, site, peer):
        """The port `site` dials to reach `peer`: the proxy's link, or the peer itself.
        Only the site whose name sorts first dials; the other only knocks
        ("dial me now") when it starts, and a link leads to the site that is
        dialed, so its knocks go to the peer itself (through the link they
        would come back to the knocking site)."""
        return self.proxy.port_of(site.name, peer.name) if self.proxy and site.name < peer.name else peer.port

    def start(self):
        if self.proxy:
            self.proxy.start()
        for s in self.sites:
            s.start()

    def write_job(self, text, name="job.yaml"):
        path = os.path.join(self.root, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def wait_for(self, condition, seconds, what):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.2)
        self.fail(f"timed out after {seconds} s waiting for {what}")

    def wait_for_rejoin(self, site, job, killed_at):
        """Waits until `site`, killed after round `killed_at` and started
        again, contributes to a round after its return. It lists the rounds it
        committed before the kill (read back from its round log; a round up to
        killed_at + 1 may have committed just before the kill), then, after its
        STATE_SYNC of round s, rounds from s + 1 on (the rounds between, as its
        donors listed them, say `installed_from`). Checks both; returns
        (s, the first round after the rejoin)."""
        self.wait_for(lambda: any(r["contributed"] and r["round"] > killed_at + 1
                                  for r in (site.status(job) or {}).get("rounds", [])), 120,
                      f"{site.name} to contribute again")
        listed = [r["round"] for r in site.status(job)["rounds"]]
        assert set(range(1, killed_at)) <= set(listed), \
            f"{site.name} forgot rounds it committed before the kill: {listed}"
        first = min(r["round"] for r in site.status(job)["rounds"]
                    if r["round"] > killed_at + 1 and "installed_from" not in r)
        synced = [int(m) for m in re.findall(r"state of round (\d+) received from", open(site.log_path).read())][-1]
        # Within one round of its STATE_SYNC, the site holds the committed anchor of the next round.
        assert first == synced + 1, f"{site.name} synced round {synced} but its first round after the rejoin is {first}"
        return synced, first

    def check_history(self, job, down=()):
        """Runs geoloco check-history over every site's folder of `job` (the
        sites in `down` need not have finished); fails the test on a
        violation, returns the checker's output."""
        dirs = [os.path.join(s.dir, "data", "jobs", job) for s in self.sites]
        args = [self.geoloco, "check-history", *dirs]
        for d in down:
            args += ["--down", d]
        r = subprocess.run(args, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            self.fail(f"geoloco check-history {job}: exit {r.returncode}\n{r.stdout}{r.stderr}")
        print(r.stdout, end="")
        return r.stdout

    def fail(self, message):
        report = [message]
        for s in self.sites:
            report.append(f"--- {s.name} (exit {s.process.poll() if s.process else 'not started'}) log tail:")
            report.append(s.log_tail())
        raise AssertionError("\n".join(report))

    def close(self):
        for s in self.sites:
            try:
                s.kill(signal.SIGKILL)
            except Exception:
                pass
        if self.proxy:
            self.proxy.stop()
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is not None:
            print(f"federation folder: {self.root}", file=sys.stderr)
            for s in self.sites:
                print(f"--- {s.name} log tail:\n{s.log_tail(60)}", file=sys.stderr)
        self.close()


def link_name(a, b):
    """The proxy's link between two sites: the names sorted, the first dials."""
    return "/".join(sorted((a, b)))


class Proxy:
    """One geoloco-faultproxy between every pair of the federation's sites."""

    def __init__(self, fed, build, faults):
        self.fed = fed
        self.program = os.path.join(build, "bin", "geoloco-faultproxy")
        assert os.path.exists(self.program), f"{self.program} is missing: build first (cmake --build build)"
        names = [s.name for s in fed.sites]
        self.links = [link_name(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
        ports = free_ports(len(self.links) + 1)
        self.port = dict(zip(self.links, ports))
        self.control = ports[-1]
        self.config = os.path.join(fed.root, "proxy.yaml")
        self.log_path = os.path.join(fed.root, "proxy.log")
        self.stats_path = os.path.join(fed.root, "proxy-stats.json")
        self.process = None
        lines = [f"control: 127.0.0.1:{self.control}", "links:"]
        for link in self.links:
            target = fed.by_name[link.split("/")[1]]
            extra = f", {faults}" if faults else ""
            lines.append(f"  - {{name: {link}, listen: 127.0.0.1:{self.port[link]}, "
                         f"connect: 127.0.0.1:{target.port}{extra}}}")
        with open(self.config, "w") as f:
            f.write("\n".join(lines) + "\n")

    def port_of(self, a, b):
        return self.port[link_name(a, b)]

    def start(self):
        log = open(self.log_path, "a")
        self.process = subprocess.Popen([self.program, "--config", self.config, "--stats", self.stats_path],
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.fed.wait_for(lambda: self.call_ok({"command": "stats"}), 10, "the fault proxy's control API")

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def call(self, request):
        """One control request (a dict); returns the reply, fails on a refusal."""
        with socket.create_connection(("127.0.0.1", self.control), timeout=10) as s:
            s.sendall((json.dumps(request) + "\n").encode())
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                reply += chunk
        answer = json.loads(reply)
        if not answer.get("ok"):
            raise AssertionError(f"fault proxy refused {request}: {answer.get('error')}")
        return answer

    def call_ok(self, request):
        try:
            self.call(request)
            return True
        except (OSError, ValueError, AssertionError):
            return False

    def set(self, link, **change):
        return self.call({"command": "set", "link": link, **change})

    def partition(self, *groups):
        """Cuts every link between sites of different groups (bytes held, as
        TCP would hold them); links inside a group are left alone."""
        for i, g in enumerate(groups):
            for h in groups[i + 1:]:
                for a in g:
                    for b in h:
                        self.set(link_name(a, b), both={"partition": True})

    def heal(self):
        self.call({"command": "clear", "link": "*"})

    def stats(self):
        return self.call({"command": "stats"})["links"]


def mlp_job(name="e2e", sites=("site-a", "site-b", "site-c"), coordinator="site-a", rounds=4, steps=20,
            width=32, min_sites=2, deadline="3s", policy="carry", compression=None, every=2, extra="",
            eval_items=None):
    """A job of the built-in MLP trainer (Fashion-MNIST). `eval_items`: test
    images each eval scores (None: the trainer's default, all of them)."""
    comp = f"compression: {compression}\n" if compression else ""
    evals = f", eval_items: {eval_items}" if eval_items is not None else ""
    return f"""name: {name}
sites: [{', '.join(sites)}]
coordinator: {coordinator}
seed: 7
trainer: {{kind: builtin, model: mlp, layers: 2, width: {width}, workers: 1{evals}}}
inner: {{optimizer: adamw, lr: 0.003, steps: {steps}, batch: 32, warmup: 5, weight_decay: 0.01, clip: 1.0}}
outer: {{optimizer: nesterov, lr: 0.7, momentum: 0.9}}
{comp}straggler: {{deadline: {deadline}, min_sites: {min_sites}, policy: {policy}, decay: 0.5}}
checkpoint: {{every_rounds: {every}}}
stop: {{rounds: {rounds}}}
{extra}"""
