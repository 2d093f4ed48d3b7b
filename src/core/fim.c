/* fim.c — a code-infill prompt (see fim.h). */
#include "fim.h"

#include <stdlib.h>
#include <string.h>

bool cb_fim_can(const cb_fim_vocab *v) { return v->pre >= 0 && v->suf >= 0 && v->mid >= 0; }

/* A token array being built; failed sticks. */
typedef struct {
    int32_t *t;
    int32_t n, cap;
    bool failed;
} toks;

static void put(toks *b, const int32_t *t, int32_t n) {
    if (b->failed || n <= 0) return;
    if (b->n + n > b->cap) {
        int32_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        int32_t *g = realloc(b->t, sizeof(int32_t) * (size_t)cap);
        if (!g) {
            b->failed = true;
            return;
        }
        b->t = g;
        b->cap = cap;
    }
    memcpy(b->t + b->n, t, sizeof(int32_t) * (size_t)n);
    b->n += n;
}

static void put1(toks *b, int32_t t) { put(b, &t, 1); }

static int32_t lesser(int32_t a, int32_t b) { return a < b ? a : b; }
static int32_t greater(int32_t a, int32_t b) { return a > b ? a : b; }

/* The extra context: the repository and its files (FIM_REP, FIM_SEP) or snippets after separators. */
static void extra_context(const cb_fim_vocab *v, const cb_fim_request *r, toks *x) {
    if (v->rep >= 0) {
        put1(x, v->rep);
        put(x, r->repo.t, r->repo.n);
    }
    for (int32_t i = 0; i < r->n_extra; i++) {
        if (v->sep >= 0) {
            put1(x, v->sep);
            put(x, r->files[i].t, r->files[i].n);
        } else {
            put(x, r->snippet.t, r->snippet.n);
        }
        put(x, r->texts[i].t, r->texts[i].n);
    }
    if (v->sep >= 0) {
        put1(x, v->sep);
        put(x, r->cur_file.t, r->cur_file.n);
    }
}

int32_t *cb_fim_assemble(const cb_fim_vocab *v, const cb_fim_request *r, int32_t *n) {
    if (!cb_fim_can(v)) return NULL;
    toks x = {0}, pre = {0}, suf = {0}, out = {0};
    extra_context(v, r, &x);
    int32_t take_pre = lesser(r->prefix.n, 3 * (r->n_batch / 4));
    int32_t take_suf = lesser(r->suffix.n, greater(0, r->n_batch / 4 - (2 + r->prompt.n)));
    int32_t n_predict = r->n_predict > 0 ? r->n_predict : 0;
    int32_t take_x = lesser(greater(0, r->n_ctx - r->n_batch - 2 * n_predict), x.n);
    put1(&pre, v->pre);
    if (take_pre > 0) put(&pre, r->prefix.t + (r->prefix.n - take_pre), take_pre); /* the end: before the cursor */
    put(&pre, r->prompt.t, r->prompt.n);
    put1(&suf, v->suf);
    put(&suf, r->suffix.t, take_suf); /* the suffix's start: what comes right after */
    if (take_x > 0) put(&out, x.t + (x.n - take_x), take_x);
    if (v->add_bos && v->bos >= 0) put1(&out, v->bos);
    const toks *first = v->spm ? &suf : &pre, *second = v->spm ? &pre : &suf;
    put(&out, first->t, first->n);
    put(&out, second->t, second->n);
    put1(&out, v->mid);
    bool failed = x.failed || pre.failed || suf.failed || out.failed;
    free(x.t);
    free(pre.t);
    free(suf.t);
    if (failed) {
        free(out.t);
        return NULL;
    }
    *n = out.n;
    return out.t;
}
