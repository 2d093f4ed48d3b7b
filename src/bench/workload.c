#include "workload.h"
#include "../util/util.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *cb_workload_names(void) {
    return "long, long16, long-context, mixed, mixed-small, decode-heavy, prefill-heavy, random, shared-prefix, "
           "multi-prefix, sessions, edit";
}

/* Lengths of each workload, before prompts are made. */
static int plan_lengths(const char *name, const cb_workload_opts *o, uint64_t *rng, int32_t **in, int32_t **out,
                        int *n) {
    int count;
    if (!strcmp(name, "long"))
        count = 186;
    else if (!strcmp(name, "long16") || !strcmp(name, "long-context"))
        count = 16;
    else if (!strcmp(name, "mixed"))
        count = 20;
    else if (!strcmp(name, "mixed-small"))
        count = 6;
    else if (!strcmp(name, "decode-heavy"))
        count = 32;
    else if (!strcmp(name, "prefill-heavy"))
        count = 32;
    else if (!strcmp(name, "random"))
        count = 100;
    else if (!strcmp(name, "shared-prefix") || !strcmp(name, "multi-prefix"))
        count = 32;
    else if (!strcmp(name, "edit"))
        count = 16;
    else if (!strcmp(name, "sessions"))
        count = (o->sessions > 0 ? o->sessions : 32) * (o->turns > 0 ? o->turns : 4);
    else
        return -1;
    if (o->num_prompts > 0 && strcmp(name, "sessions") != 0) count = o->num_prompts;
    *in = calloc((size_t)count, sizeof(int32_t));
    *out = calloc((size_t)count, sizeof(int32_t));
    if (!*in || !*out) return -2;
    for (int i = 0; i < count; i++) {
        int32_t a, b;
        if (!strcmp(name, "long") || !strcmp(name, "long16")) { /* CoBaLI: multi-sentence prompts */
            a = cb_rng_range(rng, 60, 500);
            b = cb_rng_range(rng, 32, 128);
        } else if (!strcmp(name, "long-context")) { /* where agents live: distinct prompts of context_len */
            a = o->context_len > 0 ? o->context_len : 4096;
            b = o->output_len > 0 ? o->output_len : 128;
        } else if (!strcmp(name, "mixed")) { /* nano-vLLM's control workload */
            static const int32_t P[] = {128, 256, 384, 512}, O[] = {24, 24, 24, 96, 24, 24, 24, 128};
            a = P[i % 4];
            b = O[i % 8];
        } else if (!strcmp(name, "mixed-small")) { /* 3 long + 3 short, interleaved */
            bool lng = i % 2 == 0;
            a = lng ? cb_rng_range(rng, 70, 80) : cb_rng_range(rng, 6, 8);
            b = lng ? cb_rng_range(rng, 20, 30) : cb_rng_range(rng, 40, 50);
        } else if (!strcmp(name, "decode-heavy")) {
            a = cb_rng_range(rng, 16, 48);
            b = cb_rng_range(rng, 192, 256);
        } else if (!strcmp(name, "prefill-heavy")) {
            a = cb_rng_range(rng, 400, 800);
            b = cb_rng_range(rng, 4, 16);
        } else if (!strcmp(name, "shared-prefix")) {
            a = (o->prefix_len > 0 ? o->prefix_len : 1000) + (o->distinct_len > 0 ? o->distinct_len : 100);
            b = o->output_len > 0 ? o->output_len : 50;
        } else if (!strcmp(name, "multi-prefix")) { /* system prompt, group's document, question */
            a = (o->system_len > 0 ? o->system_len : 470) + (o->prefix_len > 0 ? o->prefix_len : 1000) +
                (o->distinct_len > 0 ? o->distinct_len : 100);
            b = o->output_len > 0 ? o->output_len : 50;
        } else if (!strcmp(name, "sessions")) { /* turn-major: the first `sessions` items are the tasks */
            a = i < (o->sessions > 0 ? o->sessions : 32) ? (o->task_len > 0 ? o->task_len : 90)
                                                         : (o->turn_len > 0 ? o->turn_len : 50);
            b = o->output_len > 0 ? o->output_len : 32;
        } else { /* vLLM random: uniform in [len * (1 - r), len * (1 + r)] */
            double r = o->random_range_ratio;
            int32_t il = o->random_input_len > 0 ? o->random_input_len : 256;
            int32_t ol = o->random_output_len > 0 ? o->random_output_len : 64;
            a = cb_rng_range(rng, (int32_t)fmax(1, il * (1 - r)), (int32_t)fmax(1, il * (1 + r)));
            b = cb_rng_range(rng, (int32_t)fmax(1, ol * (1 - r)), (int32_t)fmax(1, ol * (1 + r)));
        }
        (*in)[i] = a;
        (*out)[i] = b;
    }
    *n = count;
    return 0;
}

