/* attn.h — which attention path the engine runs (flash attention on or off, the KV cache's element
 * types), chosen from measurements. Pure logic, no llama.h: runtime/attnprobe.h times the
 * candidates on this host's CPU kernels, engine/attn.c caches and applies the choice.
 *
 * Why measured: the fastest path differs by CPU and by context. On an Intel Xeon flash attention
 * over bf16 decodes as fast as over f16 at 4k tokens but computes a prompt chunk there 6x slower
 * (with llama.cpp's AVX512-FP16 kernels, which scripts/llama.sh now leaves out, f16 decoded 3x
 * slower than bf16); on an AMD AVX2 host bf16 prefills 1.8x slower than f16 and flash attention
 * off decodes 1.2-1.8x faster at 1-4k tokens (BENCHMARKS.md, 'The attention path'). A fixed
 * default cannot be right everywhere.
 *
 * Candidates: what the operator's flags leave open. An `auto` type tries f16, bf16 and, without
 * flash attention, f32 (llama.cpp casts an f32 cache to f16 for every flash-attention step); the
 * quantized types only when named (their drift is the operator's call). An `auto` flash attention
 * tries on and off, except where off breaks something: a quantized V (refused without it), the
 * unified layout (flash attention skips other sequences' masked cells), and exact cache hits (a
 * cache hit's answer is the cold prompt's bit for bit only with flash attention on: the plain
 * kernels' sums depend on the rows computed together). Those are still measured, not eligible:
 * what the promise costs is reported. */
#ifndef CB_ATTN_H
#define CB_ATTN_H

#include <stdbool.h>
#include <stddef.h>

#define CB_ATTN_AUTO (-1)    /* a flash_attn or type the engine chooses */
#define CB_ATTN_MAX_PATHS 12 /* candidates at most (2 x 3 x 2 would be the most the rules allow) */

typedef struct {
    bool fa;
    int type_k, type_v;  /* enum cobatch_kv_type */
    bool eligible;       /* may be chosen (false: measured for what a promise costs) */
    const char *why_not; /* ineligible: the promise ("exact cache hits") */
} cb_attn_path;

typedef struct {
    int fa;             /* 1 on, 0 off, CB_ATTN_AUTO */
    int type_k, type_v; /* an enum cobatch_kv_type, or CB_ATTN_AUTO */
    bool unified;       /* the unified KV layout */
    bool exact_hits;    /* split layout with prefix caching and exact hits */
} cb_attn_ask;

/* The candidate paths for ask into out (at most CB_ATTN_MAX_PATHS); the first is the reference
 * (flash attention on where allowed, f16 where the type is open): what runs when nothing is
 * measured. Returns the count (>= 1). */
int cb_attn_candidates(const cb_attn_ask *ask, cb_attn_path *out);

/* Whether the choice needs measuring: more than one eligible candidate. */
bool cb_attn_open(const cb_attn_path *paths, int n);

/* The eligible path with the lowest score: the geometric mean over the n_points measured shapes of
 * its time over the best time at that shape (1.0 = fastest everywhere). t holds n x n_points
 * milliseconds, path-major; a time <= 0 means the path failed there (it is not chosen). The
 * reference stays unless another scores below (1 - margin) x its score: noise does not flip the
 * choice. scores (n, may be NULL) receives every path's score (0 for a failed one). Returns the
 * index, 0 when nothing else qualifies. */
int cb_attn_choose(const cb_attn_path *paths, int n, const double *t, int n_points, double margin, double *scores);

/* Whether a probe ran on a steady host: the first path's times (first, n) and its times again at
 * the end (again) within a factor tol of each other wherever both ran and one took min_ms at least
 * (shorter times are the timer's and the scheduler's jitter on a shared host). A probe on a host
 * whose load changed meanwhile chooses for this start only and is not kept. */
bool cb_attn_steady(const double *first, const double *again, int n, double tol, double min_ms);

#endif
