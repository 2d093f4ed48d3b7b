#!/usr/bin/env bash
# `cobatch mkmodel` + `cobatch bench` end to end on a tiny synthetic model: every configuration
# runs every request, the table and the trace have what they promise, bad flags are refused.
# usage: bench_smoke.sh BUILD/cobatch
set -u
bin="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
source "$(dirname "$0")/lib.sh"
"$bin" mkmodel --preset tiny --type q4_0 -o "$dir/tiny.gguf" 2>"$dir/mk.err"
check "mkmodel writes a model" '[ -s "$dir/tiny.gguf" ]'
"$bin" bench -m "$dir/tiny.gguf" --workload mixed --num-prompts 6 --modes sequential,static,continuous \
    --prefill-chunks none,16 --max-num-seqs 4 --trace "$dir/trace.tsv" --json "$dir/out.json" >"$dir/out.md" 2>"$dir/err"
rc=$?
cat "$dir/out.md"
check "bench exits 0" '[ $rc -eq 0 ]'
check "six configurations in the table" '[ "$(grep -c "^| \(sequential\|static\|continuous\) chunk=" "$dir/out.md")" -eq 6 ]'
check "no failed requests" '! grep -q "failed" "$dir/out.md"'
check "workload line names 6 requests" 'grep -q "workload mixed: 6 requests, 1664 prompt + 216 output tokens" "$dir/out.md"'
# wasted slots is the third column from the end: $(NF-3) with -F"|"; a missing row must fail the check too
check "static wastes slots, continuous does not" \
    'grep "^| static chunk=16" "$dir/out.md" | awk -F"|" "{n++; w=\$(NF-3)+0} END {exit !(n == 1 && w > 0)}" &&
     grep "^| continuous chunk=16" "$dir/out.md" | awk -F"|" "{n++; w=\$(NF-3)+0} END {exit !(n == 1 && w == 0)}"'
check "cpu user time in every row, within the cpu time" \
    '[ "$(grep "^| \(sequential\|static\|continuous\) chunk=" "$dir/out.md" | awk -F"|" "\$5 ~ /[0-9]/ && \$5+0 <= \$4+0" | wc -l)" -eq 6 ]'
check "ceiling table printed" 'grep -q "^| decode tok/s" "$dir/out.md" && grep -q "^| prefill tok/s" "$dir/out.md"'
check "scheduling efficiency for every configuration" '[ "$(grep "^| \(sequential\|static\|continuous\) chunk=" "$dir/out.md" | grep -c "| [0-9]*% |")" -eq 6 ]'
check "json report is complete" 'python3 - "$dir/out.json" "$dir/tiny.gguf" <<PY
import json, sys, hashlib
d = json.load(open(sys.argv[1]))
assert d["model"]["synthetic"] is True
assert d["model"]["sha256"] == hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest()
assert d["machine"]["cores"] >= 1 and len(d["machine"]["llama_cpp_commit"]) == 40
assert len(d["configurations"]) == 6
for c in d["configurations"]:
    assert c["cache_type_k"] in ("f16", "bf16", "f32") and isinstance(c["flash_attn"], bool)  # auto, as run
    r = c["result"]
    assert r["completed"] == 6 and r["failed"] == 0 and r["output_tokens"] == 216
    assert r["ttft_ms"]["p50"] <= r["ttft_ms"]["p99"] <= r["ttft_ms"]["max"]
    assert 0 < r["scheduling_efficiency"]
    assert 0 < r["cpu_user_s"] <= r["cpu_s"]
    # the steps time splits into llama_decode and host work; steps never outlast the run
    assert 0 < r["decode_s"] < r["step_s"] <= r["wall_s"]
    assert abs(r["host_share"] - (r["step_s"] - r["decode_s"]) / r["step_s"]) < 1e-9
    # a static group holds its finished members places until its slowest ends; continuous refills them
    assert (r["wasted_decode_slots"] > 0) == (c["mode"] == "static"), c["label"]
    # every engine statistic (cobatch.h, COBATCH_STATS), by its field name, agreeing with the columns
    es = r["engine_stats"]
    assert len(es) >= 40 and es["steps"] == r["steps"] and es["prompt_tokens"] == r["prompt_tokens_computed"]
    assert es["kv_peak"] == r["kv_peak_cells"] and es["swap_copy_us"] / 1e3 == r["swap_copy_ms"]
