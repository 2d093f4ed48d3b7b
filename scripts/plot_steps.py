#!/usr/bin/env python3
"""Tokens per engine step over time, from step traces (`--trace FILE` of cobatch serve, bench and
batch write the same tab-separated format), one panel per run on a shared time axis, as an SVG.
BatchLLM's "valleys" read from it: steps that carry few tokens while the pool is full or the next
group waits. Prints one summary line per run: steps, tokens a step, steps under --below tokens.

    scripts/plot_steps.py -o steps.svg [--title T] [--below N] [LABEL=]TRACE[@CONFIG] ...

A trace holding several configurations (bench writes one per row's `config`) gives one panel each,
unless @CONFIG names one. Standard library only.
"""
import argparse
import statistics
import sys

W, PANEL_H, ML, MR, MT, MB, GAP = 900, 150, 80, 30, 50, 50, 30


def read_trace(path):
    """{config: [(t_s, tokens, prefill_tokens)]} in file order."""
    with open(path, encoding="utf-8") as f:
        head = f.readline().rstrip("\n").split("\t")
        need = ("config", "t_ms", "decode_rows", "prefill_tokens")
        missing = [c for c in need if c not in head]
        if missing:
            raise SystemExit(f"{path}: not a step trace (no column {', '.join(missing)})")
        ic, it, idec, ipre = (head.index(c) for c in need)
        runs = {}
        for n, line in enumerate(f, start=2):
            cols = line.rstrip("\n").split("\t")
            if len(cols) != len(head):
                raise SystemExit(f"{path}:{n}: {len(cols)} columns, the header has {len(head)}")
            pre = int(cols[ipre])
            runs.setdefault(cols[ic], []).append((float(cols[it]) / 1e3, int(cols[idec]) + pre, pre))
    return runs


def series(args):
    out = []
    for spec in args:
        label, _, rest = spec.rpartition("=")
        path, _, config = rest.partition("@")
        runs = read_trace(path)
        if config:
            if config not in runs:
                raise SystemExit(f"{path}: no configuration {config!r} (it has {', '.join(runs)})")
            runs = {config: runs[config]}
        for name, rows in runs.items():
            if not rows:
                continue
            t0 = rows[0][0]
            shown = label or name
            if label and len(runs) > 1:
                shown = f"{label} {name}"
            out.append((shown, [(t - t0, tok, pre) for t, tok, pre in rows]))
    return out


def nice_max(v):
    p = 1.0
    while p * 10 <= v:
        p *= 10
    for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if v <= m * p:
            return m * p
    return 10 * p


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("'", "&apos;")


def svg(runs, title, below):
    tmax = nice_max(max(rows[-1][0] for _, rows in runs) or 1)
    ymax = nice_max(max(tok for _, rows in runs for _, tok, _ in rows) or 1)
    pw = W - ML - MR
    h = MT + len(runs) * (PANEL_H + GAP) + MB
    o = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{W}' height='{h}' font-family='sans-serif' "
         "font-size='12'>",
         "<rect width='100%' height='100%' fill='white'/>",
         f"<text x='{ML}' y='28' font-size='16' font-weight='bold'>{esc(title)}</text>"]
    for i, (label, rows) in enumerate(runs):
        top = MT + i * (PANEL_H + GAP)
        base = top + PANEL_H

        def y(v):
            return base - PANEL_H * v / ymax

        o.append(f"<text x='{ML}' y='{top - 6}' font-weight='bold'>{esc(label)}</text>")
        for k in range(3):
            v = ymax * k / 2
            o.append(f"<line x1='{ML}' y1='{y(v):.1f}' x2='{ML + pw}' y2='{y(v):.1f}' stroke='#ddd'/>")
            o.append(f"<text x='{ML - 6}' y='{y(v) + 4:.1f}' text-anchor='end'>{v:g}</text>")
        if below:  # the valleys shaded: spans of steps under `below` tokens
            k = 0
            while k < len(rows):
                if rows[k][1] >= below:
                    k += 1
                    continue
                j = k
                while j + 1 < len(rows) and rows[j + 1][1] < below:
                    j += 1
                x0 = ML + pw * rows[k][0] / tmax
                x1 = ML + pw * (rows[j + 1][0] if j + 1 < len(rows) else rows[j][0]) / tmax
                o.append(f"<rect x='{x0:.1f}' y='{top}' width='{max(x1 - x0, 0.5):.1f}' height='{PANEL_H}' "
                         "fill='#d62728' fill-opacity='0.12'/>")
                k = j + 1
        # each step a bar from its start to the next step's start: tokens (blue), prompt part (orange)
        for part, color in ((1, "#1f77b4"), (2, "#ff7f0e")):
            pts = [f"{ML},{base}"]
            for k, row in enumerate(rows):
                x0 = ML + pw * row[0] / tmax
                x1 = ML + pw * (rows[k + 1][0] if k + 1 < len(rows) else row[0]) / tmax
                pts.append(f"{x0:.1f},{y(row[part]):.1f} {x1:.1f},{y(row[part]):.1f}")
            pts.append(f"{ML + pw * rows[-1][0] / tmax:.1f},{base}")
            o.append(f"<polygon fill='{color}' fill-opacity='0.8' stroke='none' points='{' '.join(pts)}'/>")
        o.append(f"<line x1='{ML}' y1='{base}' x2='{ML + pw}' y2='{base}' stroke='black'/>")
    bottom = MT + len(runs) * (PANEL_H + GAP) - GAP
    for k in range(5):
        x = ML + pw * k / 4
        o.append(f"<text x='{x:.1f}' y='{bottom + 18}' text-anchor='middle'>{tmax * k / 4:g}</text>")
    o.append(f"<text x='{ML + pw / 2}' y='{bottom + 38}' text-anchor='middle'>seconds since the run's first "
             "step; blue: tokens in the step, orange: its prompt tokens"
             + (f"; shaded: steps under {below} tokens" if below else "") + "</text>")
    o.append("</svg>")
    return "\n".join(o) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+", metavar="[LABEL=]TRACE[@CONFIG]")
    ap.add_argument("-o", "--output", required=True, help="SVG file to write")
    ap.add_argument("--title", default="Tokens per engine step")
    ap.add_argument("--below", type=int, default=64, help="a valley: a step of fewer tokens (default 64; 0: none)")
    a = ap.parse_args()
    if a.below < 0:
        ap.error("--below must be 0 or more")
    runs = series(a.traces)
    if not runs:
        raise SystemExit("no steps in the traces")
    with open(a.output, "w", encoding="utf-8") as f:
        f.write(svg(runs, a.title, a.below))
    for label, rows in runs:
        tok = [r[1] for r in rows]
        low = sum(1 for t in tok if t < a.below)
        print(f"{label}: {len(rows)} steps, tokens a step median {statistics.median(tok):g} "
              f"mean {statistics.mean(tok):.1f}, under {a.below}: {low} ({100 * low / len(rows):.0f}%), "
              f"decode-only: {sum(1 for r in rows if r[2] == 0)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
