#include "flags.h"
#include "args.h"
#include "../openai/bounds.h"

#include <cobatch.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- matching ------------------- */

/* Whether arg is one of the comma-separated spellings in names. */
static bool spelled(const char *names, const char *arg) {
    size_t n = strlen(arg);
    for (const char *p = names; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *end = p;
        while (*end && *end != ',')
            end++;
        if ((size_t)(end - p) == n && !strncmp(p, arg, n)) return true;
        p = end;
    }
    return false;
}

/* Whether a flag of an earlier group than g takes one of f's spellings (then f is never parsed). */
static bool shadowed(const cb_cli *cli, size_t g, const cb_flag *f) {
    for (const char *p = f->names; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t n = strcspn(p, ",");
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)n, p);
        for (size_t e = 0; e < g; e++)
            for (size_t k = 0; k < cli->groups[e].n; k++)
                if (spelled(cli->groups[e].flags[k].names, name)) return true;
        p += n;
    }
    return false;
}

static const cb_flag *find(const cb_cli *cli, const char *arg) {
    for (size_t g = 0; g < cli->n_groups; g++)
        for (size_t k = 0; k < cli->groups[g].n; k++)
            if (spelled(cli->groups[g].flags[k].names, arg)) return &cli->groups[g].flags[k];
    return NULL;
}

/* ---------------------------------------------------------------- values --------------------- */

static bool is_int_type(cb_flag_type t) {
    return t == CB_FLAG_I32 || t == CB_FLAG_INT || t == CB_FLAG_I64 || t == CB_FLAG_U32 || t == CB_FLAG_U64 ||
           t == CB_FLAG_SIZE;
}

static bool store(const cb_flag *f, const char *v, FILE *err, const char *cmd, const char *arg) {
    int64_t x = 0;
    double d = 0;
    if (is_int_type(f->type)) {
        if (!cb_parse_int(v, (int64_t)f->lo, (int64_t)f->hi, &x)) {
            fprintf(err, "%s: %s takes a whole number from %lld to %lld (got '%s')\n", cmd, arg, (long long)f->lo,
                    (long long)f->hi, v);
            return false;
        }
    } else if (f->type == CB_FLAG_F32 || f->type == CB_FLAG_F64) {
        if (!cb_parse_float(v, f->lo, f->hi, &d)) {
            fprintf(err, "%s: %s takes a number from %g to %g (got '%s')\n", cmd, arg, f->lo, f->hi, v);
            return false;
        }
    }
    switch (f->type) {
    case CB_FLAG_I32: *(int32_t *)f->dst = (int32_t)x; break;
    case CB_FLAG_INT: *(int *)f->dst = (int)x; break;
    case CB_FLAG_I64: *(int64_t *)f->dst = x; break;
    case CB_FLAG_U32: *(uint32_t *)f->dst = (uint32_t)x; break;
    case CB_FLAG_U64: *(uint64_t *)f->dst = (uint64_t)x; break;
    case CB_FLAG_SIZE: *(size_t *)f->dst = (size_t)x; break;
    case CB_FLAG_F32: *(float *)f->dst = (float)d; break;
    case CB_FLAG_F64: *(double *)f->dst = d; break;
    case CB_FLAG_STR: *(const char **)f->dst = v; break;
    case CB_FLAG_ENUM: {
        int idx = 0;
        for (const char *p = f->choices; *p; idx++) {
            size_t n = strcspn(p, "|");
            if (n == strlen(v) && !strncmp(p, v, n)) {
                *(int *)f->dst = f->values ? f->values[idx] : idx;
                return true;
            }
            p += n + (p[n] == '|');
        }
        fprintf(err, "%s: %s is ", cmd, arg); /* "a, b or c" */
        for (const char *p = f->choices; *p;) {
            size_t n = strcspn(p, "|");
            const char *next = p + n + (p[n] == '|');
            fprintf(err, "%s%.*s", p == f->choices ? "" : *next ? ", " : " or ", (int)n, p);
            p = next;
        }
        fprintf(err, " (got '%s')\n", v);
        return false;
    }
    case CB_FLAG_LIST:
        if (*f->count >= f->max) {
            fprintf(err, "%s: %s is given %zu times at most\n", cmd, arg, f->max);
            return false;
        }
        ((const char **)f->dst)[(*f->count)++] = v;
        break;
    case CB_FLAG_FN:
        if (!f->parse(v, f->dst)) {
            fprintf(err, "%s: %s takes %s (got '%s')\n", cmd, arg, f->takes ? f->takes : f->meta, v);
            return false;
        }
        break;
    default: break;
    }
    return true;
}