assert [x["batch"] for x in d["ceiling"]["decode"]] == [1, 2, 4]
assert d["ceiling"]["prefill_growth_s_per_token_per_token"] >= 0
PY'
check "trace has steps of every configuration" '[ "$(cut -f1 "$dir/trace.tsv" | sort -u | wc -l)" -eq 7 ]'
check "trace: decode_ms within each step's step_ms; attended_cells at least context_cells (split); draft_rows last (none)" \
    'head -1 "$dir/trace.tsv" | awk -F"\t" "{exit !(\$18 == \"decode_ms\" && \$19 == \"attended_cells\" && \$20 == \"draft_rows\" && NF == 20)}" &&
     awk -F"\t" "NR>1 {n++; if (NF != 20 || \$18+0 <= 0 || \$18+0 > \$3+0 || \$20 != 0) bad=1; if (\$1 ~ /split/ && \$19+0 < \$15+0) bad=1} END {exit bad || !n}" "$dir/trace.tsv"'
check "host share in every row" \
    '[ "$(grep "^| \(sequential\|static\|continuous\) chunk=" "$dir/out.md" | awk -F"|" "\$16 ~ /^ [0-9.]+% $/" | wc -l)" -eq 6 ]'
check "trace never exceeds the step budget" 'awk -F"\t" "NR>1 && \$4+\$5 > 4096 {bad=1} END {exit bad}" "$dir/trace.tsv"'
# scripts/plot_steps.py draws the trace: a panel per configuration, each summary's steps the trace's
python3 "$(dirname "$0")/../../scripts/plot_steps.py" -o "$dir/steps.svg" "$dir/trace.tsv" >"$dir/plot.out" 2>&1
rc=$?
check "plot_steps: exits 0, an SVG of six panels" \
    '[ $rc -eq 0 ] && [ "$(grep -c "<polygon" "$dir/steps.svg")" -eq 12 ] && grep -q "</svg>" "$dir/steps.svg"'
check "plot_steps: each configuration's steps and decode-only steps as the trace has them" \
    'awk -F"\t" "NR>1 {n[\$1]++; if (\$5 == 0) d[\$1]++} END {for (c in n) print c \": \" n[c] \" steps \" d[c]+0}" \
         "$dir/trace.tsv" | sort >"$dir/want" &&
     sed -E "s/^([^:]*): ([0-9]+) steps.*decode-only: ([0-9]+)$/\1: \2 steps \3/" "$dir/plot.out" | sort >"$dir/got" &&
     [ "$(wc -l <"$dir/want")" -eq 6 ] && cmp -s "$dir/want" "$dir/got"'
python3 "$(dirname "$0")/../../scripts/plot_steps.py" -o "$dir/x.svg" "$dir/trace.tsv@nope" >/dev/null 2>"$dir/plot.err"
rc=$?
check "plot_steps: an unknown configuration refused by name" '[ $rc -ne 0 ] && grep -q "no configuration .nope." "$dir/plot.err"'
# budgets are a list too: chunk none runs once, at the largest budget; chunked rows at each budget
"$bin" bench -m "$dir/tiny.gguf" --workload mixed --num-prompts 4 --modes continuous --no-ceiling \
    --prefill-chunks none,16 --max-num-batched-tokens 24,512 --max-num-seqs 4 --trace "$dir/tb.tsv" \
    --json "$dir/b.json" >"$dir/b.md" 2>"$dir/b.err"
rc=$?
check "budget list: exits 0" '[ $rc -eq 0 ]'
check "budget list: none once at 512, chunk 16 at 24 and 512" \
    '[ "$(grep -c "^| continuous chunk=" "$dir/b.md")" -eq 3 ] && grep -q "^| continuous chunk=none budget=512 " "$dir/b.md" &&
     grep -q "^| continuous chunk=16 budget=24 " "$dir/b.md" && grep -q "^| continuous chunk=16 budget=512 " "$dir/b.md"'