/* n tokens that go after others: a fresh prompt's tokens after its first, so they carry no second
 * BOS. Returns 0 or -1. */
static int tail_tokens(cb_prompt_fn fn, void *ctx, uint64_t *rng, int32_t n, int32_t *out) {
    int32_t *tmp = malloc(sizeof(int32_t) * (size_t)(n + 1));
    int rc = tmp ? fn(ctx, rng, n + 1, tmp) : -1;
    if (rc == 0) memcpy(out, tmp + 1, sizeof(int32_t) * (size_t)n);
    free(tmp);
    return rc;
}

/* Request i of a shared-prefix workload: the prefix of its group (made once, by the group's
 * first request, and copied), then distinct tokens of its own. */
static int shared_prompt(const cb_workload_opts *o, int i, cb_prompt_fn fn, void *ctx, uint64_t *rng,
                         const cb_workload *w, cb_work_item *it) {
    int32_t p = o->prefix_len > 0 ? o->prefix_len : 1000, d = it->n_in - p;
    int s = o->sharing_degree > 0 ? o->sharing_degree : 4;
    if (i % s == 0) {
        if (fn(ctx, rng, p, it->tokens) != 0) return -1;
    } else {
        memcpy(it->tokens, w->items[i - i % s].tokens, sizeof(int32_t) * (size_t)p);
    }
    return tail_tokens(fn, ctx, rng, d, it->tokens + p);
}

/* Request i of a multi-prefix workload, a prefix tree of two levels: the system prompt every
 * request starts with (made by the first request, copied by the others), then its group's document
 * (made by the group's first request, copied by the rest of the group), then a question of its own. */
static int multi_prompt(const cb_workload_opts *o, int i, cb_prompt_fn fn, void *ctx, uint64_t *rng,
                        const cb_workload *w, cb_work_item *it) {
    int32_t sys = o->system_len > 0 ? o->system_len : 470, doc = o->prefix_len > 0 ? o->prefix_len : 1000;
    int s = o->sharing_degree > 0 ? o->sharing_degree : 4;
    if (i == 0) {
        if (fn(ctx, rng, sys, it->tokens) != 0) return -1;
    } else {
        memcpy(it->tokens, w->items[0].tokens, sizeof(int32_t) * (size_t)sys);
    }
    if (i % s == 0) {
        if (tail_tokens(fn, ctx, rng, doc, it->tokens + sys) != 0) return -1;
    } else {
        memcpy(it->tokens + sys, w->items[i - i % s].tokens + sys, sizeof(int32_t) * (size_t)doc);
    }
    return tail_tokens(fn, ctx, rng, it->n_in - sys - doc, it->tokens + sys + doc);
}

/* Makes item i's prompt tokens as its workload shapes them. Returns 0 or -1. */
static int make_prompt(const char *name, const cb_workload_opts *o, int i, cb_prompt_fn fn, void *ctx, uint64_t *rng,
                       const cb_workload *w, cb_work_item *it) {
    if (!strcmp(name, "shared-prefix")) return shared_prompt(o, i, fn, ctx, rng, w, it);
    if (!strcmp(name, "multi-prefix")) return multi_prompt(o, i, fn, ctx, rng, w, it);
    return fn(ctx, rng, it->n_in, it->tokens);
}

/* A session workload's shape: which session and turn each item is, the shared system prompt. */
static int make_sessions(const cb_workload_opts *o, cb_prompt_fn fn, void *ctx, uint64_t *rng, cb_workload *w) {
    w->n_sessions = o->sessions > 0 ? o->sessions : 32;
    w->think_s = o->think_s;
    for (int i = 0; i < w->n; i++) {
        w->items[i].session = i % w->n_sessions;
        w->items[i].turn = i / w->n_sessions;
    }
    w->n_system = o->system_len > 0 ? o->system_len : 470;
    w->system_tokens = malloc(sizeof(int32_t) * (size_t)w->n_system);
    return w->system_tokens ? fn(ctx, rng, w->n_system, w->system_tokens) : -1;
}

