#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef COBATCH_DEFAULT_MODEL
#define COBATCH_DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#endif

const char *cb_default_model(void) {
    const char *env = getenv("COBATCH_MODEL");
    return env && env[0] ? env : COBATCH_DEFAULT_MODEL;
}

bool cb_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!s || !*s) return false;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool cb_parse_float(const char *s, double lo, double hi, double *out) {
    if (!s || !*s) return false;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static const char *value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "cobatch: %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

#define INT_FLAG(name, lo, hi, dst)                                                                                    \
    if (!strcmp(a, name)) {                                                                                            \
        const char *v = value(argc, argv, i);                                                                          \
        int64_t x;                                                                                                     \
        if (!v) return -1;                                                                                             \
        if (!cb_parse_int(v, lo, hi, &x)) {                                                                            \
            fprintf(stderr, "cobatch: %s takes a whole number from %lld to %lld (got '%s')\n", name, (long long)(lo),  \
                    (long long)(hi), v);                                                                               \
            return -1;                                                                                                 \
        }                                                                                                              \
        dst = (int32_t)x;                                                                                              \
        return 1;                                                                                                      \
    }

#define FLOAT_FLAG(name, lo, hi, dst)                                                                                  \
    if (!strcmp(a, name)) {                                                                                            \
        const char *v = value(argc, argv, i);                                                                          \
        double x;                                                                                                      \
        if (!v) return -1;                                                                                             \
        if (!cb_parse_float(v, lo, hi, &x)) {                                                                          \
            fprintf(stderr, "cobatch: %s takes a number from %g to %g (got '%s')\n", name, (double)(lo), (double)(hi), \
                    v);                                                                                                \
            return -1;                                                                                                 \
        }                                                                                                              \
        dst = (float)x;                                                                                                \
        return 1;                                                                                                      \
    }

int cb_args_engine(int argc, char **argv, int *i, struct cobatch_engine_params *p) {
    const char *a = argv[*i];
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
        const char *v = value(argc, argv, i);
        if (!v) return -1;
        p->model_path = v;
        return 1;
    }
    INT_FLAG("--ctx-size", 16, 1 << 20, p->n_ctx)
    INT_FLAG("--max-model-len", 16, 1 << 20, p->max_model_len)
    INT_FLAG("-c", 16, 1 << 20, p->n_ctx)
    INT_FLAG("--threads", 1, 1024, p->n_threads)
    INT_FLAG("-t", 1, 1024, p->n_threads)
    INT_FLAG("--max-num-seqs", 1, 256, p->max_num_seqs)
    INT_FLAG("--max-num-batched-tokens", 1, 1 << 20, p->max_num_batched_tokens)
    INT_FLAG("--kv-reserve", 0, 1 << 20, p->kv_reserve)
    INT_FLAG("--max-queue", 1, 1 << 24, p->max_queue)
    INT_FLAG("--prefix-cache-max-idle", 0, 1 << 24, p->prefix_cache_max_idle)
    INT_FLAG("--prefix-cache-streams", 0, 255, p->prefix_cache_streams)
    if (!strcmp(a, "--prefill-chunk")) {
        const char *v = value(argc, argv, i);
        int64_t x;
        if (!v) return -1;
        if (!strcmp(v, "none") || !strcmp(v, "0")) {
            p->prefill_chunk = 0;
        } else if (cb_parse_int(v, 1, 1 << 20, &x)) {
            p->prefill_chunk = (int32_t)x;
        } else {
            fprintf(stderr, "cobatch: --prefill-chunk takes a token count or 'none' (got '%s')\n", v);
            return -1;
        }
        return 1;
    }
    if (!strcmp(a, "--mode")) {
        const char *v = value(argc, argv, i);
        if (!v) return -1;
        if (!strcmp(v, "continuous"))
            p->mode = COBATCH_MODE_CONTINUOUS;
        else if (!strcmp(v, "static"))
            p->mode = COBATCH_MODE_STATIC;
        else if (!strcmp(v, "sequential"))
            p->mode = COBATCH_MODE_SEQUENTIAL;
        else {
            fprintf(stderr, "cobatch: --mode is continuous, static or sequential (got '%s')\n", v);
            return -1;
        }
        return 1;
    }
    if (!strcmp(a, "--kv-layout")) {
        const char *v = value(argc, argv, i);
        if (!v) return -1;
        if (!strcmp(v, "unified"))
            p->kv_layout = COBATCH_KV_UNIFIED;
        else if (!strcmp(v, "split"))
            p->kv_layout = COBATCH_KV_SPLIT;
        else {
            fprintf(stderr, "cobatch: --kv-layout is unified or split (got '%s')\n", v);
            return -1;
        }
        return 1;
    }
    if (!strcmp(a, "--no-flash-attn")) {
        p->flash_attn = 0;
        return 1;
    }
    if (!strcmp(a, "--flash-attn") || !strcmp(a, "-fa")) {
        const char *v = value(argc, argv, i);
        if (!v) return -1;
        if (!strcmp(v, "on"))
            p->flash_attn = 1;
        else if (!strcmp(v, "off"))
            p->flash_attn = 0;
        else if (!strcmp(v, "auto"))
            p->flash_attn = -1;
        else {
            fprintf(stderr, "cobatch: --flash-attn is on, off or auto (got '%s')\n", v);
            return -1;
        }
        return 1;
    }
    if (!strcmp(a, "--enable-prefix-caching") || !strcmp(a, "--no-prefix-caching")) {
        p->prefix_caching = a[2] == 'e';
        return 1;
    }
    if (!strcmp(a, "--verbose")) {
        p->verbose = true;
        return 1;
    }
    return 0;
}

