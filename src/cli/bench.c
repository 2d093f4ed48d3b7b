/* bench.c — `cobatch bench`: the same workload through several engine configurations in one run. */
#include "../bench/bench.h"
#include "args.h"
#include "cli.h"
#include "flags.h"
#include "wargs.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CFG 64

static const char *MODE_NAMES[] = {"continuous", "static", "sequential"};

/* Splits a comma list into at most max items (pointers into s, which is modified). */
static int split_list(char *s, char **out, int max) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok && n < max; tok = strtok(NULL, ","))
        out[n++] = tok;
    return n;
}

/* The workload as OpenAI Batch API lines: the same requests `cobatch batch` (or any server) runs. */
static int write_batch(const char *path, const cb_workload *w) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    for (int i = 0; i < w->n; i++) {
        const cb_work_item *it = &w->items[i];
        fprintf(f,
                "{\"custom_id\": \"req-%d\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": "
                "{\"prompt\": [",
                i);
        for (int32_t k = 0; k < it->n_in; k++)
            fprintf(f, k ? ",%d" : "%d", it->tokens[k]);
        fprintf(f, "], \"max_tokens\": %d, \"temperature\": 0, \"ignore_eos\": true}}\n", it->n_out);
    }
    int bad = ferror(f);
    return fclose(f) == 0 && !bad ? 0 : -1;
}

static void print_ceiling(const cb_ceiling *c) {
    printf("\nceiling (llama_decode alone, this machine; weights in %s):\n\n| prompt chunk | ", c->weight_bufts);
    for (int i = 0; i < c->n_chunk; i++)
        printf("%d | ", c->chunk[i]);
    printf("\n|---|");
    for (int i = 0; i < c->n_chunk; i++)
        printf("---:|");
    printf("\n| prefill tok/s | ");
    for (int i = 0; i < c->n_chunk; i++)
        printf("%.0f | ", c->prefill_tps[i]);
    printf("\n\n| decode batch (context %d) | ", c->context);
    for (int i = 0; i < c->n_batch; i++)
        printf("%d | ", c->batch[i]);
    printf("\n|---|");
    for (int i = 0; i < c->n_batch; i++)
        printf("---:|");
    printf("\n| decode tok/s | ");
    for (int i = 0; i < c->n_batch; i++)
        printf("%.0f | ", c->decode_tps[i]);
    printf("\n\nsched eff = (prompt tokens / best prefill tok/s + output tokens / decode tok/s at "
           "min(max_num_seqs, requests)) / wall time; all-at-once arrivals only\n");
}

static int cmp_wall(const void *a, const void *b) {
    double x = ((const cb_bench_result *)a)->wall_s, y = ((const cb_bench_result *)b)->wall_s;
    return (x > y) - (x < y);
}

