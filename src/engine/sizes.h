/* sizes.h — every size the engine needs, resolved from its parameters before anything is loaded:
 * pure, no llama.h, unit-tested (tests/unit/test_sizes.c). cobatch_engine_init checks and resolves
 * here, then loads. */
#ifndef CB_SIZES_H
#define CB_SIZES_H

#include <cobatch.h>
#include <stddef.h>

typedef enum { CB_CACHE_NONE = 0, CB_CACHE_RADIX, CB_CACHE_STREAMS } cb_cache_kind;

typedef struct {
    bool split;          /* llama.cpp's split KV layout (a stream per sequence) */
    cb_cache_kind cache; /* the prefix cache (core/cache.h) */
    int32_t holders;     /* sequence ids the cache holds beyond the running ones (radix: tree holders;
                            streams: holder streams, each adding a stream's cells to n_ctx) */
    int32_t n_ctx;       /* cells asked of llama.cpp */
    int32_t n_seq_max;   /* sequence ids asked of llama.cpp: max_num_seqs + holders */
    int32_t budget;      /* tokens of one step (= n_batch); grows to a sequence's cells without chunking */
    int32_t sched_seqs;  /* requests the scheduler runs at once (1 in sequential mode) */
    int64_t aging_us;    /* priority aging, 0 = none (FCFS or 0 ms) */
} cb_engine_sizes;

/* Checks p (every count positive, a step holding every sequence) and resolves. Returns 0, or -1
 * with a message naming the parameter. */
int cb_engine_resolve(const struct cobatch_engine_params *p, cb_engine_sizes *out, char *err, size_t errlen);

#endif
