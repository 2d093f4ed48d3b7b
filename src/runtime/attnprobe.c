#include "attnprobe.h"

#include <ggml-cpu.h>
#include <ggml.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROBE_HOT_BYTES (64.0 * 1024 * 1024) /* decode: at least this much of K and V cycled through */
#define PROBE_MAX_LAYERS 64
#define PROBE_RUN_MS 400.0 /* a path's repeats at a point stop after this much time (one at least) */
#define PROBE_MIN_MS 30.0  /* ... and go on past three (up to ten) until this much: short runs are noisy */

static enum ggml_type ggml_kv(int t) {
    static const enum ggml_type types[] = {GGML_TYPE_F16,    GGML_TYPE_F32,  GGML_TYPE_BF16,
                                           GGML_TYPE_Q8_0,   GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
                                           GGML_TYPE_IQ4_NL, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1};
    return t >= 0 && t < (int)(sizeof(types) / sizeof(types[0])) ? types[t] : GGML_TYPE_F16;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

#ifndef COBATCH_LLAMA_FLAGS
#define COBATCH_LLAMA_FLAGS ""
#endif

void cb_attn_probe_build(char *out, size_t n) {
    snprintf(out, n, "%s%s%s", ggml_commit(), COBATCH_LLAMA_FLAGS[0] ? " " : "", COBATCH_LLAMA_FLAGS);
}

double cb_attn_probe_bytes(const cb_model_shape *s, int type_k, int type_v, int32_t n_ctx) {
    return (double)ggml_row_size(ggml_kv(type_k), (int64_t)s->head_k * s->n_head_kv) * n_ctx +
           (double)ggml_row_size(ggml_kv(type_v), (int64_t)s->head_v * s->n_head_kv) * n_ctx;
}

/* The mask of n_rows rows over n_ctx cells: row i is the cell at n_ctx - n_rows + i and sees the
 * cells up to it (decode: everything). */
static void fill_mask(struct ggml_tensor *m, const cb_attn_point *pt) {
    for (int64_t s = 0; s < m->ne[3]; s++)
        for (int64_t i = 0; i < m->ne[1]; i++)
            for (int64_t j = 0; j < m->ne[0]; j++) {
                float v = j <= pt->n_ctx - pt->n_rows + i ? 0.0f : -INFINITY;
                char *at = (char *)m->data + s * m->nb[3] + i * m->nb[1] + j * m->nb[0];
                if (m->type == GGML_TYPE_F16)
                    *(ggml_fp16_t *)at = ggml_fp32_to_fp16(v);
                else
                    *(float *)at = v;
            }
}

/* One layer's attention of path over its own K and V (as the cache lays them out: a row of a
 * cell's heads; V transposed without flash attention), q and mask shared by every layer. */
static struct ggml_tensor *layer_attn(struct ggml_context *ctx, const cb_model_shape *s, const cb_attn_path *path,
                                      const cb_attn_point *pt, struct ggml_tensor *q, struct ggml_tensor *mask) {
    struct ggml_tensor *k =
        ggml_new_tensor_4d(ctx, ggml_kv(path->type_k), s->head_k, s->n_head_kv, pt->n_ctx, pt->n_seqs);
    struct ggml_tensor *v =
        path->fa ? ggml_new_tensor_4d(ctx, ggml_kv(path->type_v), s->head_v, s->n_head_kv, pt->n_ctx, pt->n_seqs)
                 : ggml_new_tensor_4d(ctx, ggml_kv(path->type_v), pt->n_ctx, s->n_head_kv, s->head_v, pt->n_seqs);
    memset(k->data, 0, ggml_nbytes(k)); /* values do not change the time; zeros are valid in every type */
    memset(v->data, 0, ggml_nbytes(v));
    struct ggml_tensor *qp = ggml_permute(ctx, q, 0, 2, 1, 3), *kp = ggml_permute(ctx, k, 0, 2, 1, 3);
    struct ggml_tensor *vp = ggml_permute(ctx, v, 0, 2, 1, 3);
    float scale = 1.0f / sqrtf((float)s->head_k);
    if (path->fa) {
        if (kp->type == GGML_TYPE_F32) kp = ggml_cast(ctx, kp, GGML_TYPE_F16); /* as llama.cpp does */
        if (vp->type == GGML_TYPE_F32) vp = ggml_cast(ctx, vp, GGML_TYPE_F16);
        struct ggml_tensor *cur = ggml_flash_attn_ext(ctx, qp, kp, vp, mask, scale, 0.0f, 0.0f);
        ggml_prec_set_acc(cur, GGML_PREC_F32);
        return cur;
    }
    struct ggml_tensor *kq = ggml_mul_mat(ctx, kp, qp);
    ggml_prec_set_acc(kq, GGML_PREC_F32);
    kq = ggml_soft_max_ext(ctx, kq, mask, scale, 0.0f);
    struct ggml_tensor *kqv = ggml_permute(ctx, ggml_mul_mat(ctx, vp, kq), 0, 2, 1, 3);
    return ggml_cont_2d(ctx, kqv, kqv->ne[0] * kqv->ne[1], kqv->ne[2] * kqv->ne[3]);
}

/* The attention of path at pt over the model's layers in ms, or -1. */
static double time_point(const cb_model_shape *s, const cb_attn_path *path, const cb_attn_point *pt, int threads) {
    double layer = cb_attn_probe_bytes(s, path->type_k, path->type_v, pt->n_ctx) * pt->n_seqs;
    int layers = pt->n_rows > 1 ? 1 : (int)ceil(PROBE_HOT_BYTES / (layer > 1 ? layer : 1));
    if (layers > s->n_layer) layers = s->n_layer;
    if (layers > PROBE_MAX_LAYERS) layers = PROBE_MAX_LAYERS;
    if (layers < 1) layers = 1;
    double scores = (double)pt->n_ctx * pt->n_rows * s->n_head * pt->n_seqs * 4.0; /* one f32 KQ */
    double q_bytes = (double)s->head_k * s->n_head * pt->n_rows * pt->n_seqs * 4.0;
    double out = (double)s->head_v * s->n_head * pt->n_rows * pt->n_seqs * 4.0;
    double mask_bytes = (double)pt->n_ctx * pt->n_rows * pt->n_seqs * 4.0;
    double mem = 1.25 * (layers * (layer * 2.0 + scores * 3.0 + out * 3.0) + q_bytes + mask_bytes) +
                 ggml_tensor_overhead() * 16.0 * (layers + 2) + ggml_graph_overhead() + (16 << 20);
    if (mem > 4.0 * (1 << 30)) return -1;
    struct ggml_init_params ip = {.mem_size = (size_t)mem, .mem_buffer = NULL, .no_alloc = false};
    struct ggml_context *ctx = ggml_init(ip);
    if (!ctx) return -1;
    struct ggml_tensor *q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, s->head_k, s->n_head, pt->n_rows, pt->n_seqs);
    float *qd = q->data;
    for (int64_t i = 0; i < ggml_nelements(q); i++)
        qd[i] = (float)(i % 97) / 97.0f - 0.5f;
    struct ggml_tensor *mask =
        ggml_new_tensor_4d(ctx, path->fa ? GGML_TYPE_F16 : GGML_TYPE_F32, pt->n_ctx, pt->n_rows, 1, pt->n_seqs);
    fill_mask(mask, pt);
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    for (int l = 0; l < layers; l++)
        ggml_build_forward_expand(gf, layer_attn(ctx, s, path, pt, q, mask));
    double best = -1, spent = 0;
    if (ggml_graph_compute_with_ctx(ctx, gf, threads) == GGML_STATUS_SUCCESS) /* warm: work buffers, pages */
        for (int r = 0; r < 10 && (r == 0 || spent < PROBE_RUN_MS) && (r < 3 || spent < PROBE_MIN_MS); r++) {
            double t0 = now_ms();
            if (ggml_graph_compute_with_ctx(ctx, gf, threads) != GGML_STATUS_SUCCESS) break;
            double t = now_ms() - t0;
            spent += t;
            if (best < 0 || t < best) best = t;
        }
    ggml_free(ctx);
    return best < 0 ? -1 : best * s->n_layer / layers;
}