int cb_cmd_bench(int argc, char **argv) {
    struct cobatch_engine_params ep = cobatch_engine_default_params();
    cb_wargs wa;
    cb_wargs_init(&wa);
    const char *trace_path = NULL, *json_path = NULL, *plot_dir = NULL, *batch_path = NULL;
    bool ceiling_on = true;
    char modes_s[128] = "sequential,static,continuous", chunks_s[128] = "256", layouts_s[64] = "", caching_s[16] = "",
         budgets_s[128] = "";
    int64_t repeat = 1, x;
    const char *modes_a = NULL, *chunks_a = NULL, *layouts_a = NULL, *caching_a = NULL, *budgets_a = NULL;
    bool no_ceiling = false;
    const cb_flag own[] = {
        {"--modes", "LIST", CB_FLAG_STR, &modes_a, .help = "of sequential,static,continuous (default all three)"},
        {"--prefill-chunks, --prefill-chunk", "LIST", CB_FLAG_STR, &chunks_a,
         .help = "token counts or none (default 256)"},
        {"--max-num-batched-tokens", "LIST", CB_FLAG_STR, &budgets_a,
         .help = "step budgets (default 512; chunk none runs once, at the\nlargest: without chunking a prompt needs "
                 "room to go in whole)"},
        {"--kv-layouts", "LIST", CB_FLAG_STR, &layouts_a, .help = "of split,unified (default: --kv-layout's, split)"},
        {"--prefix-caching", "LIST", CB_FLAG_STR, &caching_a,
         .help = "of on,off (default on; off with --no-prefix-caching)"},
        {"--repeat", "N", CB_FLAG_I64, &repeat, 1, 100,
         .help = "run each configuration N times, report the median-wall run\n(of an even count, the faster "
                 "middle one)"},
        {"--trace", "FILE", CB_FLAG_STR, &trace_path, .help = "one line per engine step (tab-separated)"},
        {"--json", "FILE", CB_FLAG_STR, &json_path, .help = "every figure, the configurations, model and machine"},
        {"--plot", "DIR", CB_FLAG_STR, &plot_dir, .help = "SVG charts: throughput, TTFT and ITL CDFs, tokens per step"},
        {"--no-ceiling", NULL, CB_FLAG_SET, &no_ceiling,
         .help = "skip measuring llama_decode alone (no scheduling efficiency)"},
        {"--write-batch", "FILE", CB_FLAG_STR, &batch_path,
         .help = "write the workload as an OpenAI Batch API job (JSONL for\n`cobatch batch`: token-id prompts, "
                 "ignore_eos) and run nothing"},
    };
    cb_flag wfl[CB_WARGS_FLAGS], eng[CB_ENGINE_FLAGS];
    cb_cli cli = {.cmd = "cobatch bench",
                  .usage = "usage: cobatch bench [flags]   (no flags: the mixed workload in every mode, the main "
                           "job)\nConfiguration lists are crossed with each other.\n",
                  .groups = {{"configurations and output", own, sizeof(own) / sizeof(own[0])},
                             cb_wargs_flags(wfl, &wa),
                             cb_flags_engine(eng, &ep)},
                  .n_groups = 3};
    int pr = cb_flags_parse(&cli, argc, argv, stdout, stderr);
    if (pr != 0) return pr == 1 ? 0 : 2;
    ceiling_on = !no_ceiling;
#define TAKE(dst, src)                                                                                                 \
    if (src) snprintf(dst, sizeof(dst), "%s", src)
    TAKE(modes_s, modes_a);
    TAKE(chunks_s, chunks_a);
    TAKE(layouts_s, layouts_a);
    TAKE(caching_s, caching_a);
    TAKE(budgets_s, budgets_a);
#undef TAKE
    /* the lists default to the engine flags (--kv-layout, --no-prefix-caching) */
    if (!layouts_s[0])
        snprintf(layouts_s, sizeof(layouts_s), "%s", ep.kv_layout == COBATCH_KV_SPLIT ? "split" : "unified");
    if (!caching_s[0]) snprintf(caching_s, sizeof(caching_s), "%s", ep.prefix_caching ? "on" : "off");
    double rate = wa.rate, burstiness = wa.burstiness;
    int64_t concurrency = wa.concurrency;
    if (!ep.model_path) ep.model_path = cb_default_model();

    /* configurations: prefix caching x layouts x modes x chunks x budgets */
    static cb_bench_config cfgs[MAX_CFG];
    char *modes[8], *chunks[8], *layouts[4], *caching[2], *budgets[8];
    int nm = split_list(modes_s, modes, 8), nc = split_list(chunks_s, chunks, 8),
        nl = split_list(layouts_s, layouts, 4), npc = split_list(caching_s, caching, 2),
        nb = budgets_s[0] ? split_list(budgets_s, budgets, 8) : 0;
    int32_t budget_v[8];
    for (int b = 0; b < nb; b++) {
        if (!cb_parse_int(budgets[b], 1, 1 << 20, &x)) {
            fprintf(stderr, "cobatch bench: --max-num-batched-tokens takes token counts (got '%s')\n", budgets[b]);
            return 2;
        }
        budget_v[b] = (int32_t)x;
    }
    if (nb == 0) { /* the engine's default, one configuration */
        budget_v[0] = ep.max_num_batched_tokens;
        nb = 1;
    }
    bool budget_label = nb > 1;
    int32_t budget_max = 0;
    int first_max = 0;
    for (int b = 0; b < nb; b++)
        if (budget_v[b] > budget_max) budget_max = budget_v[b], first_max = b;
    int n = 0, base = 0;
    for (int pc = 0; pc < npc; pc++) {
        if (strcmp(caching[pc], "on") && strcmp(caching[pc], "off")) {
            fprintf(stderr, "cobatch bench: --prefix-caching takes on, off or on,off (got '%s')\n", caching[pc]);
            return 2;
        }
    }
    for (int pc = 0; pc < npc; pc++)
        for (int l = 0; l < nl; l++) {
            for (int m = 0; m < nm; m++) {
                for (int c = 0; c < nc * nb; c++) {
                    cb_bench_config *cfg = &cfgs[n];
                    int bi = c % nb;
                    cfg->engine = ep;
                    int mode = -1;
                    for (int k = 0; k < 3; k++)
                        if (!strcmp(modes[m], MODE_NAMES[k])) mode = k;
                    if (mode < 0) {
                        fprintf(stderr, "cobatch bench: unknown mode '%s' (sequential, static, continuous)\n",
                                modes[m]);
                        return 2;
                    }
                    cfg->engine.mode = (enum cobatch_mode)mode;
                    const char *chunk = chunks[c / nb];
                    /* without chunking a prompt goes in whole: run it once, at the largest budget */
                    if (!strcmp(chunk, "none") && bi != first_max) continue;
                    cfg->engine.max_num_batched_tokens = budget_v[bi];
                    if (!strcmp(chunk, "none")) {
                        cfg->engine.prefill_chunk = 0;
                    } else if (cb_parse_int(chunk, 1, 1 << 20, &x)) {
                        cfg->engine.prefill_chunk = (int32_t)x;
                    } else {
                        fprintf(stderr, "cobatch bench: --prefill-chunks takes token counts or none (got '%s')\n",
                                chunk);
                        return 2;
                    }
                    if (strcmp(layouts[l], "unified") && strcmp(layouts[l], "split")) {
                        fprintf(stderr, "cobatch bench: unknown KV layout '%s' (unified, split)\n", layouts[l]);
                        return 2;
                    }
                    cfg->engine.kv_layout = strcmp(layouts[l], "split") ? COBATCH_KV_UNIFIED : COBATCH_KV_SPLIT;
                    cfg->engine.prefix_caching = !strcmp(caching[pc], "on");
                    bool uncached = !cfg->engine.prefix_caching;
                    char bl[32] = "";
                    if (budget_label) snprintf(bl, sizeof(bl), " budget=%d", budget_v[bi]);
                    snprintf(cfg->label, sizeof(cfg->label), "%s chunk=%s%s %s%s", modes[m], chunk, bl, layouts[l],
                             uncached ? " no-prefix-cache" : "");
                    if (mode == COBATCH_MODE_SEQUENTIAL && cfgs[base].engine.mode != COBATCH_MODE_SEQUENTIAL) base = n;
                    if (++n == MAX_CFG) break;
                }
            }
        }

    /* the workload, in tokens of this model */
    char err[512] = "", model_name[128] = "";
    cb_workload w;
    if (cb_wargs_build(&wa, &ep, &w, model_name, sizeof(model_name), err, sizeof(err)) != 0) {
        fprintf(stderr, "cobatch bench: %s\n", err);
        return strstr(err, "unknown workload") ? 2 : 1;
    }
    if (batch_path) {
        int wrc = write_batch(batch_path, &w);
        if (wrc != 0) fprintf(stderr, "cobatch bench: cannot write %s\n", batch_path);
        cb_workload_free(&w);
        return wrc == 0 ? 0 : 1;
    }
    int rc = 0;
    cb_bench_info info = {.workload = w.name,
                          .model_name = model_name,
                          .model_path = ep.model_path,
                          .n_requests = w.n,
                          .seed = wa.o.seed,
                          .request_rate = rate,
                          .burstiness = burstiness,
                          .max_concurrency = (int)concurrency,
                          .repeat = (int)repeat};
    int64_t tin = 0, tout = 0;
    int32_t longest = 0;
    for (int i = 0; i < w.n; i++) {
        tin += w.items[i].n_in, tout += w.items[i].n_out;
        if (w.items[i].n_in + w.items[i].n_out > longest) longest = w.items[i].n_in + w.items[i].n_out;
    }
    for (int s = 0; s < w.n_sessions; s++) { /* a session's last turn holds the whole conversation */
        int32_t conv = w.n_system;
        for (int i = s; i < w.n; i += w.n_sessions)
            conv += w.items[i].n_in + w.items[i].n_out;
        if (conv > longest) longest = conv;
    }
    /* a configuration that leaves the context to its default (as init sizes it, by the model and
     * the host's memory) gets one its longest request fits in */
    for (int i = 0; i < n; i++) {
        struct cobatch_engine_params *e = &cfgs[i].engine;
        if (e->n_ctx == 0 && e->max_model_len == 0 && longest > cobatch_params_max_request_len(e)) {
            e->max_model_len = (longest + 255) / 256 * 256;
            fprintf(stderr, "cobatch bench: %s: --max-model-len %d (the workload's longest request has %d tokens)\n",
                    cfgs[i].label, e->max_model_len, longest);
        }
    }

    /* the ceiling, with the first configuration's threads, layout and flash attention */
    cb_ceiling ceil = {0};
    if (ceiling_on) {
        /* decode cost grows with context: measure at the workload's mean context over a request's
         * decode (prompt + half the output), not at its prompt alone */
        int32_t ctx = (int32_t)((tin + tout / 2) / (w.n ? w.n : 1));
        if (ctx > 512) ctx = 512;
        if (cb_ceiling_measure_for(&cfgs[0].engine, ctx, &ceil, err, sizeof(err)) != 0) {
            fprintf(stderr, "cobatch bench: ceiling: %s\n", err);
            cb_workload_free(&w);
            return 1;
        }
    }

    FILE *trace = NULL;
    if (trace_path && !(trace = fopen(trace_path, "w"))) {
        fprintf(stderr, "cobatch bench: cannot write %s\n", trace_path);
        cb_workload_free(&w);
        return 1;
    }
    if (trace) cb_trace_write_header(trace);
    static cb_bench_result res[MAX_CFG];
    cb_bench_result *runs = calloc((size_t)repeat, sizeof(*runs));
    for (int i = 0; i < n && rc == 0; i++) {
        for (int k = 0; k < repeat && rc == 0; k++)
            rc = cb_bench_run(&cfgs[i], &w, (int)concurrency, true, &runs[k], err, sizeof(err));
        if (rc != 0) break;
        qsort(runs, (size_t)repeat, sizeof(*runs), cmp_wall);
        /* the median run; of an even count the faster middle one (a shared host only ever slows
         * a run down, so the upper middle is the more disturbed) */
        int mid = (repeat - 1) / 2;
        if (repeat > 1)
            fprintf(stderr, "%s: wall %.2f s, median of %lld (min %.2f, max %.2f)\n", cfgs[i].label, runs[mid].wall_s,
                    (long long)repeat, runs[0].wall_s, runs[repeat - 1].wall_s);
        res[i] = runs[mid];
        if (ceiling_on && rate <= 0 && concurrency <= 0 && w.n_sessions == 0) /* (turns wait for answers) */
            cb_bench_efficiency(
                &res[i], &ceil,
                cfgs[i].engine.mode == COBATCH_MODE_SEQUENTIAL ? 1 : cobatch_params_max_num_seqs(&cfgs[i].engine));
        for (int k = 0; k < repeat; k++)
            if (k != mid) cb_bench_result_free(&runs[k]);
        if (trace) cb_bench_write_trace(trace, cfgs[i].label, &res[i]);
    }
    free(runs);
    if (trace) fclose(trace);
    if (rc != 0) {
        fprintf(stderr, "cobatch bench: %s\n", err);
    } else {
        if (w.n_sessions > 0)
            printf(
                "\nworkload %s: %d sessions x %d turns, a %d-token system prompt, %lld tokens of new messages + %lld "
                "output tokens, each turn after the answer to the one before",
                w.name, w.n_sessions, w.n / w.n_sessions, w.n_system, (long long)tin, (long long)tout);
        else
            printf("\nworkload %s: %d requests, %lld prompt + %lld output tokens, arrivals %s", w.name, w.n,
                   (long long)tin, (long long)tout, rate > 0 ? "" : "all at once");
        if (rate > 0) printf("%.2f req/s (burstiness %.2f)", rate, burstiness);
        if (concurrency > 0) printf(", at most %lld in flight", (long long)concurrency);
        struct cobatch_engine_params shown = ep; /* (the context as init sizes it) */
        cobatch_params_resolve(&shown);
        printf("\nmodel %s (%s); max_num_seqs %d, max_num_batched_tokens %d, n_ctx %d\n\n", model_name, ep.model_path,
               cobatch_params_max_num_seqs(&shown), ep.max_num_batched_tokens, cobatch_params_n_ctx(&shown));
        cb_bench_print_table(stdout, cfgs, res, n, base);
        for (int i = 0; i < n && w.n_sessions > 0; i++) {
            const struct cobatch_stats *st = &res[i].stats;
            printf("\n%s: prompt tokens from the prefix cache %lld of %lld (host tier %lld: %lld loads, %lld saves, "
                   "%lld failed)",
                   cfgs[i].label, (long long)st->prefix_hit_tokens, (long long)st->prefix_query_tokens,
                   (long long)st->host_cache_hit_tokens, (long long)st->host_cache_loads,
                   (long long)st->host_cache_saves, (long long)st->host_cache_failed);
            cJSON_Delete(cb_print_turns(stdout, &w, res[i].tl, res[i].prompt, res[i].cached));
        }
        if (ceiling_on) print_ceiling(&ceil);
        if (plot_dir && cb_bench_write_plots(plot_dir, cfgs, res, n) != 0) {
            fprintf(stderr, "cobatch bench: cannot write the charts into %s (does it exist?)\n", plot_dir);
            rc = -1;
        }
        if (json_path && cb_bench_write_json(json_path, &info, cfgs, res, n, &ceil) != 0) {
            fprintf(stderr, "cobatch bench: cannot write %s\n", json_path);
            rc = -1;
        }
    }
    for (int i = 0; i < n; i++)
        cb_bench_result_free(&res[i]);
    cb_workload_free(&w);
    return rc == 0 ? 0 : 1;
}
