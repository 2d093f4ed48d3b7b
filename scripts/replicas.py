#!/usr/bin/env python3
"""Runs N `cobatch serve` replicas behind an LLM router (sglang-router, from PyPI, pinned).

usage: scripts/replicas.py [--replicas N] [--port P] [--policy cache_aware|round_robin|...]
                           [--bin build/cobatch] [-- serve flags...]

The router listens on --port (default 8000) and speaks the OpenAI API; replica k listens on
P + k. The router checks each replica's /health (a replica answers 503 while it drains, and
nothing until its model is loaded), retries a request a replica could not take on another one, and
with the cache_aware policy (the default) sends requests that share a prompt prefix to the replica
that served it last, so that its prefix cache hits. Ctrl-C or SIGTERM stops the router, then drains
every replica. The router comes from a virtual environment made once under
~/.cache/cobatch/router-VERSION.
"""
import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request

ROUTER_PKG = "sglang-router==0.3.2"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def router_python():
    """The Python of a cached venv holding the pinned router; made on first use."""
    cache = os.environ.get("COBATCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cobatch")
    venv = os.path.join(cache, "router-" + ROUTER_PKG.split("==")[1])
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(os.path.join(venv, ".ready")):
        print(f"replicas: installing {ROUTER_PKG} into {venv}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", ROUTER_PKG],
                       check=True)
        open(os.path.join(venv, ".ready"), "w").close()
    return py


# A replica's grace after SIGTERM (cobatch serve --drain-grace): /health answers 503 while requests
# are still served, longer than the router takes to see it (two failed checks a second apart).
DRAIN_GRACE_S = 3


def router_cmd(py, port, workers, policy, prometheus_port):
    """The router's command line: health checks every second (two failures take a replica out);
    a request a replica refused (503: it drains) is retried, the router choosing again each time,
    with back-off long enough (0.2 + 0.4 + 0.8 + 1.6 s) to outlast the health checks, so that a
    cache_aware retry does not go back to the same replica while the router still thinks it up."""
    return [py, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port),
            "--worker-urls", *workers, "--policy", policy,
            "--health-check-endpoint", "/health", "--health-check-interval-secs", "1",
            "--health-failure-threshold", "2", "--health-success-threshold", "1",
            "--retry-max-retries", "5", "--retry-initial-backoff-ms", "200", "--retry-backoff-multiplier", "2",
            "--retry-max-backoff-ms", "2000",
            "--prometheus-port", str(prometheus_port), "--log-level", "warn"]


def grace_of(cmd):
    """The --drain-grace a `cobatch serve` command line sets (the last one), None if none."""
    grace = None
    for i, f in enumerate(cmd):
        if f == "--drain-grace" and i + 1 < len(cmd):
            grace = cmd[i + 1]
        elif f.startswith("--drain-grace="):
            grace = f.split("=", 1)[1]
    try:
        return None if grace is None else float(grace)
    except ValueError:
        return None


def serve_cmd(bin_, port, flags):
    """A replica: `cobatch serve` with a drain grace (unless the flags set one)."""
    grace = [] if grace_of(flags) is not None else ["--drain-grace", str(DRAIN_GRACE_S)]
    return [bin_, "serve", "--host", "127.0.0.1", "--port", str(port), *grace, *flags]


def stop_all(router, replicas_, timeout=60):
    """The router first (nothing new reaches a replica), then every replica: a signal, and a second
    one to end its grace where it has one (nobody routes to it any more), so each drains at once."""
    for p in [router] if router is not None else []:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
    for p in replicas_:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    for p in replicas_:  # a second signal without a grace would cut the drain short
        if p.poll() is None and (grace_of(list(p.args)) or 0) > 0:
            p.send_signal(signal.SIGTERM)
    for p in replicas_:
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()


def wait_ok(url, timeout, proc=None, stopped=lambda: False):
    deadline = time.time() + timeout
    while time.time() < deadline and not stopped():
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--policy", default="cache_aware")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "cobatch"))
    ap.add_argument("--prometheus-port", type=int, default=29000, help="the router's own metrics")
    ap.add_argument("serve", nargs="*", help="flags for every `cobatch serve` (after --)")
    a = ap.parse_args()
    if a.replicas < 1:
        ap.error("--replicas must be at least 1")
    py = router_python()
    procs, router = [], None
    stopping = False

    def stop(*_):
        nonlocal stopping
        stopping = True

    # the children are in their own sessions (below): a terminal's signals reach this script alone
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, stop)
    workers = []
    try:
        for k in range(1, a.replicas + 1):
            port = a.port + k
            # own sessions: a terminal's Ctrl-C reaches this script alone, which stops them in order
            p = subprocess.Popen(serve_cmd(a.bin, port, a.serve), start_new_session=True)
            procs.append(p)
            workers.append(f"http://127.0.0.1:{port}")
        for w, p in zip(workers, procs):
            if not wait_ok(w + "/health", 300, p, lambda: stopping):
                print(f"replicas: {w} {'stopped' if stopping else 'did not start'}", file=sys.stderr)
                return 0 if stopping else 1
        router = subprocess.Popen(router_cmd(py, a.port, workers, a.policy, a.prometheus_port),
                                  start_new_session=True)
        if not wait_ok(f"http://127.0.0.1:{a.port}/health", 60, router, lambda: stopping):
            print(f"replicas: the router {'stopped' if stopping else 'did not start'}", file=sys.stderr)
            return 0 if stopping else 1
        print(f"replicas: {a.replicas} x cobatch serve behind sglang-router ({a.policy}) at "
              f"http://127.0.0.1:{a.port}/v1", file=sys.stderr, flush=True)
        while not stopping and router.poll() is None and all(p.poll() is None for p in procs):
            time.sleep(0.2)
        return 0
    finally:
        stop_all(router, procs)


if __name__ == "__main__":
    sys.exit(main())
