/* bench.c — `cobatch bench`: the same workload through several engine configurations in one run. */
#include "../bench/bench.h"
#include "args.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CFG 64

static void usage(void) {
    printf("usage: cobatch bench [flags]   (no flags: the mixed workload in every mode, the main job)\n"
           "workload:\n"
           "  --workload NAME               %s (default mixed)\n"
           "  --num-prompts N               requests (default: the workload's own count)\n"
           "  --seed N                      workload seed (default 0)\n"
           "  --random-input-len N  --random-output-len N  --random-range-ratio R   (random)\n"
           "  --prefix-len N  --distinct-len N  --output-len N  --sharing-degree S   (shared-prefix;\n"
           "                                defaults 1000, 100, 50, 4)\n"
           "  --workload-file FILE          JSONL: {\"prompt\": text | \"prompt_tokens\": [ids], \"max_tokens\",\n"
           "                                \"arrival_s\", \"priority\"} per line\n"
           "arrivals:\n"
           "  --request-rate R              requests/s, open loop (default: all at once)\n"
           "  --burstiness B                gamma shape of inter-arrival times (default 1 = Poisson)\n"
           "  --max-concurrency N           at most N requests in flight (closed loop)\n"
           "configurations (each list is crossed with the others):\n"
           "  --modes LIST                  of sequential,static,continuous (default all three)\n"
           "  --prefill-chunks LIST         token counts or none (default 256)\n"
           "  --kv-layouts LIST             of unified,split (default unified)\n"
           "  --repeat N                    run each configuration N times, report the median-wall run\n"
           "output:\n"
           "  --trace FILE                  one line per engine step (tab-separated)\n"
           "  --json FILE                   every figure, the configurations, model and machine\n"
           "  --plot DIR                    SVG charts: throughput, TTFT and ITL CDFs, tokens per step\n"
           "  --no-ceiling                  skip measuring llama_decode alone (no scheduling efficiency)\n",
           cb_workload_names());
    cb_args_engine_help();
}

static const char *MODE_NAMES[] = {"continuous", "static", "sequential"};

/* Splits a comma list into at most max items (pointers into s, which is modified). */
static int split_list(char *s, char **out, int max) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok && n < max; tok = strtok(NULL, ","))
        out[n++] = tok;
    return n;
}

typedef struct {
    cobatch_engine *e;
} prompt_ctx;

static const char *WORDS[] = {
    "the",     "history", "of",       "printing", "began",     "when",       "movable",   "type",    "changed",
    "how",     "books",   "were",     "made",     "and",       "every",      "copy",      "was",     "written",
    "by",      "hand",    "printers", "in",       "many",      "cities",     "set",       "up",      "workshops",
    "price",   "fell",    "quickly",  "scholars", "could",     "compare",    "news",      "spread",  "faster",
    "reading", "became",  "common",   "among",    "merchants", "over",       "centuries", "presses", "grew",
    "larger",  "steam",   "power",    "replaced", "muscle",    "newspapers", "reached"};

/* Exactly n tokens of English-like text: tokenize enough random words, keep the first n. */
static int make_prompt(void *vctx, uint64_t *rng, int32_t n, int32_t *out) {
    prompt_ctx *c = vctx;
    size_t cap = (size_t)n * 12 + 64;
    char *text = malloc(cap);
    int32_t *toks = malloc(sizeof(int32_t) * ((size_t)n * 4 + 64));
    if (!text || !toks) {
        free(text);
        free(toks);
        return -1;
    }
    size_t len = 0;
    int rc = -1;
    for (int words = n; words <= n * 4 + 8; words += n / 2 + 4) {
        while (len + 16 < cap && (int)(len / 6) < words) {
            const char *w = WORDS[cb_rng_range(rng, 0, (int32_t)(sizeof(WORDS) / sizeof(WORDS[0])) - 1)];
            len += (size_t)snprintf(text + len, cap - len, "%s%s", len ? " " : "", w);
        }
        int32_t k = cobatch_tokenize(c->e, text, toks, n * 4 + 64);
        if (k >= n && k <= n * 4 + 64) {
            memcpy(out, toks, sizeof(int32_t) * (size_t)n);
            rc = 0;
            break;
        }
    }
    free(text);
    free(toks);
    return rc;
}