int cb_args_sampling(int argc, char **argv, int *i, struct cobatch_sampling *s) {
    const char *a = argv[*i];
    FLOAT_FLAG("--temp", 0, 100, s->temperature)
    FLOAT_FLAG("--temperature", 0, 100, s->temperature)
    INT_FLAG("--top-k", 0, 1 << 24, s->top_k)
    FLOAT_FLAG("--top-p", 1e-9, 1, s->top_p)
    FLOAT_FLAG("--min-p", 0, 1, s->min_p)
    FLOAT_FLAG("--repeat-penalty", 1e-9, 100, s->repetition_penalty)
    FLOAT_FLAG("--presence-penalty", -2, 2, s->presence_penalty)
    FLOAT_FLAG("--frequency-penalty", -2, 2, s->frequency_penalty)
    INT_FLAG("--repeat-last-n", -1, 1 << 20, s->penalty_last_n)
    if (!strcmp(a, "--seed")) {
        const char *v = value(argc, argv, i);
        int64_t x;
        if (!v) return -1;
        if (!cb_parse_int(v, 0, UINT32_MAX, &x)) {
            fprintf(stderr, "cobatch: --seed takes a whole number from 0 to %u (got '%s')\n", UINT32_MAX, v);
            return -1;
        }
        s->seed = (uint32_t)x;
        return 1;
    }
    return 0;
}

void cb_args_engine_help(void) {
    fputs("engine:\n"
          "  -m, --model FILE              GGUF model (default: $COBATCH_MODEL or the fetched SmolLM2-135M)\n"
          "  -c, --ctx-size N              KV cells in all; default max-model-len x max-num-seqs (split),\n"
          "                                4096 (unified)\n"
          "  --max-model-len N             cells one request may use (prompt + output) when -c is not\n"
          "                                given; default 1024 (split; unified: all of -c)\n"
          "  -t, --threads N               decode threads, default: all cores\n"
          "  --max-num-seqs N              requests running at once, default 16\n"
          "  --max-num-batched-tokens N    token budget of one step, default 512\n"
          "  --prefill-chunk N|none        prompt tokens per request per step, default 256\n"
          "  --mode continuous|static|sequential   scheduling mode, default continuous\n"
          "  --kv-layout split|unified     KV cache layout, default split: each sequence has -c /\n"
          "                                max-num-seqs cells of its own (~20% less work a token with many\n"
          "                                streams) and prefixes are shared by copying whole streams;\n"
          "                                unified: one pool, prefixes shared in place\n"
          "  --kv-reserve N                cells an admission leaves free, default 32\n"
          "  --max-queue N                 waiting requests before refusing, default 1024\n"
          "  -fa, --flash-attn on|off|auto flash attention, default on; auto: off in the split layout\n"
          "                                (5-14% faster on this project's CPU; seeded sampling is then\n"
          "                                not repeatable across prefix-cache hits), on in unified\n"
          "  --no-flash-attn               = --flash-attn off\n"
          "  --no-prefix-caching           do not share cached prompt prefixes across requests\n"
          "                                (--enable-prefix-caching: the default)\n"
          "  --prefix-cache-max-idle N     unified: idle cached cells kept (LRU beyond); default 0: no limit\n"
          "  --prefix-cache-streams N      split: extra streams keeping finished requests' tokens (each\n"
          "                                -c / max-num-seqs cells more); default max-num-seqs / 4\n"
          "  --verbose                     show llama.cpp's log\n",
          stdout);
}

void cb_args_sampling_help(void) {
    fputs("sampling:\n"
          "  --temp T                      temperature, 0 = greedy (default)\n"
          "  --top-k K  --top-p P  --min-p P\n"
          "  --repeat-penalty R  --presence-penalty P  --frequency-penalty F  --repeat-last-n N\n"
          "  --seed S                      seed for temperature > 0 (default: a fresh random one)\n",
          stdout);
}
