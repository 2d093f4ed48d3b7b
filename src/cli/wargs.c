#include "wargs.h"
#include "../bench/prompts.h"
#include "args.h"

#include <stdio.h>
#include <string.h>

void cb_wargs_init(cb_wargs *a) {
    memset(a, 0, sizeof(*a));
    a->workload = "mixed";
    a->burstiness = 1;
}

void cb_wargs_help(void) {
    printf("workload:\n"
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
           "  --max-concurrency N           at most N requests in flight (closed loop)\n",
           cb_workload_names());
}

int cb_wargs_parse(int argc, char **argv, int *i, cb_wargs *a) {
    const char *f = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    int64_t x;
    double d;
    if (!strcmp(f, "--workload") || !strcmp(f, "--workload-file")) {
        if (!v) return fprintf(stderr, "cobatch: %s needs a value\n", f), -1;
        if (f[10] == '-')
            a->file = v;
        else
            a->workload = v;
        (*i)++;
        return 1;
    }
    struct {
        const char *name;
        double lo, hi;
        bool is_int;
        void *dst;
        int kind; /* 0 int32, 1 uint64, 2 double, 3 int */
    } T[] = {{"--num-prompts", 1, 1000000, true, &a->o.num_prompts, 3},
             {"--seed", 0, 9e15, true, &a->o.seed, 1},
             {"--random-input-len", 1, 1 << 20, true, &a->o.random_input_len, 0},
             {"--random-output-len", 1, 1 << 20, true, &a->o.random_output_len, 0},
             {"--random-range-ratio", 0, 0.99, false, &a->o.random_range_ratio, 2},
             {"--prefix-len", 1, 1 << 20, true, &a->o.prefix_len, 0},
             {"--distinct-len", 1, 1 << 20, true, &a->o.distinct_len, 0},
             {"--output-len", 1, 1 << 20, true, &a->o.output_len, 0},
             {"--sharing-degree", 1, 1 << 20, true, &a->o.sharing_degree, 0},
             {"--request-rate", 0, 1e6, false, &a->rate, 2},
             {"--burstiness", 1e-3, 1e3, false, &a->burstiness, 2},
             {"--max-concurrency", 1, 1 << 20, true, &a->concurrency, 3}};
    for (size_t k = 0; k < sizeof(T) / sizeof(T[0]); k++) {
        if (strcmp(f, T[k].name)) continue;
        bool ok = T[k].is_int ? cb_parse_int(v, (int64_t)T[k].lo, (int64_t)T[k].hi, &x)
                              : cb_parse_float(v, T[k].lo, T[k].hi, &d);
        if (!ok) {
            fprintf(stderr, "cobatch: %s takes a %s from %g to %g (got '%s')\n", f,
                    T[k].is_int ? "whole number" : "number", T[k].lo, T[k].hi, v ? v : "nothing");
            return -1;
        }
        switch (T[k].kind) {
        case 0: *(int32_t *)T[k].dst = (int32_t)x; break;
        case 1: *(uint64_t *)T[k].dst = (uint64_t)x; break;
        case 2: *(double *)T[k].dst = d; break;
        default: *(int *)T[k].dst = (int)x; break;
        }
        (*i)++;
        return 1;
    }
    return 0;
}

int cb_wargs_build(const cb_wargs *a, const struct cobatch_engine_params *ep, cb_workload *w, char *model_name,
                   size_t name_len, char *err, size_t errlen) {
    struct cobatch_engine_params tp = *ep; /* a small engine: only its tokenizer is used */
    tp.n_ctx = 256;
    tp.max_num_seqs = 1;
    tp.prefill_chunk = 256;
    tp.max_num_batched_tokens = 256;
    tp.kv_layout = COBATCH_KV_UNIFIED;
    cobatch_engine *e = cobatch_engine_init(&tp, err, errlen);
    if (!e) return -1;
    snprintf(model_name, name_len, "%s", cobatch_model_name(e));
    bool file_arrivals = false;
    int rc = a->file ? cb_workload_load_jsonl(a->file, cb_prompt_tokenize, e, w, &file_arrivals, err, errlen)
                     : cb_workload_make(a->workload, &a->o, cb_prompt_make, e, w, err, errlen);
    cobatch_engine_free(e);
    if (rc != 0) return -1;
    if (!file_arrivals || a->rate > 0)
        cb_workload_set_arrivals(w, a->rate, a->burstiness, a->o.seed);
    else
        cb_workload_sort_by_arrival(w); /* the client submits in this order */
    return 0;
}
