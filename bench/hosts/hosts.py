#!/usr/bin/env python3
"""Hosts joined by slow links, on one machine: N network namespaces on a bridge.

Each host is a network namespace with one interface, its address 10.99.0.(i+1)/24,
plugged into a bridge that lives in a namespace of its own (the "switch"), so nothing
touches the machine's own network. Each host's link is shaped with `tc tbf` in both
directions (the host's side for what it sends, the switch's port for what it receives),
so two hosts talk at the slower of their two links. Latency is added with `netem` where
the kernel has it.

    python3 bench/hosts/hosts.py --hosts 2 --rate 100mbit -- CMD ARGS...

runs CMD once in every host, at once, with {host}, {hosts}, {addr} and {master} in ARGS
replaced by the host's index, the host count, its address and host 0's address (also in
the environment as PT_HOST, PT_HOSTS, PT_HOST_ADDR, PT_MASTER_ADDR), and exits with the
first failing host's status. With --torchrun K it runs one torchrun agent per host over
CMD (K ranks each, static rendezvous at host 0). Everything is torn down when the
commands end, fail, time out (--timeout) or are interrupted; where namespaces cannot be
made (no root, no `ip` or `tc`) it says so and exits 77.

As a module: `with Hosts(2, rate="1gbit") as hosts: hosts.run(lambda h: [...])`.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time

SKIP = 77
SUBNET = "10.99.0"
RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)$")
UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


class Unavailable(Exception):
    """Namespaces cannot be made here: the caller skips."""


def bits_per_second(rate):
    m = RATE.match(rate or "")
    if not m:
        raise ValueError(f"rate {rate!r}: give a number and bit, kbit, mbit or gbit (tc's units), e.g. 100mbit")
    return float(m.group(1)) * UNITS[m.group(2)]


def _run(*cmd):
    r = subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


class Hosts:
    """N hosts on a bridge; `rates[i]` shapes host i's link (None: unshaped)."""

    def __init__(self, n, rate=None, rates=None, delay=None, tag=None):
        if n < 2:
            raise ValueError("--hosts: at least 2")
        self.n = n
        self.rates = [rate] * n
        for i, r in (rates or {}).items():
            if not 0 <= i < n:
                raise ValueError(f"--rate-of {i}: there are hosts 0..{n - 1}")
            self.rates[i] = r
        for r in self.rates:
            if r is not None:
                bits_per_second(r)  # refused before anything is made
        self.delay = delay
        tag = tag or f"pt{os.getpid() % 100000}"
        self.switch = f"{tag}-sw"
        self.names = [f"{tag}-h{i}" for i in range(n)]
        self.addresses = [f"{SUBNET}.{i + 1}" for i in range(n)]
        self.made = []
        self.procs = []

    @property
    def master(self):
        return self.addresses[0]

    # ----- making and removing ------------------------------------------------------

    def __enter__(self):
        if os.geteuid() != 0:
            raise Unavailable("network namespaces need root")
        for tool in ("ip", "tc"):
            if not shutil.which(tool):
                raise Unavailable(f"`{tool}` is not installed (Debian: iproute2)")
        try:
            self._make()
        except Exception as e:
            self.close()
            raise Unavailable(str(e)) from e
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _make(self):
        _run("ip", "netns", "add", self.switch)
        self.made.append(self.switch)
        _run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.switch, "link", "set", "br0", "up")
        for i, name in enumerate(self.names):
            _run("ip", "netns", "add", name)
            self.made.append(name)
            port = f"p{i}"
            _run("ip", "link", "add", "eth0", "netns", name, "type", "veth", "peer", "name", port, "netns", self.switch)
            _run("ip", "-n", self.switch, "link", "set", port, "master", "br0")
            _run("ip", "-n", self.switch, "link", "set", port, "up")
            _run("ip", "-n", name, "addr", "add", f"{self.addresses[i]}/24", "dev", "eth0")
            _run("ip", "-n", name, "link", "set", "eth0", "up")
            _run("ip", "-n", name, "link", "set", "lo", "up")
            self._shape(name, "eth0", self.rates[i])
            self._shape(self.switch, port, self.rates[i])

    def _shape(self, ns, dev, rate):
        if rate is None and self.delay is None:
            return
        if self.delay is not None:
            try:
                _run("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", "delay", self.delay)
            except RuntimeError as e:
                raise RuntimeError(f"--delay needs tc's netem, which this kernel lacks ({e}); drop --delay") from e
        if rate is None:
            return
        # tbf's bucket must hold what the rate sends in a timer tick or two, else it
        # caps below the rate: 4 ms of traffic, at least 32 KiB.
        burst = max(32 * 1024, int(bits_per_second(rate) / 8 * 0.004))
        parent = ["parent", "1:"] if self.delay is not None else ["root"]
        _run("tc", "-n", ns, "qdisc", "add", "dev", dev, *parent, "tbf", "rate", rate, "burst", str(burst),
             "latency", "50ms")

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []
        for name in reversed(self.made):
            # Anything still running in it goes first, or the namespace outlives us.
            pids = subprocess.run(["ip", "netns", "pids", name], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", name], stderr=subprocess.DEVNULL)
        self.made = []

    # ----- running ------------------------------------------------------------------

    def fill(self, i, args):
        values = {"host": str(i), "hosts": str(self.n), "addr": self.addresses[i], "master": self.master}
        return [re.sub(r"\{(host|hosts|addr|master)\}", lambda m: values[m.group(1)], a) for a in args]

    def env(self, i, extra=None):
        env = dict(os.environ)
        env.update(PT_HOST=str(i), PT_HOSTS=str(self.n), PT_HOST_ADDR=self.addresses[i], PT_MASTER_ADDR=self.master)
        env.update(extra or {})
        return env

    def start(self, i, args, env=None, **popen):
        """Starts `args` (placeholders filled) in host i, in a process group of its own."""
        p = subprocess.Popen(["ip", "netns", "exec", self.names[i], *self.fill(i, args)], env=self.env(i, env),
                             start_new_session=True, **popen)
        self.procs.append(p)
        return p

    def run(self, command_of, env=None, timeout=None, logs=None):
        """Runs command_of(i) in every host at once; returns their exit statuses.
        Output goes to logs(i) (a path) where given, else to ours. Past `timeout`
        seconds every one is killed and its status is None."""
        procs, files = [], []
        try:
            for i in range(self.n):
                out = open(logs(i), "w") if logs else None
                files.append(out)
                procs.append(self.start(i, command_of(i), env, stdout=out, stderr=subprocess.STDOUT if out else None))
            deadline = None if timeout is None else time.monotonic() + timeout
            while any(p.poll() is None for p in procs):
                if deadline is not None and time.monotonic() > deadline:
                    for p in procs:
                        if p.poll() is None:
                            os.killpg(p.pid, signal.SIGKILL)
                    break
                time.sleep(0.05)
            return [p.wait() if p.returncode is not None or deadline is None else p.poll() for p in procs]
        finally:
            for f in files:
                if f:
                    f.close()


def torchrun_command(hosts, nproc, port, command):
    """One torchrun agent's command line on host {host}: static rendezvous at host 0."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if not os.path.exists(torchrun):
        torchrun = shutil.which("torchrun") or "torchrun"
    return [torchrun, f"--nnodes={hosts.n}", "--node-rank={host}", f"--nproc-per-node={nproc}",
            "--master-addr={master}", f"--master-port={port}", "--no-python", *command]


def stop_on_signals():
    """SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt, so that a `with Hosts(...)`
    tears its namespaces down on the way out, as on any other exit."""
    def stop(signum, _frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, stop)


def parse_rates(items):
    rates = {}
    for item in items or []:
        host, _, rate = item.partition("=")
        if not host.isdigit() or not rate:
            raise ValueError(f"--rate-of {item!r}: give HOST=RATE, e.g. 2=10mbit")
        rates[int(host)] = rate
    return rates


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--rate", help="every host's link, in tc's units (100mbit, 1gbit); default: unshaped")
    ap.add_argument("--rate-of", action="append", metavar="HOST=RATE", help="one host's link instead (repeatable)")
    ap.add_argument("--delay", help="latency added to each direction of each link (netem), e.g. 1ms")
    ap.add_argument("--torchrun", type=int, metavar="K", help="run one torchrun agent per host, K ranks each, over CMD")
    ap.add_argument("--port", type=int, default=29600, help="torchrun's rendezvous port on host 0")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds before every command is killed")
    ap.add_argument("--logs", help="write host i's output to LOGS.i instead of ours")
    ap.add_argument("--tag", help="the namespaces' names start TAG- (default: pt and our process id)")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command:
        ap.error("give the command to run on every host after --")
    try:
        hosts = Hosts(a.hosts, a.rate, parse_rates(a.rate_of), a.delay, a.tag)
    except ValueError as e:
        ap.error(str(e))

    stop_on_signals()
    try:
        with hosts:
            shaped = ", ".join(f"h{i} {r or 'unshaped'}" for i, r in enumerate(hosts.rates))
            print(f"hosts: {hosts.n} namespaces on a bridge ({shaped}{', delay ' + a.delay if a.delay else ''}); "
                  f"host 0 at {hosts.master}", flush=True)
            argv = torchrun_command(hosts, a.torchrun, a.port, command) if a.torchrun else command
            logs = (lambda i: f"{a.logs}.{i}") if a.logs else None
            statuses = hosts.run(lambda i: argv, timeout=a.timeout, logs=logs)
    except Unavailable as e:
        print(f"hosts: skipped: cannot make network namespaces here ({e})", file=sys.stderr)
        return SKIP
    except KeyboardInterrupt as e:
        print(f"hosts: interrupted ({e or 'SIGINT'}); the namespaces are removed", file=sys.stderr)
        return 130
    if any(s is None for s in statuses):
        print(f"hosts: timed out after {a.timeout:g} s; every command was killed", file=sys.stderr)
        return 124
    failed = [s for s in statuses if s != 0]
    return failed[0] if failed else 0


if __name__ == "__main__":
    sys.exit(main())