check "budget list: the 24-token budget holds in every step" \
    'awk -F"\t" "\$1 ~ /budget=24 / {n++; if (\$4+\$5 > 24) bad=1} END {exit bad || !n}" "$dir/tb.tsv"'
# max_num_seqs is a list too, crossed with the others; sequential runs once, at the first (long outputs:
# the first request cannot finish before the others are in, however late their submission lands)
"$bin" bench -m "$dir/tiny.gguf" --workload decode-heavy --num-prompts 4 --modes sequential,continuous --no-ceiling \
    --max-num-seqs 2,4 --trace "$dir/tq.tsv" --json "$dir/q.json" >"$dir/q.md" 2>"$dir/q.err"
rc=$?
check "seqs list: exits 0" '[ $rc -eq 0 ]'
check "seqs list: continuous at 2 and at 4, sequential once, in the table and the JSON" \
    'grep -q "^| continuous chunk=256 seqs=2 split " "$dir/q.md" && grep -q "^| continuous chunk=256 seqs=4 split " "$dir/q.md" &&
     grep -q "max_num_seqs 2,4," "$dir/q.md" && python3 - "$dir/q.json" <<PY
import json, sys
d = json.load(open(sys.argv[1]))
got = sorted((c["mode"], c["max_num_seqs"]) for c in d["configurations"])
assert got == [("continuous", 2), ("continuous", 4), ("sequential", 2)], got
assert all(c["result"]["completed"] == 4 for c in d["configurations"])
PY'
check "seqs list: at 2, never more than 2 running; at 4, 4 at once" \
    'awk -F"\t" "\$1 ~ /seqs=2 / {n++; if (\$7 > 2) bad=1} END {exit bad || !n}" "$dir/tq.tsv" &&
     awk -F"\t" "\$1 ~ /seqs=4 / && \$7 == 4 {n++} END {exit !n}" "$dir/tq.tsv"'
"$bin" bench -m "$dir/tiny.gguf" --workload mixed --num-prompts 4 --modes continuous --no-ceiling \
    --max-num-seqs auto --kv-layouts unified --json "$dir/a.json" >"$dir/a.md" 2>"$dir/a.err"
rc=$?
check "seqs auto alone: one configuration, as many as the cells hold" \
    '[ $rc -eq 0 ] && [ "$(grep -c "^| continuous chunk=256 unified |" "$dir/a.md")" -eq 1 ] &&
     python3 -c "import json, sys; c = json.load(open(sys.argv[1]))[\"configurations\"]; assert len(c) == 1 and c[0][\"max_num_seqs\"] > 4" "$dir/a.json"'
# --repeat: the reported run is the median; of two runs the faster one (its wall is the min)
"$bin" bench -m "$dir/tiny.gguf" --workload mixed --num-prompts 4 --modes continuous --no-ceiling --repeat 2 \
    >"$dir/r.md" 2>"$dir/r.err"
rc=$?
check "repeat 2: exits 0" '[ $rc -eq 0 ]'
check "repeat 2: reports the faster run, in the table too" \
    'line=$(tr "\r" "\n" <"$dir/r.err" | grep "median of 2") &&
     w=$(sed -E "s/.*wall ([0-9.]+) s.*/\1/" <<<"$line") && lo=$(sed -E "s/.*min ([0-9.]+),.*/\1/" <<<"$line") &&
     [ "$w" = "$lo" ] && grep "^| continuous chunk=" "$dir/r.md" | awk -F"|" -v w="$w" "{exit !(\$3+0 == w+0)}"'
# multi-prefix: a system prompt, a document per group of requests, a question each; the prefix
# cache serves the shared parts
"$bin" bench -m "$dir/tiny.gguf" --workload multi-prefix --num-prompts 8 --system-len 40 --prefix-len 60 \
    --distinct-len 8 --output-len 4 --modes continuous --no-ceiling --max-num-seqs 4 --json "$dir/mp.json" \
    >"$dir/mp.md" 2>"$dir/mp.err"
rc=$?
check "multi-prefix: every request, prompts of system + document + question, shared parts from the cache" \
    '[ $rc -eq 0 ] && grep -q "workload multi-prefix: 8 requests, 864 prompt + 32 output tokens" "$dir/mp.md" &&
     python3 -c "import json, sys; r = json.load(open(sys.argv[1]))[\"configurations\"][0][\"result\"]; assert r[\"completed\"] == 8 and r[\"prefix_hit_tokens\"] > 0, r" "$dir/mp.json"'