int cb_flags_parse(const cb_cli *cli, int argc, char **argv, FILE *out, FILE *err) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            cb_flags_help(cli, out);
            return 1;
        }
        const cb_flag *f = find(cli, a);
        const char *value = NULL; /* --name=value, as argparse (vLLM) and GNU tools take it */
        char name[64];
        const char *eq = strchr(a, '=');
        if (!f && !strncmp(a, "--", 2) && eq && (size_t)(eq - a) < sizeof(name)) {
            snprintf(name, sizeof(name), "%.*s", (int)(eq - a), a);
            if ((f = find(cli, name))) a = name, value = eq + 1;
        }
        if (!f) {
            fprintf(err, "%s: unknown option '%s' (see %s --help)\n", cli->cmd, a, cli->cmd);
            return 2;
        }
        if (f->type == CB_FLAG_SET || f->type == CB_FLAG_CLEAR || f->type == CB_FLAG_CONST) {
            if (value) {
                fprintf(err, "%s: %s takes no value (got '%s')\n", cli->cmd, a, value);
                return 2;
            }
            if (f->type == CB_FLAG_CONST)
                *(int *)f->dst = (int)f->lo;
            else
                *(bool *)f->dst = f->type == CB_FLAG_SET;
            continue;
        }
        if (!value && i + 1 >= argc) {
            fprintf(err, "%s: %s needs a value (%s)\n", cli->cmd, a, f->meta ? f->meta : "");
            return 2;
        }
        if (!store(f, value ? value : argv[++i], err, cli->cmd, a)) return 2;
    }
    return 0;
}

/* ---------------------------------------------------------------- help ----------------------- */

#define HELP_COL 32

void cb_flags_help(const cb_cli *cli, FILE *out) {
    fputs(cli->usage, out);
    for (size_t g = 0; g < cli->n_groups; g++) {
        const cb_flag_group *grp = &cli->groups[g];
        if (grp->n == 0) continue;
        fprintf(out, "%s:\n", grp->title);
        for (size_t k = 0; k < grp->n; k++) {
            const cb_flag *f = &grp->flags[k];
            if (shadowed(cli, g, f)) continue; /* an earlier group's flag of that name is the one parsed */
            char head[128];
            snprintf(head, sizeof(head), "  %s%s%s", f->names, f->meta ? " " : "", f->meta ? f->meta : "");
            fputs(head, out);
            size_t col = strlen(head);
            const char *h = f->help ? f->help : "";
            for (bool first = true; first || *h; first = false) {
                size_t n = strcspn(h, "\n");
                if (col >= HELP_COL) {
                    fputc('\n', out);
                    col = 0;
                }
                fprintf(out, "%*s%.*s\n", (int)(HELP_COL - col), "", (int)n, h);
                col = 0;
                h += n + (h[n] == '\n');
                if (!*h) break;
            }
        }
    }
    if (cli->footer) fputs(cli->footer, out);
}

/* ---------------------------------------------------------------- shared groups -------------- */

static bool parse_chunk(const char *v, void *dst) {
    int64_t x;
    if (!strcmp(v, "none") || !strcmp(v, "0")) {
        *(int32_t *)dst = 0;
        return true;
    }
    if (!cb_parse_int(v, 1, 1 << 20, &x)) return false;
    *(int32_t *)dst = (int32_t)x;
    return true;
}

static bool parse_pacing(const char *v, void *dst) {
    double x;
    if (!strcmp(v, "off")) {
        *(float *)dst = 0.0f;
        return true;
    }
    if (!cb_parse_float(v, 0.05, 16, &x)) return false;
    *(float *)dst = (float)x;
    return true;
}

static bool parse_seqs(const char *v, void *dst) {
    int64_t x;
    if (!strcmp(v, "auto")) {
        *(int32_t *)dst = 0;
        return true;
    }
    if (!cb_parse_int(v, 1, 256, &x)) return false;
    *(int32_t *)dst = (int32_t)x;
    return true;
}

/* ENUM and CONST rows write an int into these enums' fields */
_Static_assert(sizeof(enum cobatch_mode) == sizeof(int) && sizeof(enum cobatch_kv_layout) == sizeof(int) &&
                   sizeof(enum cobatch_sched_policy) == sizeof(int),
               "enums are ints");
