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

/* Splits a comma list into its items (pointers into s, which is modified); -1 when it has more
 * than max. */
static int split_list(char *s, char **out, int max) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
        if (n == max) return -1;
        out[n++] = tok;
    }
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

/* The chance a at which k drafts (each holding with chance a once those before it held) give as many
 * tokens per second as one-row steps: 1 + a + ... + a^k = want, the tokens one sequence must get from
 * a step that checking makes longer (above k + 1 they never pay: 1). */
static double break_even(double want, int32_t k) {
    if (want >= k + 1) return 1;
    double lo = 0, hi = 1;
    for (int it = 0; it < 50; it++) {
        double a = (lo + hi) / 2, sum = 1, term = 1;
        for (int32_t i = 0; i < k; i++)
            sum += (term *= a);
        if (sum < want)
            lo = a;
        else
            hi = a;
    }
    return (lo + hi) / 2;
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
    if (c->prefill_growth > 0)
        printf("\n\nprefill at context %d: %.0f tok/s (a prompt token costs %.2f ms more per 1,000 tokens before "
               "it)",
               c->context, 1.0 / (1.0 / cb_ceiling_prefill(c) + c->prefill_growth * c->context),
               c->prefill_growth * 1e6);
    printf("\n\n| decode batch (context %d) | ", c->context);
    for (int i = 0; i < c->n_batch; i++)
        printf("%d | ", c->batch[i]);
    printf("\n|---|");
    for (int i = 0; i < c->n_batch; i++)
        printf("---:|");
    printf("\n| decode tok/s | ");
    for (int i = 0; i < c->n_batch; i++)
        printf("%.0f | ", c->decode_tps[i]);
    if (c->verify_k > 0) {
        printf("\n| a step checking %d drafts a sequence, x a one-row step | ", c->verify_k);
        for (int i = 0; i < c->n_batch; i++)
            printf(c->verify_ratio[i] > 0 ? "%.2f | " : "- | ", c->verify_ratio[i]);
        printf("\n| ... where one sequence of the batch checks them | ");
        for (int i = 0; i < c->n_batch; i++)
            printf(c->verify_one_ratio[i] > 0 ? "%.2f | " : "- | ", c->verify_one_ratio[i]);
        printf("\n| drafts pay (every sequence checking) when each holds with chance above | ");
        for (int i = 0; i < c->n_batch; i++)
            printf(c->verify_ratio[i] > 0 ? "%.2f | " : "- | ", break_even(c->verify_ratio[i], c->verify_k));
        /* b sequences, one checking: b - 1 + E tokens in ratio x the time of b */
        printf("\n| ... (one sequence checking) | ");
        for (int i = 0; i < c->n_batch; i++)
            printf(c->verify_one_ratio[i] > 0 ? "%.2f | " : "- | ",
                   break_even(c->batch[i] * c->verify_one_ratio[i] - (c->batch[i] - 1), c->verify_k));
    }
    printf("\n\nsched eff = (prompt tokens at their positions' prefill cost + output tokens / decode tok/s at "
           "min(max_num_seqs, requests)) / wall time, the decode ceiling at the workload's mean context over its "
           "output tokens; all-at-once arrivals only; sessions: the prompt tokens the ideal computes (the system "
           "prompt once, each turn's new message after its conversation), requests = sessions, no think time\n");
}

static int cmp_wall(const void *a, const void *b) {
    double x = ((const cb_bench_result *)a)->wall_s, y = ((const cb_bench_result *)b)->wall_s;
    return (x > y) - (x < y);
}

/* What the flags asked for: the engine, the workload, the configuration lists and the outputs. */
typedef struct {
    struct cobatch_engine_params ep;
    cb_wargs wa;
    const char *trace_path, *json_path, *plot_dir, *batch_path;
    bool ceiling_on, ceiling_only;
    int64_t ceiling_verify; /* drafts a sequence checks in the ceiling's verify steps (0: none) */
    char modes_s[128], chunks_s[128], layouts_s[64], caching_s[16], budgets_s[128], seqs_s[128], specs_s[64];
    char seqs_shown[128]; /* --max-num-seqs as given (seqs_s is cut into its items) */
    int64_t repeat;
} bench_opts;

