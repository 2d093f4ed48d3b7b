#!/usr/bin/env python3
"""Two `cobatch serve` replicas behind sglang-router on loopback (scripts/replicas.py's set-up):
the shared-prefix workload through the router under each policy (prefix-cache hit rate per
replica, TTFT, wall time), and a replica stopped in the middle of a run (failed requests, and how
long the router kept sending to it).

usage: scripts/bench_router.py BUILD/cobatch MODEL [--policies cache_aware,round_robin] [--kill]
                               [--kill-signal TERM|KILL] [--drain-grace S]
Prints one JSON line per run. These machines have 2 cores: each replica gets one thread, so report
ratios between policies, not scaling.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replicas  # noqa: E402


def metrics(url):
    out = {}
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name.split("{")[0]] = float(value)
    return out


def start(bin_, model, n, policy, port, serve_flags):
    procs, workers = [], []
    for k in range(1, n + 1):
        p = subprocess.Popen(replicas.serve_cmd(bin_, port + k, ["-m", model, *serve_flags]),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(p)
        workers.append(f"http://127.0.0.1:{port + k}")
    router = None
    try:
        for w, p in zip(workers, procs):
            assert replicas.wait_ok(w + "/health", 300, p), w
        router = subprocess.Popen(replicas.router_cmd(replicas.router_python(), port, workers, policy, port + 100),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert replicas.wait_ok(f"http://127.0.0.1:{port}/health", 60, router), "the router did not start"
    except BaseException:
        for p in [router, *procs]:
            if p is not None:
                p.kill()
        raise
    return router, procs, workers


def stop(router, procs):
    replicas.stop_all(router, procs)


WORDS = ("time year people way day man thing woman life child world school state family student group "
         "country problem hand part place case week company system program question work government number "
         "night point home water room mother area money story fact month lot right study book eye job word "
         "business issue side kind head house service friend father power hour game line end member law car "
         "city community name president team minute idea kid body information back parent face others level "
         "office door health person art war history party result change morning reason research girl guy").split()


def text_workload(path, n, prefix_words, distinct_words, out_tokens, degree, seed=0, rate=None):
    """A shared-prefix workload of text prompts (sglang-router takes text, not token ids): n // degree
    prefixes of prefix_words words, each followed by distinct_words words of its own."""
    import random
    rng = random.Random(seed)
    prefixes = [" ".join(rng.choice(WORDS) for _ in range(prefix_words)) for _ in range((n + degree - 1) // degree)]
    order = list(range(n))
    rng.shuffle(order)  # requests of one prefix do not arrive together
    with open(path, "w") as f:
        for k, i in enumerate(order):
            line = {"prompt": prefixes[i // degree] + " " + " ".join(rng.choice(WORDS) for _ in range(distinct_words)),
                    "max_tokens": out_tokens}
            if rate:
                line["arrival_s"] = k / rate
            f.write(json.dumps(line) + "\n")


def served_model(url):
    with urllib.request.urlopen(url + "/v1/models", timeout=10) as r:
        return json.load(r)["data"][0]["id"]


def loadgen(bin_, model, url, name, extra, out):
    # sglang-router takes text prompts only, and wants the "model" field
    cmd = [bin_, "loadgen", "--url", url, "-m", model, "--text-prompts", "--served-model", name, "--json", out, *extra]
    t0 = time.time()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        j = json.load(f)
    return j, time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("model")
    ap.add_argument("--policies", default="cache_aware,round_robin")
    ap.add_argument("--port", type=int, default=18300)
    ap.add_argument("--num-prompts", type=int, default=32)
    ap.add_argument("--prefix-len", type=int, default=400, help="words of each shared prefix")
    ap.add_argument("--kill", action="store_true", help="also: a replica stopped in the middle of a run")
    ap.add_argument("--kill-signal", default="TERM", choices=["TERM", "KILL"],
                    help="--kill: TERM (the replica drains) or KILL (it crashes)")
    ap.add_argument("--drain-grace", type=int, default=replicas.DRAIN_GRACE_S,
                    help="the replicas' cobatch serve --drain-grace (default %(default)s)")
    a = ap.parse_args()
    serve = ["-t", "1", "--max-num-seqs", "8", "--temp", "0", "--drain-grace", str(a.drain_grace)]
    tmp = tempfile.mkdtemp(prefix="bench-router-")
    wl_path = os.path.join(tmp, "shared.jsonl")
    text_workload(wl_path, a.num_prompts, a.prefix_len, 40, 32, 4)
    wl = ["--workload-file", wl_path, "--max-concurrency", "8"]
    for policy in [p for p in a.policies.split(",") if p and p != "none"]:
        router, procs, workers = start(a.bin, a.model, 2, policy, a.port, serve)
        try:
            j, wall = loadgen(a.bin, a.model, f"http://127.0.0.1:{a.port}", served_model(workers[0]), wl,
                              os.path.join(tmp, policy + ".json"))
            ms = [metrics(w) for w in workers]
        finally:
            stop(router, procs)
        r = j.get("result", j)
        q = sum(m["cobatch:prefix_cache_queries_total"] for m in ms)
        h = sum(m["cobatch:prefix_cache_hits_total"] for m in ms)
        print(json.dumps({"policy": policy, "wall_s": round(wall, 2), "failed": r.get("failed"),
                          "ttft_ms": r.get("ttft_ms"), "prefix_hit_rate": round(h / q, 4) if q else None,
                          "prompt_computed": [m["cobatch:prompt_tokens_computed_total"] for m in ms],
                          "requests_per_replica": [m["cobatch:generation_tokens_total"] / 32 for m in ms]}),
              flush=True)
    if not a.kill:
        return
    # a replica stopped (SIGTERM: it drains) in the middle of an open-loop run through the router
    router, procs, workers = start(a.bin, a.model, 2, "cache_aware", a.port, serve)
    probes, stop_at = [], [None]

    def probe():  # a short request every 100 ms: when did the router stop failing?
        end = time.time() + 40
        while time.time() < end:
            t = time.time()
            body = json.dumps({"model": name, "prompt": "Hi", "max_tokens": 1}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{a.port}/v1/completions", data=body,
                                         headers={"content-type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    ok = r.status == 200
            except OSError:
                ok = False
            probes.append((t, ok, time.time() - t))
            time.sleep(0.1)

    name = served_model(workers[1])
    th = threading.Thread(target=probe)
    try:
        kill_wl = os.path.join(tmp, "kill.jsonl")
        text_workload(kill_wl, 48, 150, 40, 32, 4, seed=1, rate=2)
        lg = subprocess.Popen([a.bin, "loadgen", "--url", f"http://127.0.0.1:{a.port}", "-m", a.model, "--text-prompts",
                               "--served-model", name,
                               "--workload-file", kill_wl, "--json", os.path.join(tmp, "kill.json")],
                              stdout=subprocess.DEVNULL)
        th.start()
        time.sleep(10)
        stop_at[0] = time.time()
        procs[0].send_signal(signal.SIGTERM if a.kill_signal == "TERM" else signal.SIGKILL)
        lg.wait(600)
        th.join()
        with open(os.path.join(tmp, "kill.json")) as f:
            j = json.load(f)
    finally:
        stop(router, procs)
    r = j.get("result", j)
    failed_probes = [t - stop_at[0] for t, ok, _ in probes if not ok]
    after = sorted(lat for t, ok, lat in probes if t >= stop_at[0] and t < stop_at[0] + 10)
    print(json.dumps({"kill": a.kill_signal, "drain_grace_s": a.drain_grace, "requests": r.get("requests"),
                      "failed": r.get("failed"),
                      "failed_by_status": r.get("failed_by_status"),
                      "first_failure_after_stop_s": round(min(failed_probes), 2) if failed_probes else None,
                      "probes": len(probes), "failed_probes": len(failed_probes),
                      "probe_latency_10s_after_stop_ms": {"p50": round(1000 * after[len(after) // 2]) if after else None,
                                                          "max": round(1000 * after[-1]) if after else None},
                      "last_failure_after_stop_s": round(max(failed_probes), 2) if failed_probes else None}),
          flush=True)


if __name__ == "__main__":
    main()