static void print_ceiling(const struct cobatch_ceiling *c) {
    printf("\nceiling (llama_decode alone, this machine):\n\n| prompt chunk | ");
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

static int32_t *tokenize_text(void *vctx, const char *text, int32_t *n) {
    prompt_ctx *c = vctx;
    int32_t cap = (int32_t)strlen(text) + 16;
    int32_t *t = malloc(sizeof(int32_t) * (size_t)cap);
    int32_t k = t ? cobatch_tokenize(c->e, text, t, cap) : -1;
    if (k < 1 || k > cap) {
        free(t);
        return NULL;
    }
    *n = k;
    return t;
}

/* Stable insertion sort: equal arrival times keep the file's order. O(n^2) worst case, fine for
 * workload files of thousands of lines that are nearly sorted already. */
static void sort_by_arrival(cb_workload *w) {
    for (int i = 1; i < w->n; i++) {
        cb_work_item it = w->items[i];
        int j = i;
        while (j > 0 && w->items[j - 1].arrival_s > it.arrival_s) {
            w->items[j] = w->items[j - 1];
            j--;
        }
        w->items[j] = it;
    }
}

static int cmp_wall(const void *a, const void *b) {
    double x = ((const cb_bench_result *)a)->wall_s, y = ((const cb_bench_result *)b)->wall_s;
    return (x > y) - (x < y);
}

int cmd_bench(int argc, char **argv) {
    struct cobatch_engine_params ep = cobatch_engine_default_params();
    cb_workload_opts wo = {.random_range_ratio = 0.0};
    const char *workload = "mixed", *trace_path = NULL, *json_path = NULL, *plot_dir = NULL, *wfile = NULL;
    bool ceiling_on = true;
    char modes_s[128] = "sequential,static,continuous", chunks_s[128] = "256", layouts_s[64] = "unified";
    double rate = 0, burstiness = 1;
    int64_t concurrency = 0, repeat = 1, x;
    double d;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "--prefill-chunk")) a = "--prefill-chunks"; /* the engine flag, as a list here */
        int r = strcmp(a, "--prefill-chunks") ? cb_args_engine(argc, argv, &i, &ep) : 0;
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        } else if (!strcmp(a, "--workload") && has) {
            workload = argv[++i];
        } else if (!strcmp(a, "--modes") && has) {
            snprintf(modes_s, sizeof(modes_s), "%s", argv[++i]);
        } else if (!strcmp(a, "--prefill-chunks") && has) {
            snprintf(chunks_s, sizeof(chunks_s), "%s", argv[++i]);
        } else if (!strcmp(a, "--kv-layouts") && has) {
            snprintf(layouts_s, sizeof(layouts_s), "%s", argv[++i]);
        } else if (!strcmp(a, "--trace") && has) {
            trace_path = argv[++i];
        } else if (!strcmp(a, "--json") && has) {
            json_path = argv[++i];
        } else if (!strcmp(a, "--plot") && has) {
            plot_dir = argv[++i];
        } else if (!strcmp(a, "--workload-file") && has) {
            wfile = argv[++i];
        } else if (!strcmp(a, "--prefix-len") && has && cb_parse_int(argv[i + 1], 1, 1 << 20, &x)) {
            wo.prefix_len = (int32_t)x, i++;
        } else if (!strcmp(a, "--distinct-len") && has && cb_parse_int(argv[i + 1], 1, 1 << 20, &x)) {
            wo.distinct_len = (int32_t)x, i++;
        } else if (!strcmp(a, "--output-len") && has && cb_parse_int(argv[i + 1], 1, 1 << 20, &x)) {
            wo.output_len = (int32_t)x, i++;
        } else if (!strcmp(a, "--sharing-degree") && has && cb_parse_int(argv[i + 1], 1, 1 << 20, &x)) {
            wo.sharing_degree = (int32_t)x, i++;
        } else if (!strcmp(a, "--no-ceiling")) {
            ceiling_on = false;
        } else if (!strcmp(a, "--num-prompts") && has && cb_parse_int(argv[i + 1], 1, 1000000, &x)) {
            wo.num_prompts = (int)x, i++;
        } else if (!strcmp(a, "--seed") && has && cb_parse_int(argv[i + 1], 0, INT64_MAX, &x)) {
            wo.seed = (uint64_t)x, i++;
        } else if (!strcmp(a, "--random-input-len") && has && cb_parse_int(argv[i + 1], 1, 1 << 20, &x)) {
            wo.random_input_len = (int32_t)x, i++;
        } else if (!strcmp(a, "--random-output-len") && has && cb_parse_int(argv[i + 1], 1, 1 << 20, &x)) {
            wo.random_output_len = (int32_t)x, i++;
        } else if (!strcmp(a, "--random-range-ratio") && has && cb_parse_float(argv[i + 1], 0, 0.99, &d)) {
            wo.random_range_ratio = d, i++;
        } else if (!strcmp(a, "--request-rate") && has && cb_parse_float(argv[i + 1], 0, 1e6, &d)) {
            rate = d, i++;
        } else if (!strcmp(a, "--burstiness") && has && cb_parse_float(argv[i + 1], 1e-3, 1e3, &d)) {
            burstiness = d, i++;
        } else if (!strcmp(a, "--max-concurrency") && has && cb_parse_int(argv[i + 1], 1, 1 << 20, &x)) {
            concurrency = x, i++;
        } else if (!strcmp(a, "--repeat") && has && cb_parse_int(argv[i + 1], 1, 100, &x)) {
            repeat = x, i++;
        } else {
            fprintf(stderr,
                    "cobatch bench: unknown, incomplete or invalid option '%s'%s%s (see cobatch bench --help)\n", a,
                    has ? " " : "", has ? argv[i + 1] : "");
            return 2;
        }
    }
    if (!ep.model_path) ep.model_path = cb_default_model();

    /* configurations: modes x chunks x layouts */
    static cb_bench_config cfgs[MAX_CFG];
    char *modes[8], *chunks[8], *layouts[4];
    int nm = split_list(modes_s, modes, 8), nc = split_list(chunks_s, chunks, 8),
        nl = split_list(layouts_s, layouts, 4);
    int n = 0, base = 0;
    for (int l = 0; l < nl; l++) {
        for (int m = 0; m < nm; m++) {
            for (int c = 0; c < nc; c++) {
                cb_bench_config *cfg = &cfgs[n];
                cfg->engine = ep;
                int mode = -1;
                for (int k = 0; k < 3; k++)
                    if (!strcmp(modes[m], MODE_NAMES[k])) mode = k;
                if (mode < 0) {
                    fprintf(stderr, "cobatch bench: unknown mode '%s' (sequential, static, continuous)\n", modes[m]);
                    return 2;
                }
                cfg->engine.mode = (enum cobatch_mode)mode;
                if (!strcmp(chunks[c], "none")) {
                    cfg->engine.prefill_chunk = 0;
                } else if (cb_parse_int(chunks[c], 1, 1 << 20, &x)) {
                    cfg->engine.prefill_chunk = (int32_t)x;
                } else {
                    fprintf(stderr, "cobatch bench: --prefill-chunks takes token counts or none (got '%s')\n",
                            chunks[c]);
                    return 2;
                }
                if (strcmp(layouts[l], "unified") && strcmp(layouts[l], "split")) {
                    fprintf(stderr, "cobatch bench: unknown KV layout '%s' (unified, split)\n", layouts[l]);
                    return 2;
                }
                cfg->engine.kv_layout = strcmp(layouts[l], "split") ? COBATCH_KV_UNIFIED : COBATCH_KV_SPLIT;
                snprintf(cfg->label, sizeof(cfg->label), "%s chunk=%s %s", modes[m], chunks[c], layouts[l]);
                if (mode == COBATCH_MODE_SEQUENTIAL && cfgs[base].engine.mode != COBATCH_MODE_SEQUENTIAL) base = n;
                if (++n == MAX_CFG) break;
            }
        }
    }

    /* the workload, in tokens of this model */
    char err[512] = "";
    struct cobatch_engine_params tp = ep;
    tp.n_ctx = 256;
    tp.max_num_seqs = 1;
    tp.prefill_chunk = 256;
    tp.max_num_batched_tokens = 256;
    prompt_ctx pc = {cobatch_engine_init(&tp, err, sizeof(err))};
    if (!pc.e) {
        fprintf(stderr, "cobatch bench: %s\n", err);
        return 1;
    }
    char model_name[128];
    snprintf(model_name, sizeof(model_name), "%s", cobatch_model_name(pc.e));
    cb_workload w;
    bool file_arrivals = false;
    int rc = wfile ? cb_workload_load_jsonl(wfile, tokenize_text, &pc, &w, &file_arrivals, err, sizeof(err))
                   : cb_workload_make(workload, &wo, make_prompt, &pc, &w, err, sizeof(err));
    cobatch_engine_free(pc.e);
    if (rc != 0) {
        fprintf(stderr, "cobatch bench: %s\n", err);
        return 2;
    }
    if (!file_arrivals || rate > 0) cb_workload_set_arrivals(&w, rate, burstiness, wo.seed);
    if (file_arrivals && rate <= 0) sort_by_arrival(&w); /* the client submits in this order */
    cb_bench_info info = {.workload = w.name,
                          .model_name = model_name,
                          .model_path = ep.model_path,
                          .n_requests = w.n,
                          .seed = wo.seed,
                          .request_rate = rate,
                          .burstiness = burstiness,
                          .max_concurrency = (int)concurrency,
                          .repeat = (int)repeat};
    int64_t tin = 0, tout = 0;
    for (int i = 0; i < w.n; i++)
        tin += w.items[i].n_in, tout += w.items[i].n_out;

    /* the ceiling, with the first configuration's threads, layout and flash attention */
    struct cobatch_ceiling ceil = {0};
    if (ceiling_on) {
        int32_t ctx = (int32_t)(tin / (w.n ? w.n : 1));
        if (ctx > 512) ctx = 512;
        if (cobatch_ceiling_measure(&cfgs[0].engine, ctx, &ceil, err, sizeof(err)) != 0) {
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
    if (trace)
        fprintf(
            trace,
            "config\tt_ms\tstep_ms\tdecode_rows\tprefill_tokens\trequests\trunning\twaiting\tkv_cells\tpreempted\n");
    static cb_bench_result res[MAX_CFG];
    cb_bench_result *runs = calloc((size_t)repeat, sizeof(*runs));
    for (int i = 0; i < n && rc == 0; i++) {
        for (int k = 0; k < repeat && rc == 0; k++)
            rc = cb_bench_run(&cfgs[i], &w, (int)concurrency, true, &runs[k], err, sizeof(err));
        if (rc != 0) break;
        qsort(runs, (size_t)repeat, sizeof(*runs), cmp_wall);
        if (repeat > 1)
            fprintf(stderr, "%s: wall %.2f s, median of %lld (min %.2f, max %.2f)\n", cfgs[i].label,
                    runs[repeat / 2].wall_s, (long long)repeat, runs[0].wall_s, runs[repeat - 1].wall_s);
        res[i] = runs[repeat / 2];
        if (ceiling_on && rate <= 0 && concurrency <= 0)
            cb_bench_efficiency(&res[i], &ceil,
                                cfgs[i].engine.mode == COBATCH_MODE_SEQUENTIAL ? 1 : cfgs[i].engine.max_num_seqs);
        for (int k = 0; k < repeat; k++)
            if (k != repeat / 2) cb_bench_result_free(&runs[k]);
        if (trace) cb_bench_write_trace(trace, cfgs[i].label, &res[i]);
    }
    free(runs);
    if (trace) fclose(trace);
    if (rc != 0) {
        fprintf(stderr, "cobatch bench: %s\n", err);
    } else {
        printf("\nworkload %s: %d requests, %lld prompt + %lld output tokens, arrivals %s", w.name, w.n, (long long)tin,
               (long long)tout, rate > 0 ? "" : "all at once");
        if (rate > 0) printf("%.2f req/s (burstiness %.2f)", rate, burstiness);
        if (concurrency > 0) printf(", at most %lld in flight", (long long)concurrency);
        printf("\nmodel %s (%s); max_num_seqs %d, max_num_batched_tokens %d, n_ctx %d\n\n", model_name, ep.model_path,
               ep.max_num_seqs, ep.max_num_batched_tokens, ep.n_ctx);
        cb_bench_print_table(stdout, cfgs, res, n, base);
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
