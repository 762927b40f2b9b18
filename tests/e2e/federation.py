"""A federation of geolocod processes on loopback, for the end-to-end tests
and the demo: certificates from `geoloco certs`, one site file per site with
short timeouts, daemons started and killed as separate processes, and the
CLI (`geoloco submit/status`) to talk to them. Standard library only.

Every wait is bounded; a test that runs out of time fails with the sites'
last status and log tails, never hangs."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


def free_ports(count):
    """Ports the kernel hands out now (bound and released: free for a moment)."""
    socks, ports = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
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

    def write_config(self, sites):
        peers = "\n".join(
            "  - {name: %s, address: 127.0.0.1:%d}" % (s.name, s.port) for s in sites if s is not self)
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
            [self.fed.geolocod, "--config", self.config, "--trainer", self.fed.trainer],
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

    def log_tail(self, lines=30):
        try:
            with open(self.log_path) as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""


class Federation:
    def __init__(self, names=("site-a", "site-b", "site-c"), build=None, log_format="text",
                 heartbeat_interval="0.3s", heartbeat_timeout="4s", read_timeout="2s", keep=False, rate_limit="0",
                 trainer=None, site_extra=""):
        """trainer: the built-in trainer's program, relative to the build folder
        (default bin/geoloco-train); site_extra: lines added to every site file."""
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

    def start(self):
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


def mlp_job(name="e2e", sites=("site-a", "site-b", "site-c"), coordinator="site-a", rounds=4, steps=20,
            width=32, min_sites=2, deadline="3s", policy="carry", compression=None, every=2, extra=""):
    comp = f"compression: {compression}\n" if compression else ""
    return f"""name: {name}
sites: [{', '.join(sites)}]
coordinator: {coordinator}
seed: 7
trainer: {{kind: builtin, model: mlp, layers: 2, width: {width}, workers: 1}}
inner: {{optimizer: adamw, lr: 0.003, steps: {steps}, batch: 32, warmup: 5, weight_decay: 0.01, clip: 1.0}}
outer: {{optimizer: nesterov, lr: 0.7, momentum: 0.9}}
{comp}straggler: {{deadline: {deadline}, min_sites: {min_sites}, policy: {policy}, decay: 0.5}}
checkpoint: {{every_rounds: {every}}}
stop: {{rounds: {rounds}}}
{extra}"""
