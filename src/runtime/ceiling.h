/* ceiling.h — what llama_decode alone does on this machine, the yardstick for scheduling
 * efficiency (the way llama-batched-bench measures it): prompt tokens per second for one
 * sequence per chunk size, and decode tokens per second for B sequences decoding together. */
#ifndef CB_CEILING_H
#define CB_CEILING_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include <cobatch.h>

typedef struct cobatch_ceiling cb_ceiling;

typedef struct {
    const char *model_path;
    int32_t n_threads;
    bool split_kv, flash_attn;
    int32_t max_batch; /* largest decode batch to measure (max_num_seqs) */
    int32_t context;   /* tokens of context per decoding sequence */
} cb_ceiling_params;

/* Measures the ceiling (a few seconds to tens of seconds). Returns 0, or -1 with a message. */
int cb_ceiling_measure(const cb_ceiling_params *p, cb_ceiling *out, char *err, size_t errlen);

#endif