/* The configuration lists, split: every configuration takes one item of each. */
typedef struct {
    char *modes[8], *chunks[8], *layouts[4], *caching[2], *specs[4];
    int n_modes, n_chunks, n_layouts, n_caching, n_budgets, n_seqs, n_specs;
    int32_t budgets[8];
    int32_t seqs[8];   /* max_num_seqs values; 0 = auto */
    int first_max;     /* the first largest budget: chunk none runs at it alone */
    bool budget_label; /* more than one budget: each label names its own */
    bool seqs_label;   /* more than one max_num_seqs: likewise */
} config_lists;

/* Parses the flags into o. Returns -1 to go on, or the exit code (0 after --help, 2 on a bad flag). */
static int parse_bench_flags(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){.ep = cobatch_engine_default_params(),
                      .ceiling_on = true,
                      .modes_s = "sequential,static,continuous",
                      .chunks_s = "256",
                      .repeat = 1};
    cb_wargs_init(&o->wa);
    const char *modes_a = NULL, *chunks_a = NULL, *layouts_a = NULL, *caching_a = NULL, *budgets_a = NULL,
               *seqs_a = NULL, *specs_a = NULL;
    bool no_ceiling = false;
    const cb_flag own[] = {
        {"--ceiling-only", NULL, CB_FLAG_SET, &o->ceiling_only,
         .help = "measure llama_decode alone at the workload's context (with\n--workload long-context: "
                 "--context-len) and run nothing else"},
        {"--ceiling-verify", "K", CB_FLAG_I64, &o->ceiling_verify, 0, 32,
         .help = "also time steps where every sequence checks K drafts (1 + K\nrows, logits on each): what "
                 "speculation costs per batch size"},
        {"--modes", "LIST", CB_FLAG_STR, &modes_a, .help = "of sequential,static,continuous (default all three)"},
        {"--prefill-chunks, --prefill-chunk", "LIST", CB_FLAG_STR, &chunks_a,
         .help = "token counts or none (default 256)"},
        {"--max-num-batched-tokens", "LIST", CB_FLAG_STR, &budgets_a,
         .help = "step budgets (default 512; chunk none runs once, at the\nlargest: without chunking a prompt needs "
                 "room to go in whole)"},
        {"--max-num-seqs", "LIST", CB_FLAG_STR, &seqs_a,
         .help =
             "requests running at once (default 16): counts from 1 to 256,\nor auto (unified layout: as many as the "
             "KV cells hold);\nsequential runs once, at the first"},
        {"--kv-layouts", "LIST", CB_FLAG_STR, &layouts_a, .help = "of split,unified (default: --kv-layout's, split)"},
        {"--prefix-caching", "LIST", CB_FLAG_STR, &caching_a,
         .help = "of on,off (default on; off with --no-prefix-caching)"},
        {"--specs", "LIST", CB_FLAG_STR, &specs_a,
         .help = "of off,ngram,ngram-own,prediction (default: --spec's): speculation\noff, on, on from each "
                 "request's own text only, or on with\neach request's prediction sent (the edit workload's file)"},
        {"--repeat", "N", CB_FLAG_I64, &o->repeat, 1, 100,
         .help = "run each configuration N times, report the median-wall run\n(of an even count, the faster "
                 "middle one)"},
        {"--trace", "FILE", CB_FLAG_STR, &o->trace_path, .help = "one line per engine step (tab-separated)"},
        {"--json", "FILE", CB_FLAG_STR, &o->json_path, .help = "every figure, the configurations, model and machine"},
        {"--plot", "DIR", CB_FLAG_STR, &o->plot_dir,
         .help = "SVG charts: throughput, TTFT and ITL CDFs, tokens per step"},
        {"--no-ceiling", NULL, CB_FLAG_SET, &no_ceiling,
         .help = "skip measuring llama_decode alone (no scheduling efficiency)"},
        {"--write-batch", "FILE", CB_FLAG_STR, &o->batch_path,
         .help = "write the workload as an OpenAI Batch API job (JSONL for\n`cobatch batch`: token-id prompts, "
                 "ignore_eos) and run nothing"},
    };
    cb_flag wfl[CB_WARGS_FLAGS], eng[CB_ENGINE_FLAGS];
    cb_cli cli = {.cmd = "cobatch bench",
                  .usage = "usage: cobatch bench [flags]   (no flags: the mixed workload in every mode, the main "
                           "job)\nConfiguration lists are crossed with each other.\n",
                  .groups = {{"configurations and output", own, sizeof(own) / sizeof(own[0])},
                             cb_wargs_flags(wfl, &o->wa),
                             cb_flags_engine(eng, &o->ep)},
                  .n_groups = 3};
    int pr = cb_flags_parse(&cli, argc, argv, stdout, stderr);
    if (pr != 0) return pr == 1 ? 0 : 2;
    o->ceiling_on = !no_ceiling;
