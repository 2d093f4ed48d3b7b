/* ceiling.h — what llama_decode alone does on this machine, the yardstick for scheduling
 * efficiency (the way llama-batched-bench measures it): prompt tokens per second for one
 * sequence per chunk size, and decode tokens per second for B sequences decoding together. */
#ifndef CB_CEILING_H
#define CB_CEILING_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#define CB_CEIL_MAX 8
typedef struct {
    int32_t chunk[CB_CEIL_MAX];
    double prefill_tps[CB_CEIL_MAX]; /* prompt tok/s when one sequence's chunk of chunk[i] is a step */
    int n_chunk;
    int32_t batch[CB_CEIL_MAX];
    double decode_tps[CB_CEIL_MAX]; /* tok/s when batch[i] sequences decode one token per step */
    int n_batch;
    int32_t context; /* tokens of context each decoding sequence holds */
    /* what a prompt token costs more per token of context before it, in seconds (attention: a chunk
     * at 4,096 tokens costs twice one at 0 on a 2-core host), fitted over the chunks that fill a
     * sequence to `context`; 0 when that is under four chunks of 64 */
    double prefill_growth;
    /* speculation's cost: a step where each of batch[i] sequences checks verify_k drafts (1 + verify_k
     * rows, logits on every row) takes verify_ratio[i] x its one-row step (logits on every row too),
     * one where only one of them does verify_one_ratio[i] x; 0 when not measured */
    int32_t verify_k;
    double verify_ratio[CB_CEIL_MAX], verify_one_ratio[CB_CEIL_MAX];
    char weight_bufts[160]; /* the buffer types the weights were loaded into (cb_model.weight_bufts) */
} cb_ceiling;

typedef struct {
    const char *model_path;
    int32_t n_threads;
    bool split_kv, flash_attn;
    int32_t max_batch;  /* largest decode batch to measure (max_num_seqs) */
    int32_t context;    /* tokens of context per decoding sequence */
    const char *rpc;    /* the engine's RPC servers (its layers run there), or NULL */
    int repack;         /* the engine's CPU weight layouts (enum cobatch_repack) */
    int type_k, type_v; /* the engine's KV cache types (enum cobatch_kv_type) */
    int32_t verify_k;   /* also time steps of 1 + verify_k rows a sequence (0: not; at most 32) */
} cb_ceiling_params;

/* Measures the ceiling (a few seconds to tens of seconds) on the caller's thread. Returns 0, or -1
 * with a message. */
int cb_ceiling_measure(const cb_ceiling_params *p, cb_ceiling *out, char *err, size_t errlen);

/* The same on a thread of its own that then exits (ggml's OpenMP team belongs to the thread that
 * computes). The front end fills p from the engine's resolved parameters. */
int cb_ceiling_measure_apart(const cb_ceiling_params *p, cb_ceiling *out, char *err, size_t errlen);

/* Best prompt tok/s over the chunks (at no context); decode tok/s at batch b (interpolated, clamped). */
double cb_ceiling_prefill(const cb_ceiling *c);
/* Seconds one sequence's prompt tokens at positions [from, to) take: each 1 / best prompt tok/s
 * plus prefill_growth x its position. */
double cb_ceiling_prompt_seconds(const cb_ceiling *c, int64_t from, int64_t to);
double cb_ceiling_decode(const cb_ceiling *c, int32_t b);

#endif
