#include "ceiling.h"
#include "../util/util.h"
#include "model.h"

#include <llama.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* One llama_decode of `first` tokens for sequence s0 and per_seq for each of sequences (s0, s0 +
 * n_seqs), each from position pos, logits on each sequence's last row (every row: all_logits);
 * returns its seconds, or -1. */
static double timed_decode_rows(cb_model *m, struct llama_batch *b, int32_t s0, int32_t n_seqs, int32_t first,
                                int32_t per_seq, int32_t pos, bool all_logits) {
    b->n_tokens = 0;
    for (int32_t s = s0; s < s0 + n_seqs; s++) {
        int32_t rows = s == s0 ? first : per_seq;
        for (int32_t k = 0; k < rows; k++) {
            int32_t row = b->n_tokens++;
            b->token[row] = (100 + (row * 7919) % 1000) % m->n_vocab; /* arbitrary ordinary tokens */
            b->pos[row] = pos + k;
            b->n_seq_id[row] = 1;
            b->seq_id[row][0] = s;
            b->logits[row] = all_logits || k == rows - 1;
        }
    }
    int64_t t0 = cb_time_us();
    if (llama_decode(m->ctx, *b) != 0) return -1;
    llama_synchronize(m->ctx);
    return (double)(cb_time_us() - t0) / 1e6;
}

static double timed_decode(cb_model *m, struct llama_batch *b, int32_t s0, int32_t n_seqs, int32_t per_seq,
                           int32_t pos) {
    return timed_decode_rows(m, b, s0, n_seqs, per_seq, per_seq, pos, false);
}

/* The mean seconds of `steps` steps at position pos where sequence 0 has `first` rows and sequences
 * [1, n_seqs) have per_seq, logits on every row, each step's cells taken back after it (every step
 * sees the same context); -1 on a failed decode. */
static double timed_verify(cb_model *m, struct llama_batch *b, int32_t n_seqs, int32_t first, int32_t per_seq,
                           int32_t pos, int steps) {
    llama_memory_t mem = llama_get_memory(m->ctx);
    double total = 0;
    for (int s = 0; s < steps; s++) {
        double t = timed_decode_rows(m, b, 0, n_seqs, first, per_seq, pos, true);
        if (t < 0) return -1;
        total += t;
        for (int32_t sq = 0; sq < n_seqs; sq++)
            llama_memory_seq_rm(mem, sq, pos, -1);
    }
    return total / steps;
}

int cb_ceiling_measure(const cb_ceiling_params *p, cb_ceiling *c, char *err, size_t errlen) {
    memset(c, 0, sizeof(*c));
    int32_t maxb = p->max_batch < 1 ? 1 : p->max_batch;
    int32_t ctxlen = p->context < 16 ? 16 : p->context;
    int32_t vk = p->verify_k < 0 ? 0 : p->verify_k > 32 ? 32 : p->verify_k;
    const int vsteps = 4; /* verify steps timed per batch size, per kind */
    static const int32_t chunks[] = {32, 64, 128, 256, 512};
    /* split layout: every sequence has n_ctx / maxb cells and the largest prompt chunk runs in one */
    const int32_t max_chunk = chunks[sizeof(chunks) / sizeof(chunks[0]) - 1];
    int32_t per_seq = ctxlen + 64 + vk;
    if (p->split_kv && per_seq < max_chunk + 64) per_seq = max_chunk + 64;
    cb_model m;
    cb_model_params mp = {.path = p->model_path,
                          .n_ctx = (maxb * per_seq > 1024 ? maxb * per_seq : 1024),
                          .n_threads = p->n_threads,
                          .n_seq_max = maxb,
                          .n_batch = 512,
                          .n_outputs_max = maxb * (1 + vk),
                          .split_kv = p->split_kv,
                          .flash_attn = p->flash_attn,
                          .type_k = (enum cobatch_kv_type)p->type_k,
                          .type_v = (enum cobatch_kv_type)p->type_v,
                          .rpc = p->rpc,
                          .repack = (cb_repack_mode)p->repack};
    if (cb_model_load(&m, &mp, err, errlen) != 0) return -1;
    memcpy(c->weight_bufts, m.weight_bufts, sizeof(c->weight_bufts));
    struct llama_batch b = llama_batch_init(mp.n_batch, 0, 1);
    llama_memory_t mem = llama_get_memory(m.ctx);
    int rc = -1;
    timed_decode(&m, &b, 0, 1, 32, 0); /* warm-up */
    llama_memory_clear(mem, true);
    for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
        double best = 0;
        for (int rep = 0; rep < 2; rep++) { /* best of two: the machine is shared */
            llama_memory_clear(mem, true);
            double t = timed_decode(&m, &b, 0, 1, chunks[i], 0);
            if (t <= 0) goto done;
            if (chunks[i] / t > best) best = chunks[i] / t;
        }
        c->chunk[c->n_chunk] = chunks[i];
        c->prefill_tps[c->n_chunk++] = best;
    }
    /* every sequence holds ctxlen tokens of its own before a decode step is timed. Split layout: one
     * sequence is prefilled (in chunks of n_batch) and its stream copied to the others (a buffer copy,
     * no compute), so an agent's 16k context costs one prefill, not one per sequence and batch size.
     * Unified layout: the copy would share cells (a step would read ctxlen cells, not maxb x ctxlen),
     * so every sequence is prefilled. */
    llama_memory_clear(mem, true);
    /* the first sequence's chunks are timed: a prompt token's cost by the context before it (a least
     * squares slope of seconds a token against the chunk's middle position; chunks of a quarter of
     * the context at least four times, 64 to n_batch tokens) */
    int32_t fill = ctxlen / 4 < 64 ? 64 : ctxlen / 4 > mp.n_batch ? mp.n_batch : ctxlen / 4;
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    int fitted = 0;
    for (int32_t sq = 0; sq < (p->split_kv ? 1 : maxb); sq++)
        for (int32_t pos = 0; pos < ctxlen; pos += fill) {
            int32_t k = ctxlen - pos < fill ? ctxlen - pos : fill;
            double t = timed_decode(&m, &b, sq, 1, k, pos);
            if (t < 0) goto done;
            if (sq > 0 || k < fill) continue;
            double x = pos + k / 2.0, y = t / k;
            sx += x, sy += y, sxx += x * x, sxy += x * y, fitted++;
        }
    if (fitted >= 4 && sxx * fitted - sx * sx > 0) {
        double slope = (sxy * fitted - sx * sy) / (sxx * fitted - sx * sx);
        c->prefill_growth = slope > 0 ? slope : 0;
    }
    for (int32_t sq = 1; p->split_kv && sq < maxb; sq++)
        llama_memory_seq_cp(mem, 0, sq, -1, -1);
    for (int32_t bsz = 1; c->n_batch < CB_CEIL_MAX; bsz *= 2) {
        if (bsz > maxb) bsz = maxb;
        const int steps = 8;
        double total = 0;
        for (int s = 0; s < steps; s++) {
            double t = timed_decode(&m, &b, 0, bsz, 1, ctxlen + s);
            if (t < 0) goto done;
            total += t;
        }
        for (int32_t sq = 0; sq < bsz; sq++) /* back to ctxlen tokens for the next batch size */
            llama_memory_seq_rm(mem, sq, ctxlen, -1);
        /* every sequence checks vk drafts; then only the first does, beside one-row sequences (the
         * split layout runs rows of unequal counts as separate passes over the weights) */
        if (vk > 0 && bsz * (1 + vk) <= mp.n_batch) {
            double one = timed_verify(&m, &b, bsz, 1, 1, ctxlen, vsteps);
            double all = timed_verify(&m, &b, bsz, 1 + vk, 1 + vk, ctxlen, vsteps);
            double first = timed_verify(&m, &b, bsz, 1 + vk, 1, ctxlen, vsteps);
            if (one <= 0 || all < 0 || first < 0) goto done;
            c->verify_ratio[c->n_batch] = all / one;
            c->verify_one_ratio[c->n_batch] = first / one;
        }
        c->batch[c->n_batch] = bsz;
        c->decode_tps[c->n_batch++] = bsz * steps / total;
        if (bsz == maxb) break;
    }
    c->context = ctxlen;
    c->verify_k = vk;
    rc = 0;