# sessions: each turn sent with the conversation before it once that turn is answered; two streams
# and no holder streams, so most later turns come back from the host tier (turns of 20 tokens: the
# whole hit taken, where exact hits compute the last 64 again)
"$bin" bench -m "$dir/tiny.gguf" --workload sessions --sessions 6 --turns 3 --system-len 100 --task-len 40 \
    --turn-len 20 --output-len 8 --modes continuous --no-ceiling --max-num-seqs 2 --prefix-cache-streams 0 --approximate-hits \
    --cache-ram 0.1 >"$dir/s.md" 2>"$dir/s.err"
rc=$?
cat "$dir/s.md"
check "sessions: exits 0" '[ $rc -eq 0 ]'
check "sessions: a row per turn, none failed" \
    '[ "$(grep -c "^| [123] | 6 | 0 |" "$dir/s.md")" -eq 3 ]'
check "sessions: later turns read most of their prompt from the cache" \
    'grep "^| [23] | 6 |" "$dir/s.md" | awk -F"|" "{n++; if (\$8+0 < 70) bad=1} END {exit bad || n != 2}"'
check "sessions: the host tier loaded conversations back, none failed" \
    'grep -Eq "host tier [1-9][0-9]*: [1-9][0-9]* loads, [0-9]+ saves, 0 failed" "$dir/s.md"'
# the ceiling at the workload's context, over its output tokens: a session turn's whole conversation
# (system 40; turn 1: 40 + 20 + 8/2 = 64; turn 2: 40 + 20 + 8 + 10 + 8/2 = 82; mean 73), and the
# sessions' scheduling efficiency against it
"$bin" bench -m "$dir/tiny.gguf" --workload sessions --sessions 2 --turns 2 --system-len 40 --task-len 20 \
    --turn-len 10 --output-len 8 --modes continuous --max-num-seqs 2 >"$dir/se.md" 2>"$dir/se.err"
rc=$?
check "sessions with the ceiling: exits 0, measured at the conversations' context, efficiency reported" \
    '[ $rc -eq 0 ] && grep -q "^| decode batch (context 73) | 1 | 2 |" "$dir/se.md" &&
     grep "^| continuous chunk=" "$dir/se.md" | grep -q "| [0-9]*% |"'
# long-context: distinct prompts of --context-len; --ceiling-only measures at 300 + 128/2 and runs
# nothing; --ceiling-verify times steps of 1 + 3 rows a sequence too
"$bin" bench -m "$dir/tiny.gguf" --workload long-context --context-len 300 --ceiling-only --max-num-seqs 4 \
    --ceiling-verify 3 >"$dir/lc.md" 2>"$dir/lc.err"
rc=$?
check "long-context --ceiling-only: the ceiling at context 364 for 1, 2 and 4 sequences, no run" \
    '[ $rc -eq 0 ] && grep -q "^| decode batch (context 364) | 1 | 2 | 4 |" "$dir/lc.md" &&
     grep -q "flash attention on, KV cache f16/f16, split layout" "$dir/lc.md" && ! grep -q "^| continuous" "$dir/lc.md"'
check "--ceiling-verify 3: what a step checking 3 drafts costs per batch size, and the chance where they pay" \
    'grep -Eq "^\| a step checking 3 drafts a sequence, x a one-row step \| ([0-9]+\.[0-9]+ \| ){3}$" "$dir/lc.md" &&
     grep -Eq "^\| \.\.\. where one sequence of the batch checks them \| ([0-9]+\.[0-9]+ \| ){3}$" "$dir/lc.md" &&
     grep -Eq "^\| \.\.\. \(one sequence checking\) \| (0\.[0-9]+ \| |1\.00 \| ){3}$" "$dir/lc.md" &&
     grep -Eq "^\| drafts pay \(every sequence checking\) when each holds with chance above \| (0\.[0-9]+ \| |1\.00 \| ){3}$" "$dir/lc.md"'