static const int MODES[] = {COBATCH_MODE_CONTINUOUS, COBATCH_MODE_STATIC, COBATCH_MODE_SEQUENTIAL};
static const int LAYOUTS[] = {COBATCH_KV_SPLIT, COBATCH_KV_UNIFIED};
static const int FA[] = {1, 0, -1};
static const int ROPE[] = {COBATCH_ROPE_NONE, COBATCH_ROPE_LINEAR, COBATCH_ROPE_YARN};
#define KV_TYPES "auto|f16|f32|bf16|q8_0|q4_0|q4_1|iq4_nl|q5_0|q5_1" /* KV_TYPE's order */
static const int KV_TYPE[] = {COBATCH_KV_AUTO, COBATCH_KV_F16,  COBATCH_KV_F32,    COBATCH_KV_BF16, COBATCH_KV_Q8_0,
                              COBATCH_KV_Q4_0, COBATCH_KV_Q4_1, COBATCH_KV_IQ4_NL, COBATCH_KV_Q5_0, COBATCH_KV_Q5_1};
static const int REPACK[] = {COBATCH_REPACK_AUTO, COBATCH_REPACK_ON, COBATCH_REPACK_OFF};
static const int SPEC[] = {COBATCH_SPEC_OFF, COBATCH_SPEC_NGRAM, COBATCH_SPEC_NGRAM_OWN};
static const int REASONING[] = {COBATCH_REASONING_SEPARATED, COBATCH_REASONING_NONE, COBATCH_REASONING_SEPARATED,
                                COBATCH_REASONING_SEPARATED};

/* --limit NAME=N: the engine's grammar bounds into the params, the request bounds process-wide. */
static bool parse_limit(const char *v, void *dst) {
    struct cobatch_engine_params *p = dst;
    const char *eq = strchr(v, '=');
    if (!eq || !eq[1]) return false;
    char *end;
    errno = 0;
    long n = strtol(eq + 1, &end, 10);
    if (*end || errno || n < 1 || n > INT32_MAX) return false;
    size_t k = (size_t)(eq - v);
    struct {
        const char *name;
        int32_t *to;
    } const names[] = {{"grammar-nesting", &p->grammar_max_nesting},
                       {"grammar-elements", &p->grammar_max_elements},
                       {"grammar-states", &p->grammar_max_states},
                       {"json-depth", &cb_bounds.json_depth},
                       {"name-length", &cb_bounds.name_length},
                       {"tools", &cb_bounds.tools},
                       {"messages", &cb_bounds.messages}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strlen(names[i].name) == k && !strncmp(v, names[i].name, k)) {
            *names[i].to = (int32_t)n;
            return true;
        }
    return false;
}

/* The engine's flags for host memory and disk: swap space and the prefix cache's tiers. */
#define CB_TIER_FLAGS 4
static void tier_flags(cb_flag *out, struct cobatch_engine_params *p) {
    const cb_flag t[CB_TIER_FLAGS] = {
        {"--swap-space", "GiB", CB_FLAG_F32, &p->swap_space, 0, 1 << 20,
         .help = "host memory for preempted requests' KV cells (put back instead\nof recomputed when cheaper), "
                 "default 4; 0: recompute"},
        {"--cache-ram", "GiB", CB_FLAG_F32, &p->cache_ram, 0, 1 << 20,
         .help = "split: host memory keeping cached conversations that leave the\nKV streams (copied back "
                 "instead of recomputed when cheaper);\ndefault 1/8 of the host's memory, at most 8; 0: none"},
        {"--cache-disk", "DIR", CB_FLAG_STR, &p->cache_disk,
         .help = "split: a folder under the host tier keeping cached conversations\nacross restarts (written "
                 "through; replicas may share it)"},
        {"--cache-disk-size", "GiB", CB_FLAG_F32, &p->cache_disk_size, 0.001, 1 << 20,
         .help = "the disk tier's size, least recently used out; default 16"},
    };
    memcpy(out, t, sizeof(t));
}