#define TAKE(dst, src)                                                                                                 \
    if (src) snprintf(dst, sizeof(dst), "%s", src)
    TAKE(o->modes_s, modes_a);
    TAKE(o->chunks_s, chunks_a);
    TAKE(o->layouts_s, layouts_a);
    TAKE(o->caching_s, caching_a);
    TAKE(o->budgets_s, budgets_a);
    TAKE(o->seqs_s, seqs_a);
    TAKE(o->seqs_shown, seqs_a);
    TAKE(o->specs_s, specs_a);
#undef TAKE
    /* the lists default to the engine flags (--kv-layout, --no-prefix-caching) */
    if (!o->layouts_s[0])
        snprintf(o->layouts_s, sizeof(o->layouts_s), "%s", o->ep.kv_layout == COBATCH_KV_SPLIT ? "split" : "unified");
    if (!o->specs_s[0])
        snprintf(o->specs_s, sizeof(o->specs_s), "%s",
                 o->ep.spec == COBATCH_SPEC_NGRAM       ? "ngram"
                 : o->ep.spec == COBATCH_SPEC_NGRAM_OWN ? "ngram-own"
                                                        : "off");
    if (!o->caching_s[0]) snprintf(o->caching_s, sizeof(o->caching_s), "%s", o->ep.prefix_caching ? "on" : "off");
    if (!o->ep.model_path) o->ep.model_path = cb_default_model();
    return -1;
}

/* Splits --max-num-seqs into cl->seqs (the engine's value when not given: one configuration), and
 * sets the engine parameters' to the first, as the summary line shows it. 0, or 2 with a message. */
static int split_seqs(bench_opts *o, config_lists *cl) {
    char *items[8];
    cl->n_seqs = o->seqs_s[0] ? split_list(o->seqs_s, items, 8) : 0;
    if (cl->n_seqs < 0) {
        fprintf(stderr, "cobatch bench: --max-num-seqs takes at most 8 items\n");
        return 2;
    }
    for (int k = 0; k < cl->n_seqs; k++) {
        int64_t x;
        if (!strcmp(items[k], "auto")) {
            cl->seqs[k] = 0;
        } else if (cb_parse_int(items[k], 1, 256, &x)) {
            cl->seqs[k] = (int32_t)x;
        } else {
            fprintf(stderr, "cobatch bench: --max-num-seqs takes counts from 1 to 256 or auto (got '%s')\n", items[k]);
            return 2;
        }
    }
    if (cl->n_seqs == 0) {
        cl->seqs[0] = o->ep.max_num_seqs;
        cl->n_seqs = 1;
    }
    cl->seqs_label = cl->n_seqs > 1;
    o->ep.max_num_seqs = cl->seqs[0];
    return 0;
}

/* Splits o's lists into cl and checks the budgets and the prefix-caching values. 0, or 2 with a
 * message. */
