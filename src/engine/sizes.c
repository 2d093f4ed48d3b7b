#include "sizes.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* llama.cpp rounds a context to 256 cells. */
static int32_t pad256(int32_t n) { return (n + 255) / 256 * 256; }

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

int64_t cb_default_kv_bytes(int64_t mem_bytes) {
    int64_t cap = (int64_t)8 << 30, n = mem_bytes > 0 ? mem_bytes / 8 : 0;
    return n < cap ? n : cap;
}

int32_t cb_default_stream_cells(int32_t max_num_seqs, int32_t n_ctx_train, double cell_bytes, int64_t mem_bytes) {
    double budget = (double)cb_default_kv_bytes(mem_bytes);
    int32_t streams = max_num_seqs + (max_num_seqs + 3) / 4;
    static const int32_t sizes[] = {4096, 2048};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]) && max_num_seqs > 0 && cell_bytes > 0; i++)
        if ((n_ctx_train <= 0 || sizes[i] <= n_ctx_train) && streams * (double)sizes[i] * cell_bytes <= budget)
            return sizes[i];
    return 1024;
}

int32_t cb_default_cache_streams(int32_t max_num_seqs, int32_t stream_cells, double cell_bytes, int64_t mem_bytes) {
    int32_t least = (max_num_seqs + 3) / 4, most = 2 * max_num_seqs;
    if (cell_bytes <= 0 || mem_bytes <= 0 || stream_cells <= 0) return least;
    double stream = cell_bytes * stream_cells;
    double fit = ((double)cb_default_kv_bytes(mem_bytes) - max_num_seqs * stream) / stream;
    int32_t n = fit < most ? (int32_t)fit : most;
    return n > least ? n : least;
}

int cb_engine_resolve(const struct cobatch_engine_params *p, cb_engine_sizes *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    if (p->max_num_seqs <= 0 || p->max_model_len < 0 || p->max_num_batched_tokens <= 0 || p->prefill_chunk < 0 ||
        p->kv_reserve < 0 || p->max_queue <= 0)
        return fail(err, errlen,
                    "invalid engine parameters (max_num_seqs, max_num_batched_tokens, prefill_chunk, "
                    "kv_reserve and max_queue must be positive)");
    if (p->n_ctx < 0) return fail(err, errlen, "n_ctx must be 0 (derived) or positive (got %d)", p->n_ctx);
    if (p->prefill_step_tokens < 0 || p->prefill_step_tokens > (1 << 20))
        return fail(err, errlen, "prefill_step_tokens must be 0 (the step budget) or 1 to 1048576 (got %d)",
                    p->prefill_step_tokens);
    if (!(p->step_pacing == 0 || (p->step_pacing >= 0.05f && p->step_pacing <= 16)))
        return fail(err, errlen, "step_pacing must be 0 (off) or a share from 0.05 to 16 (got %g)", p->step_pacing);
    if (!(p->swap_space >= 0 && p->swap_space <= 1 << 20))
        return fail(err, errlen, "swap_space must be 0 (none) or a positive number of GiB (got %g)", p->swap_space);
    if (!(p->cache_ram == -1.0f || (p->cache_ram >= 0 && p->cache_ram <= 1 << 20)))
        return fail(err, errlen, "cache_ram must be -1 (default), 0 (none) or a positive number of GiB (got %g)",
                    p->cache_ram);
    if (p->cache_ram > 0 && (p->kv_layout != COBATCH_KV_SPLIT || !p->prefix_caching))
        return fail(err, errlen,
                    "cache_ram (the prefix cache's host-memory tier) needs the split KV layout with prefix caching");
    if (!(p->cache_disk_size > 0 && p->cache_disk_size <= 1 << 20))
        return fail(err, errlen, "cache_disk_size must be a positive number of GiB (got %g)", p->cache_disk_size);
    if (p->cache_disk && (!p->cache_disk[0] || p->cache_ram == 0))
        return fail(err, errlen, "cache_disk needs a folder and the host tier under it (cache_ram is 0)");
    if (p->spec < COBATCH_SPEC_OFF || p->spec > COBATCH_SPEC_NGRAM_OWN)
        return fail(err, errlen, "spec must be COBATCH_SPEC_OFF, COBATCH_SPEC_NGRAM or COBATCH_SPEC_NGRAM_OWN (got %d)",
                    p->spec);
    if (p->spec_max < 0 || p->spec_max > COBATCH_SPEC_MAX)
        return fail(err, errlen, "spec_max must be from 0 (default) to %d (got %d)", COBATCH_SPEC_MAX, p->spec_max);
    if (p->priority_aging_ms < 0)
        return fail(err, errlen, "priority_aging_ms must be 0 or positive (got %d)", p->priority_aging_ms);
    if (p->prefix_cache_max_idle < 0)
        return fail(err, errlen, "prefix_cache_max_idle must be 0 (no limit) or positive (got %d)",
                    p->prefix_cache_max_idle);
    if (p->max_num_batched_tokens < p->max_num_seqs)
        return fail(err, errlen, "max_num_batched_tokens (%d) must be at least max_num_seqs (%d)",
                    p->max_num_batched_tokens, p->max_num_seqs);
    bool split = p->kv_layout == COBATCH_KV_SPLIT;
    out->split = split;
    int32_t n_ctx = cobatch_params_n_ctx(p);

    /* The prefix cache holds cells under sequence ids of its own: llama.cpp allows LLAMA_MAX_SEQ
     * (256) ids, requests keep max_num_seqs of them. */
    int32_t holders = 0;
    if (p->prefix_caching && !split) holders = 2 * p->max_num_seqs < 32 ? 32 : 2 * p->max_num_seqs;
    if (p->prefix_caching && split) /* whole streams hold (streams.h) */
        holders = p->prefix_cache_streams >= 0 ? p->prefix_cache_streams : (p->max_num_seqs + 3) / 4;
    if (holders > 256 - p->max_num_seqs) holders = 256 - p->max_num_seqs;
    if (holders < 1) holders = 0;
    out->holders = holders;
    out->cache = split && p->prefix_caching ? CB_CACHE_STREAMS : holders > 0 ? CB_CACHE_RADIX : CB_CACHE_NONE;
    out->n_ctx = split && holders > 0 ? n_ctx / p->max_num_seqs * (p->max_num_seqs + holders) /* each adds a stream */
                                      : n_ctx;
    out->n_seq_max = p->max_num_seqs + holders;

    /* Without chunking a whole prompt must fit one step: the step grows to the sequence context. */
    out->budget = p->max_num_batched_tokens;
    int32_t ctx_seq = split ? pad256(n_ctx / p->max_num_seqs) : pad256(n_ctx);
    if (p->prefill_chunk == 0 && out->budget < ctx_seq) out->budget = ctx_seq;
    out->prefill_budget = p->prefill_step_tokens > out->budget ? p->prefill_step_tokens : out->budget;
    out->sched_seqs = p->mode == COBATCH_MODE_SEQUENTIAL ? 1 : p->max_num_seqs;
    out->aging_us = p->sched_policy == COBATCH_SCHED_PRIORITY ? (int64_t)p->priority_aging_ms * 1000 : 0;
    return 0;
}

int64_t cb_default_cache_ram(int64_t mem_bytes) { return cb_default_kv_bytes(mem_bytes); }
