/* sizes.h — every size the engine needs, resolved from its parameters before anything is loaded:
 * pure, no llama.h, unit-tested (tests/unit/test_sizes.c). cobatch_engine_init checks and resolves
 * here, then loads. */
#ifndef CB_SIZES_H
#define CB_SIZES_H

#include <cobatch.h>
#include <stddef.h>

typedef enum { CB_CACHE_NONE = 0, CB_CACHE_RADIX, CB_CACHE_STREAMS } cb_cache_kind;

typedef struct {
    bool split;             /* llama.cpp's split KV layout (a stream per sequence) */
    cb_cache_kind cache;    /* the prefix cache (core/cache.h) */
    int32_t holders;        /* sequence ids the cache holds beyond the running ones (radix: tree holders;
                               streams: holder streams, each adding a stream's cells to n_ctx) */
    int32_t n_ctx;          /* cells asked of llama.cpp */
    int32_t n_seq_max;      /* sequence ids asked of llama.cpp: max_num_seqs + holders */
    int32_t budget;         /* tokens of one step; grows to a sequence's cells without chunking */
    int32_t prefill_budget; /* tokens of a step nobody decodes in, >= budget (= n_batch) */
    int32_t sched_seqs;     /* requests the scheduler runs at once (1 in sequential mode) */
    int64_t aging_us;       /* priority aging, 0 = none (FCFS or 0 ms) */
} cb_engine_sizes;

/* Checks p (every count positive, a step holding every sequence) and resolves. Returns 0, or -1
 * with a message naming the parameter. */
int cb_engine_resolve(const struct cobatch_engine_params *p, cb_engine_sizes *out, char *err, size_t errlen);

/* The split layout's device KV by default: running and holder streams within an eighth of the
 * host's memory, at most 8 GiB (cb_default_kv_bytes; 0 when mem_bytes is unknown). */
int64_t cb_default_kv_bytes(int64_t mem_bytes);

/* A running stream's cells when the operator names no size (no n_ctx, no max_model_len): the
 * largest of 4096 and 2048, not past the trained context (n_ctx_train, 0 = unknown), at which the
 * running streams and a quarter more as holders fit the default KV bytes at cell_bytes a cell; else
 * 1024. 4096 holds an agent's first request (Claude Code's is ~4,000 tokens) in a stream: sessions
 * then run max_num_seqs at once, not the long lane's 4. */
int32_t cb_default_stream_cells(int32_t max_num_seqs, int32_t n_ctx_train, double cell_bytes, int64_t mem_bytes);

/* The split layout's holder streams when the operator names none: twice the running streams, so
 * that agent sessions (more conversations than run at once, each coming back with its history)
 * find theirs kept, within what the running streams leave of the default KV bytes at cell_bytes a
 * cell and stream_cells cells a stream; never fewer than a quarter of the running streams (the
 * default when cell_bytes or mem_bytes is 0: unknown). */
int32_t cb_default_cache_streams(int32_t max_num_seqs, int32_t stream_cells, double cell_bytes, int64_t mem_bytes);

/* The prefix cache's host tier by default (cache_ram -1): an eighth of the host's memory, at most
 * 8 GiB (0 when mem_bytes is unknown). */
int64_t cb_default_cache_ram(int64_t mem_bytes);

#endif