static int split_config_lists(bench_opts *o, config_lists *cl) {
    int64_t x;
    char *budget_items[8];
    cl->n_modes = split_list(o->modes_s, cl->modes, 8);
    cl->n_chunks = split_list(o->chunks_s, cl->chunks, 8);
    cl->n_layouts = split_list(o->layouts_s, cl->layouts, 4);
    cl->n_caching = split_list(o->caching_s, cl->caching, 2);
    cl->n_specs = split_list(o->specs_s, cl->specs, 4);
    cl->n_budgets = o->budgets_s[0] ? split_list(o->budgets_s, budget_items, 8) : 0;
    const char *too_many = cl->n_modes < 0     ? "--modes takes at most 8"
                           : cl->n_chunks < 0  ? "--prefill-chunks takes at most 8"
                           : cl->n_layouts < 0 ? "--kv-layouts takes at most 4"
                           : cl->n_caching < 0 ? "--prefix-caching takes at most 2"
                           : cl->n_specs < 0   ? "--specs takes at most 4"
                           : cl->n_budgets < 0 ? "--max-num-batched-tokens takes at most 8"
                                               : NULL;
    if (too_many) {
        fprintf(stderr, "cobatch bench: %s items\n", too_many);
        return 2;
    }
    for (int b = 0; b < cl->n_budgets; b++) {
        if (!cb_parse_int(budget_items[b], 1, 1 << 20, &x)) {
            fprintf(stderr, "cobatch bench: --max-num-batched-tokens takes token counts (got '%s')\n", budget_items[b]);
            return 2;
        }
        cl->budgets[b] = (int32_t)x;
    }
    if (cl->n_budgets == 0) { /* the engine's default, one configuration */
        cl->budgets[0] = o->ep.max_num_batched_tokens;
        cl->n_budgets = 1;
    }
    cl->budget_label = cl->n_budgets > 1;
    if (split_seqs(o, cl) != 0) return 2;
    int32_t budget_max = 0;
    cl->first_max = 0;
    for (int b = 0; b < cl->n_budgets; b++)
        if (cl->budgets[b] > budget_max) budget_max = cl->budgets[b], cl->first_max = b;
    for (int sp = 0; sp < cl->n_specs; sp++) {
        if (strcmp(cl->specs[sp], "off") && strcmp(cl->specs[sp], "ngram") && strcmp(cl->specs[sp], "ngram-own") &&
            strcmp(cl->specs[sp], "prediction")) {
            fprintf(stderr, "cobatch bench: --specs takes off, ngram, ngram-own and prediction (got '%s')\n",
                    cl->specs[sp]);
            return 2;
        }
    }
    for (int pc = 0; pc < cl->n_caching; pc++) {
        if (strcmp(cl->caching[pc], "on") && strcmp(cl->caching[pc], "off")) {
            fprintf(stderr, "cobatch bench: --prefix-caching takes on, off or on,off (got '%s')\n", cl->caching[pc]);
            return 2;
        }
    }
    return 0;
}

/* Fills cfg with prefix caching pc, layout l, mode m and chunk-budget-and-seqs k of the lists (k
 * counts max_num_seqs fastest, then budgets, then chunks). 0, 1 when the combination is not run,
 * or 2 with a message. */
