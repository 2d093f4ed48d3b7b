/* embd.c — the embedding context (embd.h). */
#include "embd.h"
#include "../util/util.h"

#include <llama.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The pooling the model's GGUF names ("<arch>.pooling_type", llama.cpp's enum as a number): MEAN,
 * CLS or LAST; MODEL when it names none or none (a generative model); -1 for rank (a reranker). */
static int model_pooling(const struct llama_model *model) {
    char arch[64], key[96], val[32];
    if (llama_model_meta_val_str(model, "general.architecture", arch, sizeof(arch)) < 0) return COBATCH_POOLING_MODEL;
    snprintf(key, sizeof(key), "%s.pooling_type", arch);
    if (llama_model_meta_val_str(model, key, val, sizeof(val)) < 0) return COBATCH_POOLING_MODEL;
    switch (atoi(val)) {
    case LLAMA_POOLING_TYPE_MEAN: return COBATCH_POOLING_MEAN;
    case LLAMA_POOLING_TYPE_CLS: return COBATCH_POOLING_CLS;
    case LLAMA_POOLING_TYPE_LAST: return COBATCH_POOLING_LAST;
    case LLAMA_POOLING_TYPE_RANK: return -1;
    default: return COBATCH_POOLING_MODEL;
    }
}

static enum llama_pooling_type llama_pooling(enum cobatch_pooling p) {
    return p == COBATCH_POOLING_CLS    ? LLAMA_POOLING_TYPE_CLS
           : p == COBATCH_POOLING_LAST ? LLAMA_POOLING_TYPE_LAST
                                       : LLAMA_POOLING_TYPE_MEAN;
}

int cb_embd_ctx_init(cb_embd_ctx *c, const cb_model *m, enum cobatch_pooling pooling, int32_t n_tokens, int32_t n_seqs,
                     int32_t n_threads, char *err, size_t errlen) {
    memset(c, 0, sizeof(*c));
    if (llama_model_has_encoder(m->model) && llama_model_has_decoder(m->model)) {
        cb_set_err(err, errlen, "embeddings: an encoder-decoder model has no pooled embeddings here (--no-embeddings)");
        return -1;
    }
    if (pooling == COBATCH_POOLING_MODEL) {
        int own = model_pooling(m->model);
        if (own < 0) {
            cb_set_err(err, errlen,
                       "embeddings: the model pools by rank (a reranker), which gives scores, not vectors: name a "
                       "pooling (--pooling) or turn embeddings off (--no-embeddings)");
            return -1;
        }
        /* a generative model names none: the mean of its token vectors (README: the choice, measured) */
        pooling = own == COBATCH_POOLING_MODEL ? COBATCH_POOLING_MEAN : (enum cobatch_pooling)own;
    }
    struct llama_context_params cp = llama_context_default_params();
    int threads = n_threads > 0 ? n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)n_tokens;
    cp.n_seq_max = (uint32_t)n_seqs;
    cp.n_outputs_max = 0; /* every token is an output when embedding (llama.cpp's rule): n_batch */
    cp.n_threads = cp.n_threads_batch = threads;
    cp.kv_unified = true; /* inputs of any lengths share the cells; a pass is one graph run */
    cp.embeddings = true;
    cp.pooling_type = llama_pooling(pooling);
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO;
    cp.no_perf = true;
    c->ctx = llama_init_from_model(m->model, cp);
    c->batch = malloc(sizeof(*c->batch));
    if (c->batch) *c->batch = llama_batch_init(n_tokens, 0, 1);
    if (!c->ctx || !c->batch || !c->batch->token) {
        cb_set_err(err, errlen,
                   "embeddings: cannot make the embedding context (%d tokens, %d inputs a pass; --verbose shows "
                   "llama.cpp's reason; --no-embeddings goes without)",
                   n_tokens, n_seqs);
        cb_embd_ctx_free(c);
        return -1;
    }
    c->n_tokens = n_tokens;
    c->n_seqs = n_seqs;
    c->n_embd = llama_model_n_embd_out(m->model);
    c->pooling = pooling;
    c->batch->n_tokens = 0;
    return 0;
}

void cb_embd_ctx_free(cb_embd_ctx *c) {
    if (c->batch && c->batch->token) llama_batch_free(*c->batch);
    free(c->batch);
    if (c->ctx) llama_free(c->ctx);
    memset(c, 0, sizeof(*c));
}

bool cb_embd_ctx_add(cb_embd_ctx *c, const int32_t *tokens, int32_t n) {
    struct llama_batch *b = c->batch;
    if (n < 1 || c->n_in >= c->n_seqs || b->n_tokens + n > c->n_tokens) return false;
    for (int32_t i = 0; i < n; i++) {
        int32_t k = b->n_tokens + i;
        b->token[k] = tokens[i];
        b->pos[k] = i;
        b->n_seq_id[k] = 1;
        b->seq_id[k][0] = c->n_in;
        b->logits[k] = 1; /* every token is an output of a pooled pass */
    }
    b->n_tokens += n;
    c->n_in++;
    return true;
}

/* v scaled to unit length into out (OpenAI's vectors are); false when v is not finite. */
static bool normalize(const float *v, float *out, int32_t n) {
    double sum = 0;
    for (int32_t i = 0; i < n; i++)
        sum += (double)v[i] * v[i];
    if (!isfinite(sum)) return false;
    double scale = sum > 0 ? 1.0 / sqrt(sum) : 0.0;
    for (int32_t i = 0; i < n; i++)
        out[i] = (float)(v[i] * scale);
    return true;
}

int cb_embd_ctx_run(cb_embd_ctx *c, float *const *out) {
    int rc = 0;
    if (c->fault_left > 0) {
        c->fault_left--;
        rc = c->fault_rc;
    } else if (c->n_in > 0) {
        rc = llama_decode(c->ctx, *c->batch);
    }
    for (int32_t s = 0; rc == 0 && s < c->n_in; s++) {
        const float *v = llama_get_embeddings_seq(c->ctx, s);
        if (!v)
            rc = CB_EMBD_NO_VECTOR;
        else if (!normalize(v, out[s], c->n_embd))
            rc = CB_EMBD_NOT_FINITE;
    }
    c->batch->n_tokens = 0;
    c->n_in = 0;
    llama_memory_t mem = llama_get_memory(c->ctx); /* (none for an encoder-only model) */
    if (mem) llama_memory_clear(mem, true);
    return rc;
}