cb_flag_group cb_flags_engine(cb_flag *room, struct cobatch_engine_params *p) {
    const cb_flag t[] = {
        {"-m, --model", "FILE", CB_FLAG_STR, &p->model_path,
         .help = "GGUF model (default: $COBATCH_MODEL or the fetched SmolLM2-135M)"},
        {"-c, --ctx-size", "N", CB_FLAG_I32, &p->n_ctx, 16, 1 << 20,
         .help = "KV cells in all; default max-model-len x max-num-seqs (split),\n4096 (unified)"},
        {"--max-model-len", "N", CB_FLAG_I32, &p->max_model_len, 16, 1 << 20,
         .help = "cells one request may use (prompt + output) when -c is not\ngiven; default (split) 4096 "
                 "when 1.25 x max-num-seqs streams of\nit fit 1/8 of memory (at most 8 GiB), else 2048, else "
                 "1024;\nunified: all of -c; never past the model's trained context"},
        {"-t, --threads", "N", CB_FLAG_I32, &p->n_threads, 1, 1024, .help = "decode threads, default: all cores"},
        {"--max-num-seqs", "N|auto", CB_FLAG_FN, &p->max_num_seqs, .parse = parse_seqs,
         .takes = "a count from 1 to 256 or 'auto'",
         .help = "requests running at once, default 16; auto (unified layout): as\nmany as the KV cells hold, "
                 "up to 224 (memory-centric)"},
        {"--max-num-batched-tokens", "N", CB_FLAG_I32, &p->max_num_batched_tokens, 1, 1 << 20,
         .help = "token budget of one step, default 512 (serve: 128, a step's\nlength is the pause every stream sees)"},
        {"--prefill-step-tokens", "N", CB_FLAG_I32, &p->prefill_step_tokens, 1, 1 << 20,
         .help = "a step in which no request decodes (prompts alone) takes up to\nN tokens, a request's chunk too; "
                 "default: the step budget\n(serve: 512)"},
        {"--prefill-chunk", "N|none", CB_FLAG_FN, &p->prefill_chunk, .parse = parse_chunk,
         .takes = "a token count or 'none'",
         .help = "prompt tokens per request per step (1 to 1048576, or none),\ndefault 256"},
        {"--step-pacing", "X|off", CB_FLAG_FN, &p->step_pacing, .parse = parse_pacing,
         .takes = "a share from 0.05 to 16 or 'off'",
         .help = "while requests decode, a step's prompt tokens may hold them\nback, in sum, by X full decode "
                 "steps (measured; 1: a gap\nat most doubles); default 0.5 in cobatch serve, off elsewhere"},
        {"--mode", "MODE", CB_FLAG_ENUM, &p->mode, .choices = "continuous|static|sequential", .values = MODES,
         .help = "continuous (default), static or sequential scheduling"},
        {"--kv-layout", "LAYOUT", CB_FLAG_ENUM, &p->kv_layout, .choices = "split|unified", .values = LAYOUTS,
         .help = "split (default): each sequence has -c / max-num-seqs cells of its\nown (~20% less work a token "
                 "with many streams), prefixes shared by\ncopying whole streams; unified: one pool, prefixes "
                 "shared in place"},
        {"--kv-reserve", "N", CB_FLAG_I32, &p->kv_reserve, 0, 1 << 20,
         .help = "cells an admission leaves free, default 32"},
        {"--max-queue", "N", CB_FLAG_I32, &p->max_queue, 1, 1 << 24,
         .help = "waiting requests before refusing, default 1024"},
        {"-fa, --flash-attn", "on|off|auto", CB_FLAG_ENUM, &p->flash_attn, .choices = "on|off|auto", .values = FA,
         .help = "flash attention, default auto: on or off as measured fastest\non this host (kept on where off "
                 "breaks something: exact\ncache hits, the unified layout, a quantized V)"},
        {"--no-flash-attn", NULL, CB_FLAG_CONST, &p->flash_attn, 0, .help = "= --flash-attn off"},
        {"-ctk, --cache-type-k", "TYPE", CB_FLAG_ENUM, &p->cache_type_k, .choices = KV_TYPES, .values = KV_TYPE,
         .help = "KV cache type of K: auto (default: f16, bf16 or f32, as\nmeasured), f16, f32, bf16, q8_0, q4_0, "
                 "q4_1, iq4_nl,\nq5_0 or q5_1 (quantized: 2-4x the cells, for a small drift)"},
        {"-ctv, --cache-type-v", "TYPE", CB_FLAG_ENUM, &p->cache_type_v, .choices = KV_TYPES, .values = KV_TYPE,
         .help = "KV cache type of V, as --cache-type-k; a quantized V needs\nflash attention"},
        {"--enable-prefix-caching", NULL, CB_FLAG_SET, &p->prefix_caching,
         .help = "share cached prompt prefixes across requests (the default)"},
        {"--no-prefix-caching", NULL, CB_FLAG_CLEAR, &p->prefix_caching, .help = "do not share them"},
        {"--approximate-hits", NULL, CB_FLAG_CLEAR, &p->exact_hits,
         .help = "a cache hit computes only what it adds, not its prompt's last\n64 tokens again: sooner by up to "
                 "~200 ms on two cores, but\nits answer may differ from the cold prompt's at near-ties"},
        {"--prefix-cache-max-idle", "N", CB_FLAG_I32, &p->prefix_cache_max_idle, 0, 1 << 24,
         .help = "unified: idle cached cells kept (LRU beyond); default 0: no limit"},
        {"--prefix-cache-streams", "N", CB_FLAG_I32, &p->prefix_cache_streams, 0, 255,
         .help = "split: extra streams keeping finished requests' tokens (each\n-c / max-num-seqs cells more); "
                 "default 2 x max-num-seqs within\nwhat the running streams leave of 1/8 of the host's memory\n(at "
                 "most 8 GiB), at least max-num-seqs / 4"},
        {"--long-lane", "N", CB_FLAG_I32, &p->long_lane, 0, 1 << 20,
         .help = "split: cells of a second pool for requests longer than a stream\n(longer prompts, outgrown "
                 "streams): a request may use N cells;\ndefault the model's trained context (or what RoPE scaling\n"
                 "reaches) unless -c or --max-model-len is given; 0: none"},
        {"--rope-scaling", "none|linear|yarn", CB_FLAG_ENUM, &p->rope.scaling, .choices = "none|linear|yarn",
         .values = ROPE,
         .help = "RoPE scaling for contexts past the trained one (default: the\nmodel's own); with --rope-scale F "
                 "a request may use F x the\ntrained context, for some loss of quality (README)"},
        {"--rope-scale", "F", CB_FLAG_F32, &p->rope.scale, 1, 1024,
         .help = "the context factor of --rope-scaling (llama.cpp's: frequencies\nscaled by 1/F)"},
        {"--rope-freq-base", "N", CB_FLAG_F32, &p->rope.freq_base, 1, 1e12,
         .help = "RoPE base frequency (default: the model's)"},
        {"--rope-freq-scale", "N", CB_FLAG_F32, &p->rope.freq_scale, 1e-6, 1,
         .help = "RoPE frequency scale, 1/F (default: 1/--rope-scale or the model's)"},
        {"--yarn-orig-ctx", "N", CB_FLAG_I32, &p->rope.yarn_orig_ctx, 1, 1 << 24,
         .help = "YaRN: the context the model was trained on (default: its GGUF's)"},
        {"--yarn-ext-factor", "N", CB_FLAG_F32, &p->rope.yarn_ext_factor, 0, 1,
         .help = "YaRN: extrapolation mix factor (default: llama.cpp's)"},
        {"--yarn-attn-factor", "N", CB_FLAG_F32, &p->rope.yarn_attn_factor, 0, 100,
         .help = "YaRN: attention magnitude factor (default: llama.cpp's)"},
        {"--yarn-beta-slow", "N", CB_FLAG_F32, &p->rope.yarn_beta_slow, 0, 1000,
         .help = "YaRN: high correction dimension (default 1)"},
        {"--yarn-beta-fast", "N", CB_FLAG_F32, &p->rope.yarn_beta_fast, 0, 1000,
         .help = "YaRN: low correction dimension (default 32)"},
        {"--spec", "off|ngram|ngram-own", CB_FLAG_ENUM, &p->spec, .choices = "off|ngram|ngram-own", .values = SPEC,
         .help = "ngram: check drafts where they pay, from a request's own text,\nelse from what other "
                 "requests' text had there (timing can\ntell one client what another sent); ngram-own: its "
                 "own text only"},
        {"--spec-max", "K", CB_FLAG_I32, &p->spec_max, 1, COBATCH_SPEC_MAX,
         .help = "drafts a request checks a step, default 8"},
        {"--rpc", "HOST:PORT,...", CB_FLAG_STR, &p->rpc_servers,
         .help = "run the model's layers on these ggml-rpc-server processes (a\nbuild with -DCOBATCH_RPC=ON; "
                 "README: a model split across hosts)"},
        {"--repack", "auto|on|off", CB_FLAG_ENUM, &p->repack, .choices = "auto|on|off", .values = REPACK,
         .help = "CPU weight layouts: auto (default) repacks weights for the\nCPU's faster kernels but never "
                 "for Intel AMX (ggml's AMX\nkernels segfault on some hosts); on: AMX too; off: none"},
        {"--no-repack", NULL, CB_FLAG_CONST, &p->repack, COBATCH_REPACK_OFF, .help = "= --repack off"},
        {"--chat-template", "FILE", CB_FLAG_STR, &p->chat_template_file,
         .help = "a Jinja chat template to render messages with, instead of the\nmodel's own"},
        {"--reasoning-format", "FORMAT", CB_FLAG_ENUM, &p->reasoning_format, .choices = "separated|none|auto|deepseek",
         .values = REASONING,
         .help = "a template that thinks: separated (default; auto and deepseek\nare llama-server's names for it) "
                 "reads the reasoning apart\n(reasoning_content); none leaves it in the text"},
        {"--reasoning-budget", "N", CB_FLAG_I32, &p->reasoning_budget, -1, 1 << 24,
         .help = "reasoning tokens a chat may write before its end marker is\nforced (-1: no bound, the default; "
                 "0: none); a request may\nset its own (thinking_budget_tokens)"},
        {"--limit", "NAME=N", CB_FLAG_FN, p, .parse = parse_limit,
         .takes = "NAME=N, NAME one of grammar-nesting, grammar-elements, grammar-states, json-depth, "
                  "name-length, tools, messages, and N from 1",
         .help = "a bound on what one request may ask (repeatable; RELIABILITY.md):\ngrammar-nesting (512), "
                 "grammar-elements (1000000),\ngrammar-states (1024: parse states a grammar may hold,\nand its work "
                 "per token in proportion),\n"
                 "json-depth (128: schemas, tool parameters and arguments),\nname-length (256: schema keys), "
                 "tools (512),\nmessages (a chat's messages and tool calls: the context's\ntokens, since each "
                 "renders to one at least)"},
        {"--verbose", NULL, CB_FLAG_SET, &p->verbose, .help = "show llama.cpp's log"},
    };
    _Static_assert(sizeof(t) / sizeof(t[0]) + CB_TIER_FLAGS <= CB_ENGINE_FLAGS, "room for the engine flags");
    memcpy(room, t, sizeof(t));
    tier_flags(room + sizeof(t) / sizeof(t[0]), p);
    return (cb_flag_group){"engine", room, sizeof(t) / sizeof(t[0]) + CB_TIER_FLAGS};
}

