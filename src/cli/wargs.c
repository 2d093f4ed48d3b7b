#include "wargs.h"
#include "../bench/prompts.h"
#include "args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cb_wargs_init(cb_wargs *a) {
    memset(a, 0, sizeof(*a));
    a->workload = "mixed";
    a->burstiness = 1;
}

cb_flag_group cb_wargs_flags(cb_flag *room, cb_wargs *a) {
    static char names[256];
    snprintf(names, sizeof(names), "%s (default mixed)", cb_workload_names());
    const cb_flag t[] = {
        {"--workload", "NAME", CB_FLAG_STR, &a->workload, .help = names},
        {"--num-prompts", "N", CB_FLAG_INT, &a->o.num_prompts, 1, 1000000,
         .help = "requests (default: the workload's own count)"},
        {"--seed", "N", CB_FLAG_U64, &a->o.seed, 0, 9e15, .help = "workload seed (default 0)"},
        {"--random-input-len", "N", CB_FLAG_I32, &a->o.random_input_len, 1, 1 << 20, .help = "random: prompt tokens"},
        {"--random-output-len", "N", CB_FLAG_I32, &a->o.random_output_len, 1, 1 << 20, .help = "random: output tokens"},
        {"--random-range-ratio", "R", CB_FLAG_F64, &a->o.random_range_ratio, 0, 0.99,
         .help = "random: lengths vary by this share either way"},
        {"--prefix-len", "N", CB_FLAG_I32, &a->o.prefix_len, 1, 1 << 20,
         .help = "shared-prefix: default 1000; multi-prefix: each group's\ndocument, default 1000"},
        {"--distinct-len", "N", CB_FLAG_I32, &a->o.distinct_len, 1, 1 << 20,
         .help = "shared-prefix, multi-prefix: default 100"},
        {"--context-len", "N", CB_FLAG_I32, &a->o.context_len, 1, 1 << 20,
         .help = "long-context: each prompt's tokens, default 4096"},
        {"--output-len", "N", CB_FLAG_I32, &a->o.output_len, 1, 1 << 20,
         .help = "shared-prefix, multi-prefix: default 50; sessions: default 32;\nlong-context: default 128"},
        {"--sharing-degree", "S", CB_FLAG_I32, &a->o.sharing_degree, 1, 1 << 20,
         .help = "shared-prefix: requests per prefix; multi-prefix: per document;\ndefault 4"},
        {"--sessions", "S", CB_FLAG_I32, &a->o.sessions, 1, 1 << 16, .help = "sessions: conversations, default 32"},
        {"--turns", "T", CB_FLAG_I32, &a->o.turns, 1, 1 << 10, .help = "sessions: turns of each, default 4"},
        {"--system-len", "N", CB_FLAG_I32, &a->o.system_len, 1, 1 << 20,
         .help = "sessions, multi-prefix: the shared system prompt's tokens,\ndefault 470"},
        {"--task-len", "N", CB_FLAG_I32, &a->o.task_len, 1, 1 << 20,
         .help = "sessions: the first user message's tokens, default 90"},
        {"--turn-len", "N", CB_FLAG_I32, &a->o.turn_len, 1, 1 << 20,
         .help = "sessions: each later user message's tokens, default 50\n(--output-len: answer tokens, default 32)"},
        {"--edit-lines", "N", CB_FLAG_I32, &a->o.edit_lines, 1, 1 << 16,
         .help = "edit: lines of each file, default 40"},
        {"--think-ms", "MS", CB_FLAG_F64, &a->think_ms, 0, 1e7,
         .help = "sessions: from an answer to the next turn (default 0)"},
        {"--workload-file", "FILE", CB_FLAG_STR, &a->file,
         .help = "JSONL: {\"prompt\": text | \"prompt_tokens\": [ids], \"max_tokens\",\n\"arrival_s\", "
                 "\"priority\"} per line"},
        {"--request-rate", "R", CB_FLAG_F64, &a->rate, 0, 1e6, .help = "requests/s, open loop (default: all at once)"},
        {"--burstiness", "B", CB_FLAG_F64, &a->burstiness, 1e-3, 1e3,
         .help = "gamma shape of inter-arrival times (default 1 = Poisson)"},
        {"--max-concurrency", "N", CB_FLAG_INT, &a->concurrency, 1, 1 << 20,
         .help = "at most N requests in flight (closed loop)"},
    };
    _Static_assert(sizeof(t) / sizeof(t[0]) <= CB_WARGS_FLAGS, "room for the workload flags");
    memcpy(room, t, sizeof(t));
    return (cb_flag_group){"workload and arrivals", room, sizeof(t) / sizeof(t[0])};
}

/* The tokens as text (malloc'd), or NULL. */
static char *detokenized(cobatch_engine *e, const int32_t *tokens, int32_t n) {
    int32_t need = cobatch_detokenize(e, tokens, n, NULL, 0);
    char *t = need >= 0 ? malloc((size_t)need + 1) : NULL;
    if (t && cobatch_detokenize(e, tokens, n, t, need) != need) {
        free(t);
        return NULL;
    }
    if (t) t[need] = '\0';
    return t;
}

int cb_wargs_build(const cb_wargs *a, const struct cobatch_engine_params *ep, cb_workload *w, char *model_name,
                   size_t name_len, char *err, size_t errlen) {
    struct cobatch_engine_params tp = *ep; /* a small engine: only its tokenizer is used */
    tp.n_ctx = 256;
    tp.max_num_seqs = 1;
    tp.prefill_chunk = 256;
    tp.max_num_batched_tokens = 256;
    tp.kv_layout = COBATCH_KV_UNIFIED;
    tp.cache_ram = -1; /* (none in the unified layout) */
    tp.swap_space = 0;
    cobatch_engine *e = cobatch_engine_init(&tp, err, errlen);
    if (!e) return -1;
    snprintf(model_name, name_len, "%s", cobatch_model_name(e));
    bool file_arrivals = false;
    cb_workload_opts o = a->o;
    o.think_s = a->think_ms / 1000;
    o.chat_fn = cb_prompt_chat;
    o.chat_ctx = e;
    int rc = a->file ? cb_workload_load_jsonl(a->file, cb_prompt_tokenize, e, w, &file_arrivals, err, errlen)
                     : cb_workload_make(a->workload, &o, cb_prompt_make, e, w, err, errlen);
    if (rc == 0 && a->text && w->n_system > 0 && !(w->system_text = detokenized(e, w->system_tokens, w->n_system))) {
        snprintf(err, errlen, "the system prompt could not be turned into text");
        rc = -1;
    }
    for (int i = 0; rc == 0 && a->text && i < w->n; i++) { /* the tokens as text: a round trip of the tokenizer */
        cb_work_item *it = &w->items[i];
        if (!it->text && !(it->text = detokenized(e, it->tokens, it->n_in))) {
            snprintf(err, errlen, "request %d: its prompt could not be turned into text", i + 1);
            rc = -1;
        }
    }
    cobatch_engine_free(e);
    if (rc != 0) {
        if (w->items) cb_workload_free(w);
        return -1;
    }
    if (!file_arrivals || a->rate > 0)
        cb_workload_set_arrivals(w, a->rate, a->burstiness, a->o.seed);
    else
        cb_workload_sort_by_arrival(w); /* the client submits in this order */
    return 0;
}