static int make_config(const config_lists *cl, const struct cobatch_engine_params *ep, int sp, int pc, int l, int m,
                       int k, cb_bench_config *cfg) {
    int64_t x;
    int si = k % cl->n_seqs, c = k / cl->n_seqs;
    int bi = c % cl->n_budgets;
    cfg->engine = *ep;
    const char *spec = cl->specs[sp];
    cfg->engine.spec = !strcmp(spec, "off")         ? COBATCH_SPEC_OFF
                       : !strcmp(spec, "ngram-own") ? COBATCH_SPEC_NGRAM_OWN
                                                    : COBATCH_SPEC_NGRAM;
    cfg->prediction = !strcmp(spec, "prediction");
    int mode = -1;
    for (int k = 0; k < 3; k++)
        if (!strcmp(cl->modes[m], MODE_NAMES[k])) mode = k;
    if (mode < 0) {
        fprintf(stderr, "cobatch bench: unknown mode '%s' (sequential, static, continuous)\n", cl->modes[m]);
        return 2;
    }
    cfg->engine.mode = (enum cobatch_mode)mode;
    /* sequential runs one request at a time whatever max_num_seqs says: once, at the first */
    if (mode == COBATCH_MODE_SEQUENTIAL && si > 0) return 1;
    cfg->engine.max_num_seqs = cl->seqs[si];
    const char *chunk = cl->chunks[c / cl->n_budgets];
    /* without chunking a prompt goes in whole: run it once, at the largest budget */
    if (!strcmp(chunk, "none") && bi != cl->first_max) return 1;
    cfg->engine.max_num_batched_tokens = cl->budgets[bi];
    if (!strcmp(chunk, "none")) {
        cfg->engine.prefill_chunk = 0;
    } else if (cb_parse_int(chunk, 1, 1 << 20, &x)) {
        cfg->engine.prefill_chunk = (int32_t)x;
    } else {
        fprintf(stderr, "cobatch bench: --prefill-chunks takes token counts or none (got '%s')\n", chunk);
        return 2;
    }
    const char *layout = cl->layouts[l];
    if (strcmp(layout, "unified") && strcmp(layout, "split")) {
        fprintf(stderr, "cobatch bench: unknown KV layout '%s' (unified, split)\n", layout);
        return 2;
    }
    cfg->engine.kv_layout = strcmp(layout, "split") ? COBATCH_KV_UNIFIED : COBATCH_KV_SPLIT;
    cfg->engine.prefix_caching = !strcmp(cl->caching[pc], "on");
    bool uncached = !cfg->engine.prefix_caching;
    char bl[32] = "", sl[16] = "";
    if (cl->budget_label) snprintf(bl, sizeof(bl), " budget=%d", cl->budgets[bi]);
    if (cl->seqs_label && mode != COBATCH_MODE_SEQUENTIAL) {
        if (cl->seqs[si] == 0)
            snprintf(sl, sizeof(sl), " seqs=auto");
        else
            snprintf(sl, sizeof(sl), " seqs=%d", cl->seqs[si]);
    }
    char spl[24] = "";
    if (cl->n_specs > 1 || strcmp(spec, "off")) snprintf(spl, sizeof(spl), " spec=%s", spec);
    snprintf(cfg->label, sizeof(cfg->label), "%s chunk=%s%s%s %s%s%s", cl->modes[m], chunk, bl, sl, layout,
             uncached ? " no-prefix-cache" : "", spl);
    return 0;
}

/* The configurations: prefix caching x layouts x modes x chunks x budgets x max_num_seqs, at most
 * MAX_CFG. Sets
 * *n_out, and *base_out to the speedups' baseline (the first sequential configuration, else the
 * first). 0, or 2 with a message. */
static int build_configs(bench_opts *o, cb_bench_config *cfgs, int *n_out, int *base_out) {
    config_lists cl;
    int rc = split_config_lists(o, &cl);
    if (rc != 0) return rc;
    int n = 0, base = 0;
    for (int pc = 0; pc < cl.n_caching; pc++)
        for (int l = 0; l < cl.n_layouts; l++) {
            for (int m = 0; m < cl.n_modes; m++) {
                for (int k = 0; k < cl.n_chunks * cl.n_budgets * cl.n_seqs * cl.n_specs; k++) {
                    cb_bench_config one;
                    rc = make_config(&cl, &o->ep, k % cl.n_specs, pc, l, m, k / cl.n_specs, &one);
                    if (rc == 2) return 2;
                    if (rc == 1) continue;
                    if (n == MAX_CFG) {
                        fprintf(stderr, "cobatch bench: the lists cross to more than %d configurations\n", MAX_CFG);
                        return 2;
                    }
                    cfgs[n] = one;
                    if (cfgs[n].engine.mode == COBATCH_MODE_SEQUENTIAL &&
                        cfgs[base].engine.mode != COBATCH_MODE_SEQUENTIAL)
                        base = n;
                    n++;
                }
            }
        }
    *n_out = n;
    *base_out = base;
    return 0;
}

/* The workload's prompt and output tokens, over all its requests. */
static void count_tokens(const cb_workload *w, int64_t *tin, int64_t *tout) {
    *tin = *tout = 0;
    for (int i = 0; i < w->n; i++)
        *tin += w->items[i].n_in, *tout += w->items[i].n_out;
}

/* The seconds the ideal's prompt tokens take at their positions: every prompt from its start; a
 * session workload's system prompt once, then each turn's new message after its conversation so far
 * (the rest is the cache's). */