done:
    if (rc != 0) cb_set_err(err, errlen, "llama_decode failed while measuring the ceiling");
    llama_batch_free(b);
    cb_model_free(&m);
    return rc;
}

double cb_ceiling_prefill(const cb_ceiling *c) {
    double best = 0;
    for (int i = 0; i < c->n_chunk; i++)
        if (c->prefill_tps[i] > best) best = c->prefill_tps[i];
    return best;
}

double cb_ceiling_prompt_seconds(const cb_ceiling *c, int64_t from, int64_t to) {
    double pf = cb_ceiling_prefill(c);
    if (pf <= 0 || to <= from) return 0;
    double n = (double)(to - from), mid = (double)(from + to) / 2; /* the growth is linear: its mean */
    return n / pf + c->prefill_growth * n * mid;
}

double cb_ceiling_decode(const cb_ceiling *c, int32_t b) {
    if (c->n_batch == 0) return 0;
    if (b <= c->batch[0]) return c->decode_tps[0];
    for (int i = 1; i < c->n_batch; i++) {
        if (b <= c->batch[i]) {
            double f = (double)(b - c->batch[i - 1]) / (c->batch[i] - c->batch[i - 1]);
            return c->decode_tps[i - 1] + f * (c->decode_tps[i] - c->decode_tps[i - 1]);
        }
    }
    return c->decode_tps[c->n_batch - 1];
}

typedef struct {
    cb_ceiling_params p;
    cb_ceiling *out;
    char *err;
    size_t errlen;
    int rc;
} ceiling_job;

static void *ceiling_thread(void *arg) {
    ceiling_job *j = arg;
    j->rc = cb_ceiling_measure(&j->p, j->out, j->err, j->errlen);
    return NULL;
}

/* Runs on a thread of its own that then exits: ggml's OpenMP team belongs to the thread that
 * computes, and a team left behind on the caller's thread makes libgomp count more busy threads
 * than cores and throttle its spinning, which measurably slowed every later small step (ITL of
 * sequential runs 6.5 -> 11 ms on 2 cores). */
int cb_ceiling_measure_apart(const cb_ceiling_params *p, cb_ceiling *out, char *err, size_t errlen) {
    ceiling_job j = {.p = *p, .out = out, .err = err, .errlen = errlen, .rc = -1};
    pthread_t t;
    if (pthread_create(&t, NULL, ceiling_thread, &j) != 0) {
        cb_set_err(err, errlen, "cannot start a thread");
        return -1;
    }
    pthread_join(t, NULL);
    return j.rc;
}