# a conversation that outgrows a request's context ends there, failed, as a client's would: its
# turn is refused (too long), its later turns are not sent, the run goes on
"$bin" bench -m "$dir/tiny.gguf" --workload sessions --sessions 3 --turns 3 --system-len 40 --task-len 20 \
    --turn-len 100 --output-len 8 --modes continuous --no-ceiling --max-num-seqs 2 --max-model-len 256 \
    --long-lane 0 >"$dir/o.md" 2>"$dir/o.err"
rc=$?
cat "$dir/o.md"
check "sessions outgrowing the context: exits 0" '[ $rc -eq 0 ]'
check "sessions outgrowing the context: turns 1-2 answered, turn 3 failed" \
    'grep -q "^| 1 | 3 | 0 |" "$dir/o.md" && grep -q "^| 2 | 3 | 0 |" "$dir/o.md" && grep -q "^| 3 | 3 | 3 |" "$dir/o.md"'
# edit: files of Python rendered with the chat template, answered with speculation off, on, and
# with each file sent as the request's prediction; the JSON tells the drafts apart
"$bin" bench -m "$dir/tiny.gguf" --workload edit --num-prompts 2 --edit-lines 10 --modes continuous --no-ceiling \
    --specs off,ngram,prediction --max-num-seqs 2 --json "$dir/ed.json" >"$dir/ed.md" 2>"$dir/ed.err"
rc=$?
check "edit with --specs off,ngram,prediction: exits 0, a row each, drafts only where speculation is on" \
    '[ $rc -eq 0 ] && grep -q "^| continuous chunk=256 split spec=off |" "$dir/ed.md" &&
     grep -q "^| continuous chunk=256 split spec=ngram |" "$dir/ed.md" &&
     grep -q "^| continuous chunk=256 split spec=prediction |" "$dir/ed.md" &&
     python3 -c "import json,sys; c=json.load(open(sys.argv[1]))[\"configurations\"]; \
sys.exit(not (c[0][\"result\"][\"spec_drafted\"] == 0 and c[2][\"result\"][\"spec_drafted\"] > 0 and c[2][\"prediction\"]))" "$dir/ed.json"'
"$bin" bench -m "$dir/tiny.gguf" --max-num-batched-tokens 64,x >/dev/null 2>"$dir/e4"; rc=$?
check "bad budget refused" '[ $rc -eq 2 ] && grep -q "max-num-batched-tokens takes" "$dir/e4"'
"$bin" bench -m "$dir/tiny.gguf" --max-num-seqs 4,0 >/dev/null 2>"$dir/e7"; rc=$?
check "bad max-num-seqs item refused" '[ $rc -eq 2 ] && grep -q "max-num-seqs takes counts from 1 to 256 or auto (got .0.)" "$dir/e7"'
"$bin" bench -m "$dir/tiny.gguf" --workload nope >/dev/null 2>"$dir/e1"; rc=$?
check "unknown workload refused" '[ $rc -eq 2 ] && grep -q "unknown workload" "$dir/e1"'
"$bin" bench -m "$dir/tiny.gguf" --modes fast >/dev/null 2>"$dir/e2"; rc=$?
check "unknown mode refused" '[ $rc -eq 2 ] && grep -q "unknown mode" "$dir/e2"'
"$bin" bench -m "$dir/tiny.gguf" --modes static,static,static,static,static,static,static,static,static >/dev/null \
    2>"$dir/e5"; rc=$?
check "a list past its items refused" '[ $rc -eq 2 ] && grep -q "modes takes at most 8 items" "$dir/e5"'
"$bin" bench -m "$dir/tiny.gguf" --prefill-chunks 1,2,3,4,5,6,7,8 --max-num-batched-tokens 16,32,64,128,256,512,1024,2048 \
    >/dev/null 2>"$dir/e6"; rc=$?
check "more than 64 configurations refused" '[ $rc -eq 2 ] && grep -q "more than 64 configurations" "$dir/e6"'
"$bin" mkmodel --preset huge -o "$dir/x.gguf" 2>"$dir/e3"; rc=$?
check "unknown preset refused" '[ $rc -eq 2 ] && grep -q "preset is one of" "$dir/e3"'
finish