int cb_workload_make(const char *name, const cb_workload_opts *o, cb_prompt_fn fn, void *ctx, cb_workload *w, char *err,
                     size_t errlen) {
    memset(w, 0, sizeof(*w));
    uint64_t rng = o->seed * 0x2545F4914F6CDD1DULL + 17;
    int32_t *in = NULL, *out = NULL;
    int n = 0, rc = plan_lengths(name, o, &rng, &in, &out, &n);
    if (rc != 0) {
        cb_set_err(err, errlen, rc == -1 ? "unknown workload '%s' (one of: %s)" : "out of memory", name,
                   cb_workload_names());
        free(in);
        free(out);
        return -1;
    }
    snprintf(w->name, sizeof(w->name), "%s", name);
    w->items = calloc((size_t)n, sizeof(*w->items));
    if (!w->items) {
        free(in);
        free(out);
        cb_set_err(err, errlen, "out of memory");
        return -1;
    }
    w->n = n;
    if (!strcmp(name, "edit")) { /* prompts and lengths from its files (edit.c) */
        free(in);
        free(out);
        for (int i = 0; i < n; i++)
            w->items[i].session = -1;
        if (cb_workload_edit(o, &rng, w, err, errlen) != 0) {
            cb_workload_free(w);
            return -1;
        }
        return 0;
    }
    bool shared = !strcmp(name, "shared-prefix") || !strcmp(name, "multi-prefix");
    for (int i = 0; i < n; i++) {
        cb_work_item *it = &w->items[i];
        it->session = -1;
        it->n_in = in[i];
        it->n_out = out[i];
        it->tokens = malloc(sizeof(int32_t) * (size_t)in[i]);
        if (!it->tokens || make_prompt(name, o, i, fn, ctx, &rng, w, it) != 0) {
            cb_set_err(err, errlen, "cannot make a prompt of %d tokens", in[i]);
            free(in);
            free(out);
            cb_workload_free(w);
            return -1;
        }
    }
    free(in);
    free(out);
    if (!strcmp(name, "sessions") && make_sessions(o, fn, ctx, &rng, w) != 0) {
        cb_set_err(err, errlen, "cannot make the sessions' system prompt");
        cb_workload_free(w);
        return -1;
    }
    if (shared) { /* arrival order must not reveal the groups: Fisher-Yates shuffle */
        for (int i = n - 1; i > 0; i--) {
            int j = cb_rng_range(&rng, 0, i);
            cb_work_item t = w->items[i];
            w->items[i] = w->items[j];
            w->items[j] = t;
        }
    }
    return 0;
}

void cb_workload_free(cb_workload *w) {
    for (int i = 0; i < w->n; i++)
        free(w->items[i].tokens), free(w->items[i].text), free(w->items[i].prediction);
    free(w->items);
    free(w->system_tokens);
    free(w->system_text);
    memset(w, 0, sizeof(*w));
}

/* Marsaglia and Tsang's gamma sampler (shape k, scale 1); k < 1 boosted by U^(1/k). */
static double gamma_sample(uint64_t *rng, double k) {
    if (k < 1) {
        double u = cb_rng_unit(rng);
        return gamma_sample(rng, k + 1) * pow(u > 0 ? u : 1e-300, 1.0 / k);
    }
    double d = k - 1.0 / 3.0, c = 1.0 / sqrt(9 * d);
    for (;;) {
        double x, v;
        do { /* a standard normal by Box-Muller */
            double u1 = cb_rng_unit(rng), u2 = cb_rng_unit(rng);
            x = sqrt(-2 * log(u1 > 0 ? u1 : 1e-300)) * cos(2 * M_PI * u2);
            v = 1 + c * x;
        } while (v <= 0);
        v = v * v * v;
        double u = cb_rng_unit(rng);
        if (u < 1 - 0.0331 * x * x * x * x || log(u > 0 ? u : 1e-300) < 0.5 * x * x + d * (1 - v + log(v)))
            return d * v;
    }
}

void cb_workload_set_arrivals(cb_workload *w, double rate, double burstiness, uint64_t seed) {
    uint64_t rng = seed * 0x9E3779B97F4A7C15ULL + 3;
    double t = 0;
    for (int i = 0; i < w->n; i++) {
        w->items[i].arrival_s = t;
        if (rate > 0) {
            double k = burstiness > 0 ? burstiness : 1;
            t += gamma_sample(&rng, k) / (k * rate); /* mean k * 1/(k rate) = 1/rate */
        }
    }
}

/* Stable insertion sort: equal arrival times keep the file's order. O(n^2) worst case, fine for
 * workload files of thousands of lines that are nearly sorted already. */
void cb_workload_sort_by_arrival(cb_workload *w) {
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
