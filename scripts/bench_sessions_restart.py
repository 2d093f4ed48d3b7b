"""Agent sessions across a server restart: S sessions of T turns (a ~600-token first turn, short turns
after, greedy answers carried into the history), all sessions' turn t at once (at most --clients in
flight), through the OpenAI chat API, streamed. With --restart the server is stopped (SIGTERM: a
drain) after every session's turn K and started again on the same flags before turn K+1. Per turn
it reports the median time to first token, and for the turns after K (--after K, default 2) the
prompt tokens the server computed (its /metrics: cobatch's prompt_tokens_computed_total,
llama-server's prompt_tokens_total), so a run with a restart compares with one without. With
--replicas N, N cobatch servers share the disk folder and each session's every turn goes to the
next replica.

  python3 scripts/bench_sessions_restart.py --bin build/cobatch -m MODEL [--restart] [--after 2] \\
      [--sessions 32] [--replicas 1] [--server cobatch|llama-server] [--llama-server PATH] \\
      [-- extra server flags]

cobatch runs with --cache-disk in a fresh folder (kept across the restart; --no-disk: none);
llama-server keeps nothing across one."""
import argparse
import concurrent.futures as cf
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

WORDS = ("agent session review the repository file function test build error fix patch module import "
         "return value config option server request cache token stream batch model prompt answer").split()


def first_prompt(i, n_words):
    words = [WORDS[(i * 13 + k * 7 + k // 5) % len(WORDS)] for k in range(n_words)]
    return f"Session {i}. Read this log and say what to do next.\n" + " ".join(words)


def start(args, tmp, k=0):
    pf = os.path.join(tmp, f"port{k}")
    if os.path.exists(pf):
        os.unlink(pf)
    if args.server == "cobatch":
        disk = [] if args.no_disk else ["--cache-disk", os.path.join(tmp, "kv")]
        cmd = [args.bin, "serve", "-m", args.model, "--port", "0", "--port-file", pf, *disk, *args.extra]
    else:
        port = args.port
        cmd = [args.llama_server, "-m", args.model, "--port", str(port), "--metrics", "-np", str(args.slots),
               "-c", str(args.slots * args.ctx_per_slot), "--temp", "0", *args.extra]
        open(pf, "w").write(str(port))
    log = open(os.path.join(tmp, f"server{k}.log"), "a")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    while not os.path.exists(pf) or not open(pf).read().strip():
        time.sleep(0.05)
    url = "http://127.0.0.1:" + open(pf).read().strip()
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return p, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the server did not come up")


def computed(url, server):
    text = httpx.get(url + "/metrics", timeout=30).text
    name = "cobatch:prompt_tokens_computed_total" if server == "cobatch" else "llamacpp:prompt_tokens_total"
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise RuntimeError(f"{name} not in /metrics")


def turn(url, messages, max_tokens):
    """One streamed turn: (seconds to the first content, the answer's text)."""
    t0 = time.monotonic()
    ttft, text = None, []
    body = {"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=1800) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.read()[:300]}")
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            d = json.loads(line[6:])
            for c in d.get("choices", []):
                piece = (c.get("delta") or {}).get("content")
                if piece:
                    if ttft is None:
                        ttft = time.monotonic() - t0
                    text.append(piece)
    return (ttft if ttft is not None else time.monotonic() - t0), "".join(text)


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(120)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def run(args):
    tmp = tempfile.mkdtemp(prefix="cb-restart-")
    try:
        servers = [start(args, tmp, k) for k in range(args.replicas)]
        convs = [[{"role": "user", "content": first_prompt(i, args.first_words)}] for i in range(args.sessions)]
        ttfts, after, restart_s, total = [], 0.0, 0.0, 0.0

        def computed_all():
            return sum(computed(url, args.server) for _, url in servers)

        base = 0.0
        with cf.ThreadPoolExecutor(min(args.sessions, args.clients)) as pool:
            for t in range(args.turns):
                if args.restart and t == args.after:
                    t0 = time.monotonic()
                    total += computed_all()
                    for p, _ in servers:
                        stop(p)
                    servers = [start(args, tmp, k) for k in range(args.replicas)]
                    restart_s = time.monotonic() - t0
                if t == args.after:
                    base = total + computed_all()
                # with replicas, session i's turn t goes to replica (i + t) mod N: every turn moves
                res = list(pool.map(lambda ic: turn(servers[(ic[0] + t) % len(servers)][1], ic[1], args.max_tokens),
                                    enumerate(convs)))
                ttfts.append(statistics.median(r[0] for r in res))
                for c, r in zip(convs, res):
                    c.append({"role": "assistant", "content": r[1]})
                    c.append({"role": "user", "content": f"Turn {t + 2}: now check the next file and say why."})
        total += computed_all()
        for p, _ in servers:
            stop(p)
        return {"ttft_p50_s": ttfts, "prompt_tokens_after": total - base, "prompt_tokens": total,
                "restart_s": restart_s}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/cobatch")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--server", choices=["cobatch", "llama-server"], default="cobatch")
    ap.add_argument("--llama-server", default="")
    ap.add_argument("--port", type=int, default=18431)
    ap.add_argument("--slots", type=int, default=16)
    ap.add_argument("--ctx-per-slot", type=int, default=4096)
    ap.add_argument("--sessions", type=int, default=32)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--clients", type=int, default=32, help="requests in flight at most")
    ap.add_argument("--after", type=int, default=2, help="the turns after this many are measured")
    ap.add_argument("--restart", action="store_true", help="restart the server after --after turns")
    ap.add_argument("--no-disk", action="store_true", help="cobatch without --cache-disk")
    ap.add_argument("--replicas", type=int, default=1,
                    help="cobatch servers on one --cache-disk folder; every turn moves to the next one")
    ap.add_argument("--first-words", type=int, default=450)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("extra", nargs="*", help="more server flags (after --)")
    args = ap.parse_args()
    r = run(args)
    r.update({"server": args.server, "sessions": args.sessions, "turns": args.turns, "after": args.after, "restart": args.restart,
              "disk": args.server == "cobatch" and not args.no_disk, "replicas": args.replicas, "extra": args.extra})
    print(json.dumps(r))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