cb_flag_group cb_flags_sampling(cb_flag *room, struct cobatch_sampling *s) {
    const cb_flag t[] = {
        {"--temp, --temperature", "T", CB_FLAG_F32, &s->temperature, 0, 100,
         .help =
             "temperature, 0 = greedy (run: default 0; serve: the default for\nrequests without one, 1 as OpenAI's)"},
        {"--top-k", "K", CB_FLAG_I32, &s->top_k, 0, 1 << 24, .help = "0 = off (default)"},
        {"--top-p", "P", CB_FLAG_F32, &s->top_p, 1e-9, 1, .help = "1 = off (default)"},
        {"--min-p", "P", CB_FLAG_F32, &s->min_p, 0, 1, .help = "0 = off (default)"},
        {"--repeat-penalty", "R", CB_FLAG_F32, &s->repetition_penalty, 1e-9, 100, .help = "1 = off (default)"},
        {"--presence-penalty", "P", CB_FLAG_F32, &s->presence_penalty, -2, 2, .help = "0 = off (default)"},
        {"--frequency-penalty", "F", CB_FLAG_F32, &s->frequency_penalty, -2, 2, .help = "0 = off (default)"},
        {"--repeat-last-n", "N", CB_FLAG_I32, &s->penalty_last_n, -1, 1 << 20,
         .help = "tokens the penalties look back on, default 64 (-1: all)"},
        {"--seed", "S", CB_FLAG_U32, &s->seed, 0, UINT32_MAX,
         .help = "seed for temperature > 0 (default: a fresh random one)"},
    };
    _Static_assert(sizeof(t) / sizeof(t[0]) <= CB_SAMPLING_FLAGS, "room for the sampling flags");
    memcpy(room, t, sizeof(t));
    return (cb_flag_group){"sampling", room, sizeof(t) / sizeof(t[0])};
}