static double ideal_prompt_seconds(const cb_workload *w, const cb_ceiling *c) {
    if (w->n_sessions <= 0) {
        double s = 0;
        for (int i = 0; i < w->n; i++)
            s += cb_ceiling_prompt_seconds(c, 0, w->items[i].n_in);
        return s;
    }
    double s = cb_ceiling_prompt_seconds(c, 0, w->n_system);
    for (int q = 0; q < w->n_sessions; q++) {
        int64_t conv = w->n_system;
        for (int i = q; i < w->n; i += w->n_sessions) {
            s += cb_ceiling_prompt_seconds(c, conv, conv + w->items[i].n_in);
            conv += w->items[i].n_in + w->items[i].n_out;
        }
    }
    return s;
}

/* The context a decoding sequence holds, on average over the workload's output tokens: a request's
 * prompt and half its output; a session turn's whole conversation so far (the system prompt, every
 * turn before with its answer), its own message and half its answer. */
static int32_t decode_context(const cb_workload *w) {
    double sum = 0, weight = 0;
    int per = w->n_sessions > 0 ? w->n_sessions : w->n;
    for (int s = 0; s < per; s++) {
        double conv = w->n_sessions > 0 ? w->n_system : 0;
        for (int i = s; i < w->n; i += per) {
            double out = w->items[i].n_out > 0 ? w->items[i].n_out : 1;
            sum += out * (conv + w->items[i].n_in + out / 2);
            weight += out;
            if (w->n_sessions > 0) conv += w->items[i].n_in + w->items[i].n_out;
        }
    }
    return weight > 0 ? (int32_t)(sum / weight) : 16;
}

/* Sizes the configurations' contexts to the workload's longest request (of a session workload, its
 * longest conversation). */
static void fit_contexts(cb_bench_config *cfgs, int n, const cb_workload *w) {
    int32_t longest = 0;
    for (int i = 0; i < w->n; i++)
        if (w->items[i].n_in + w->items[i].n_out > longest) longest = w->items[i].n_in + w->items[i].n_out;
    for (int s = 0; s < w->n_sessions; s++) { /* a session's last turn holds the whole conversation */
        int32_t conv = w->n_system;
        for (int i = s; i < w->n; i += w->n_sessions)
            conv += w->items[i].n_in + w->items[i].n_out;
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
}

/* Runs each configuration o->repeat times and keeps the median run in res[i] (scheduling efficiency
 * against ceil when it applies; its steps to trace when not NULL). 0, or nonzero with a message. */
static int run_configs(const bench_opts *o, const cb_bench_config *cfgs, int n, const cb_workload *w,
                       const cb_ceiling *ceil, FILE *trace, cb_bench_result *res, char *err, size_t errlen) {
    int rc = 0;
    int64_t repeat = o->repeat, concurrency = o->wa.concurrency;
    cb_bench_result *runs = calloc((size_t)repeat, sizeof(*runs));
    if (!runs) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < n && rc == 0; i++) {
        for (int k = 0; k < repeat && rc == 0; k++)
            rc = cb_bench_run(&cfgs[i], w, (int)concurrency, true, &runs[k], err, errlen);
        if (rc != 0) break;
        qsort(runs, (size_t)repeat, sizeof(*runs), cmp_wall);
        /* the median run; of an even count the faster middle one (a shared host only ever slows
         * a run down, so the upper middle is the more disturbed) */
        int mid = (repeat - 1) / 2;
        if (repeat > 1)
            fprintf(stderr, "%s: wall %.2f s, median of %lld (min %.2f, max %.2f)\n", cfgs[i].label, runs[mid].wall_s,
                    (long long)repeat, runs[0].wall_s, runs[repeat - 1].wall_s);
        res[i] = runs[mid];
        /* a session workload's ideal: every session at once, each turn computing its new message alone
           (the system prompt once), no think time */
        if (o->ceiling_on && o->wa.rate <= 0 && concurrency <= 0 && (w->n_sessions == 0 || w->think_s <= 0))
            cb_bench_efficiency(
                &res[i], ceil,
                cfgs[i].engine.mode == COBATCH_MODE_SEQUENTIAL ? 1 : cobatch_params_max_num_seqs(&cfgs[i].engine),
                w->n_sessions > 0 ? w->n_sessions : w->n, ideal_prompt_seconds(w, ceil));
        for (int k = 0; k < repeat; k++)
            if (k != mid) cb_bench_result_free(&runs[k]);
        if (trace) cb_bench_write_trace(trace, cfgs[i].label, &res[i]);
    }
    free(runs);
    return rc;
}

