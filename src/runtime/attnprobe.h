/* attnprobe.h — times attention paths on this host's CPU kernels: ggml's flash-attention op, or the
 * plain path llama.cpp builds without it (K x Q, a masked softmax, V x KQ with V stored
 * transposed), in the shapes of a split-layout step (one stream per sequence), with the cache's
 * element types. Only attention is timed: the rest of a step is the same on every path.
 *
 * A decode step reads every layer's cells once, so its time is set by memory as much as by
 * arithmetic: the probe cycles over enough layers' tensors (up to 64 MB, at most the model's
 * layers) that they do not stay in the CPU's caches, and scales the time to the model's layers. A
 * prompt chunk's rows reuse the cells they read: one layer, scaled. Runs on a thread of its own
 * that exits (ggml's OpenMP team belongs to the thread that computes: ceiling.c). */
#ifndef CB_ATTNPROBE_H
#define CB_ATTNPROBE_H

#include "../core/attn.h"
#include "model.h"

#include <stdint.h>

/* n_seqs streams of n_rows query rows each (1: decode; a prompt chunk's rows, causal), every stream
 * holding n_ctx cells. */
typedef struct {
    int32_t n_ctx, n_seqs, n_rows;
} cb_attn_point;

/* Times each path at each point into ms (n_paths x n_pts, path-major): the step's attention over
 * the model's layers in milliseconds, the fastest of three runs (one when a run is long, up to ten
 * when runs are short); -1 where it could not run
 * (out of memory). again (n_pts) receives the first path timed once more after all the others: a
 * host whose load changed meanwhile shows there (cb_attn_steady). n_threads 0 = the cores. Returns
 * 0, or -1 when no thread could be started. */
int cb_attn_probe(const cb_model_shape *s, int n_threads, const cb_attn_path *paths, int n_paths,
                  const cb_attn_point *pts, int n_pts, double *ms, double *again);

/* ggml's build into out (n bytes): its commit, and the compiler flags beyond its tree's own. Times
 * from another build are not these. */
void cb_attn_probe_build(char *out, size_t n);

/* The bytes one stream's cells of one layer take at a point's context for K and V of these types
 * (what the probe allocates a layer and a sequence). */
double cb_attn_probe_bytes(const cb_model_shape *s, int type_k, int type_v, int32_t n_ctx);

#endif