typedef struct {
    const cb_model_shape *s;
    int threads;
    const cb_attn_path *paths;
    int n_paths;
    const cb_attn_point *pts;
    int n_pts;
    double *ms, *again;
} probe_job;

static void *probe_thread(void *arg) {
    probe_job *j = arg;
    for (int p = 0; p < j->n_pts; p++) /* point-major: each point's paths close together in time */
        for (int i = 0; i < j->n_paths; i++)
            j->ms[i * j->n_pts + p] = time_point(j->s, &j->paths[i], &j->pts[p], j->threads);
    for (int p = 0; p < j->n_pts; p++)
        j->again[p] = time_point(j->s, &j->paths[0], &j->pts[p], j->threads);
    return NULL;
}

int cb_attn_probe(const cb_model_shape *s, int n_threads, const cb_attn_path *paths, int n_paths,
                  const cb_attn_point *pts, int n_pts, double *ms, double *again) {
    probe_job j = {.s = s,
                   .threads = n_threads > 0 ? n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN),
                   .paths = paths,
                   .n_paths = n_paths,
                   .pts = pts,
                   .n_pts = n_pts,
                   .ms = ms,
                   .again = again};
    pthread_t t;
    if (pthread_create(&t, NULL, probe_thread, &j) != 0) return -1;
    pthread_join(t, NULL);
    return 0;
}