/* Prints the workload, the model and the results table (with the cache per turn of a session
 * workload, and the ceiling), then writes the charts and the JSON report. 0, or -1 when a file could
 * not be written. */
static int report(const bench_opts *o, const cb_bench_info *info, const cb_bench_config *cfgs,
                  const cb_bench_result *res, int n, int base, const cb_workload *w, const cb_ceiling *ceil) {
    int rc = 0;
    int64_t tin, tout, concurrency = o->wa.concurrency;
    double rate = o->wa.rate, burstiness = o->wa.burstiness;
    count_tokens(w, &tin, &tout);
    if (w->n_sessions > 0)
        printf("\nworkload %s: %d sessions x %d turns, a %d-token system prompt, %lld tokens of new messages + %lld "
               "output tokens, each turn after the answer to the one before",
               w->name, w->n_sessions, w->n / w->n_sessions, w->n_system, (long long)tin, (long long)tout);
    else
        printf("\nworkload %s: %d requests, %lld prompt + %lld output tokens, arrivals %s", w->name, w->n,
               (long long)tin, (long long)tout, rate > 0 ? "" : "all at once");
    if (rate > 0) printf("%.2f req/s (burstiness %.2f)", rate, burstiness);
    if (concurrency > 0) printf(", at most %lld in flight", (long long)concurrency);
    struct cobatch_engine_params shown = o->ep; /* (the context as init sizes it) */
    cobatch_params_resolve(&shown);
    bool seqs_list = strchr(o->seqs_shown, ',') != NULL; /* (each label names its own; n_ctx: the first's) */
    char seqs[128];
    snprintf(seqs, sizeof(seqs), "%d", cobatch_params_max_num_seqs(&shown));
    printf("\nmodel %s (%s); max_num_seqs %s, max_num_batched_tokens %d, n_ctx %d%s, KV cache %s/%s\n\n",
           info->model_name, o->ep.model_path, seqs_list ? o->seqs_shown : seqs, o->ep.max_num_batched_tokens,
           cobatch_params_n_ctx(&shown), seqs_list ? " at the first" : "", cobatch_kv_type_name(shown.cache_type_k),
           cobatch_kv_type_name(shown.cache_type_v));
    cb_bench_print_table(stdout, cfgs, res, n, base);
    for (int i = 0; i < n && w->n_sessions > 0; i++) {
        const struct cobatch_stats *st = &res[i].stats;
        printf("\n%s: prompt tokens from the prefix cache %lld of %lld (host tier %lld: %lld loads, %lld saves, "
               "%lld failed)",
               cfgs[i].label, (long long)st->prefix_hit_tokens, (long long)st->prefix_query_tokens,
               (long long)st->host_cache_hit_tokens, (long long)st->host_cache_loads, (long long)st->host_cache_saves,
               (long long)st->host_cache_failed);
        cJSON_Delete(cb_print_turns(stdout, w, res[i].tl, res[i].prompt, res[i].cached));
    }
    if (o->ceiling_on) print_ceiling(ceil);
    if (o->plot_dir && cb_bench_write_plots(o->plot_dir, cfgs, res, n) != 0) {
        fprintf(stderr, "cobatch bench: cannot write the charts into %s (does it exist?)\n", o->plot_dir);
        rc = -1;
    }
    if (o->json_path && cb_bench_write_json(o->json_path, info, cfgs, res, n, ceil) != 0) {
        fprintf(stderr, "cobatch bench: cannot write %s\n", o->json_path);
        rc = -1;
    }
    return rc;
}

