"""A `cobatch serve` on a free port for the benchmark scripts, its /metrics as numbers, and the gaps
between a streamed completion's tokens."""
import os, subprocess, tempfile, time
import httpx


def serve(bin_path, model, *args):
    """Starts the server; returns the process and its base URL once it listens."""
    d = tempfile.mkdtemp(); pf = os.path.join(d, "port")
    p = subprocess.Popen([bin_path, "serve", "-m", model, "--port", "0", "--port-file", pf, *args],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not os.path.exists(pf) or not open(pf).read().strip(): time.sleep(0.05)
    return p, "http://127.0.0.1:" + open(pf).read().strip()


def metrics(url):
    """The Prometheus text of /metrics as {name: value} (labels dropped)."""
    out = {}
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1); out[k.split("{")[0]] = float(v)
    return out


def stream_gaps(url, body, timeout=900):
    """Streams a completion (body without "stream"); returns the seconds between its token events."""
    last, gaps = None, []
    with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=timeout) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                now = time.monotonic()
                if last is not None:
                    gaps.append(now - last)
                last = now
    return gaps
