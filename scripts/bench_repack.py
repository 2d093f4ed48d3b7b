#!/usr/bin/env python3
"""CPU weight layouts: what --repack costs or gains (BENCHMARKS.md, 'CPU weight layouts').

For each model (the default Q4_1, and Q4_0 / Q8_0 models of the same shape from `cobatch mkmodel`)
and each configuration, `cobatch bench`'s ceiling (llama_decode alone: best prefill tok/s, decode
tok/s at batch 1 and 16) and one small continuous run (4 decode-heavy requests). Configurations take turns, round after
round; the table gives medians. A configuration that crashes is reported as such.

  --baseline BIN   also run another build (an older one) against this one, both under an LD_PRELOAD shim
                   (scripts/noamx.c) that has the OS refuse AMX tiles: a host without AMX.
usage: scripts/bench_repack.py [--rounds N] [--baseline BIN] [--out DIR]
"""
import argparse, json, os, statistics, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(cmd, **kw):
    return subprocess.run(cmd, cwd=ROOT, **kw)


def models(out):
    ms = [("Q4_1 (default)", os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))]
    for t in ("q4_0", "q8_0"):
        p = os.path.join(out, f"smollm2-135m-{t}.gguf")
        if not os.path.exists(p):
            sh(["build/cobatch", "mkmodel", "--preset", "smollm2-135m", "--type", t, "-o", p], check=True,
               stdout=subprocess.DEVNULL)
        ms.append((t.upper() + " (synthetic)", p))
    return ms


def one(binary, model, flags, env, path):
    cmd = [binary, "bench", "-m", model, "--modes", "continuous", "--workload", "decode-heavy", "--num-prompts",
           "4", "--json", path] + flags
    r = sh(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        return {"crash": r.returncode}
    j = json.load(open(path))
    c = j["ceiling"]
    dec = {d["batch"]: d["tok_per_s"] for d in c["decode"]}
    return {"bufts": c.get("weight_buffer_types", "?"), "prefill": max(p["tok_per_s"] for p in c["prefill"]),
            "d1": dec.get(1, 0), "d16": dec.get(16, 0)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench-results/repack"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    shim = os.path.join(a.out, "noamx.so")
    sh(["cc", "-shared", "-fPIC", "-O2", "-o", shim, "scripts/noamx.c", "-ldl"], check=True)
    env, noamx = dict(os.environ), dict(os.environ, LD_PRELOAD=shim)
    cfgs = [(f"--repack {m}", "build/cobatch", ["--repack", m], env) for m in ("auto", "off", "on")]
    if a.baseline:
        cfgs += [("no AMX: baseline", a.baseline, [], noamx), ("no AMX: this build", "build/cobatch", [], noamx)]
    got = {}
    for rnd in range(a.rounds):
        for mname, mpath in models(a.out):
            for cname, binary, flags, e in cfgs:
                r = one(binary, mpath, flags, e, os.path.join(a.out, "last.json"))
                got.setdefault((mname, cname), []).append(r)
                print(f"round {rnd + 1}: {mname}, {cname}: {r if 'crash' in r else {k: r[k] for k in ('bufts', 'prefill', 'd1', 'd16')}}",
                      file=sys.stderr, flush=True)
    print("| model | configuration | weights in | prefill tok/s | decode tok/s, batch 1 | batch 16 |")
    print("|---|---|---|---:|---:|---:|")
    for (mname, cname), rs in got.items():
        ok = [r for r in rs if "crash" not in r]
        if len(ok) < len(rs):
            print(f"| {mname} | {cname} | — | segfault (exit {rs[0].get('crash')}) in {len(rs) - len(ok)} of {len(rs)} | | |")
            continue
        med = lambda k: statistics.median(r[k] for r in ok)
        print(f"| {mname} | {cname} | {ok[0]['bufts']} | {med('prefill'):.0f} | {med('d1'):.0f} | {med('d16'):.0f} |")


if __name__ == "__main__":
    main()