int cb_cmd_bench(int argc, char **argv) {
    bench_opts o;
    int pr = parse_bench_flags(argc, argv, &o);
    if (pr >= 0) return pr;

    /* configurations: prefix caching x layouts x modes x chunks x budgets x max_num_seqs */
    static cb_bench_config cfgs[MAX_CFG];
    int n = 0, base = 0;
    if (build_configs(&o, cfgs, &n, &base) != 0) return 2;

    /* the workload, in tokens of this model */
    char err[512] = "", model_name[128] = "";
    cb_workload w;
    if (cb_wargs_build(&o.wa, &o.ep, &w, model_name, sizeof(model_name), err, sizeof(err)) != 0) {
        fprintf(stderr, "cobatch bench: %s\n", err);
        return strstr(err, "unknown workload") ? 2 : 1;
    }
    if (o.batch_path) {
        int wrc = write_batch(o.batch_path, &w);
        if (wrc != 0) fprintf(stderr, "cobatch bench: cannot write %s\n", o.batch_path);
        cb_workload_free(&w);
        return wrc == 0 ? 0 : 1;
    }
    cb_bench_info info = {.workload = w.name,
                          .model_name = model_name,
                          .model_path = o.ep.model_path,
                          .n_requests = w.n,
                          .seed = o.wa.o.seed,
                          .request_rate = o.wa.rate,
                          .burstiness = o.wa.burstiness,
                          .max_concurrency = o.wa.concurrency,
                          .repeat = (int)o.repeat};
    fit_contexts(cfgs, n, &w);

    /* the ceiling, with the first configuration's threads, layout and flash attention, its decode
     * batches up to the most sequences any configuration runs */
    cb_ceiling ceil = {0};
    struct cobatch_engine_params cp = cfgs[0].engine;
    for (int i = 0; i < n; i++)
        if (cobatch_params_max_num_seqs(&cfgs[i].engine) > cobatch_params_max_num_seqs(&cp))
            cp.max_num_seqs = cobatch_params_max_num_seqs(&cfgs[i].engine);
    if (o.ceiling_on) {
        /* decode cost grows with context: measure at the workload's mean context over a request's
         * decode (prompt + half the output), not at its prompt alone */
        int32_t ctx = decode_context(&w);
        struct cobatch_engine_params r = cp; /* the attention path the engine would run */
        cobatch_params_resolve(&r);
        cb_ceiling_params m = {.model_path = r.model_path,
                               .n_threads = r.n_threads,
                               .split_kv = r.kv_layout == COBATCH_KV_SPLIT,
                               .flash_attn = r.flash_attn != 0,
                               .max_batch = cobatch_params_max_num_seqs(&r),
                               .rpc = r.rpc_servers,
                               .repack = (int)r.repack,
                               .type_k = r.cache_type_k,
                               .type_v = r.cache_type_v,
                               .context = ctx,
                               .verify_k = (int32_t)o.ceiling_verify};
        if (cb_ceiling_measure_apart(&m, &ceil, err, sizeof(err)) != 0) {
            fprintf(stderr, "cobatch bench: ceiling: %s\n", err);
            cb_workload_free(&w);
            return 1;
        }
    }
    if (o.ceiling_only) {
        cobatch_params_resolve(&cp); /* (the attention path as the ceiling ran it) */
        printf("model %s (%s); flash attention %s, KV cache %s/%s, %s layout\n", model_name, o.ep.model_path,
               cobatch_params_flash_attn(&cp) ? "on" : "off", cobatch_kv_type_name(cp.cache_type_k),
               cobatch_kv_type_name(cp.cache_type_v), cp.kv_layout == COBATCH_KV_UNIFIED ? "unified" : "split");
        if (o.ceiling_on) print_ceiling(&ceil);
        cb_workload_free(&w);
        return 0;
    }

    FILE *trace = NULL;
    if (o.trace_path && !(trace = fopen(o.trace_path, "w"))) {
        fprintf(stderr, "cobatch bench: cannot write %s\n", o.trace_path);
        cb_workload_free(&w);
        return 1;
    }
    if (trace) cb_trace_write_header(trace);
    static cb_bench_result res[MAX_CFG];
    int rc = run_configs(&o, cfgs, n, &w, &ceil, trace, res, err, sizeof(err));
    if (trace) fclose(trace);
    if (rc != 0)
        fprintf(stderr, "cobatch bench: %s\n", err);
    else
        rc = report(&o, &info, cfgs, res, n, base, &w, &ceil);
    for (int i = 0; i < n; i++)
        cb_bench_result_free(&res[i]);
    cb_workload_free(&w);
    return rc == 0 ? 0 : 1;
}
