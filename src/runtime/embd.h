/* embd.h — the embedding context: a llama.cpp context on the model's weights with embeddings on and a
 * pooling set, of n_tokens cells (= n_batch = n_ubatch: a pass is one graph run, and an input's tokens
 * are pooled within one ubatch), that computes a pass of whole inputs, one sequence each, in one
 * llama_decode and gives every input's pooled vector, normalized. Its cells are cleared after every
 * pass. Engine thread only (made at init, on the loading thread). */
#ifndef CB_RUNTIME_EMBD_H
#define CB_RUNTIME_EMBD_H

#include "model.h"

#include <cobatch.h>
#include <stdbool.h>
#include <stdint.h>

struct llama_batch;

/* cb_embd_ctx_run's codes beyond llama_decode's */
#define CB_EMBD_NO_VECTOR (-300)  /* llama.cpp gave no pooled vector for an input */
#define CB_EMBD_NOT_FINITE (-301) /* an input's vector holds a NaN or an infinity */

typedef struct {
    struct llama_context *ctx;
    struct llama_batch *batch;    /* (n_tokens rows) the pass being filled */
    int32_t n_tokens, n_seqs;     /* a pass's tokens and inputs, at most */
    int32_t n_embd;               /* floats a vector */
    int32_t n_in;                 /* inputs in the pass so far */
    enum cobatch_pooling pooling; /* as resolved: never COBATCH_POOLING_MODEL */
    int fault_rc, fault_left;     /* tests: the next fault_left passes return fault_rc without running */
} cb_embd_ctx;

/* Makes the context on m's weights: pooling MODEL takes the model's GGUF pooling_type, MEAN when it
 * names none; n_threads 0 = cores. Returns 0, or -1 with the reason in err (a reranker's pooling
 * "rank" and an encoder-decoder model are refused; so is a context llama.cpp cannot make). */
int cb_embd_ctx_init(cb_embd_ctx *c, const cb_model *m, enum cobatch_pooling pooling, int32_t n_tokens, int32_t n_seqs,
                     int32_t n_threads, char *err, size_t errlen);
void cb_embd_ctx_free(cb_embd_ctx *c);

/* Adds an input of n tokens (ids of the vocabulary, 1 <= n) as the pass's next sequence; false when
 * the pass has no room for it (tokens or sequences): nothing added. */
bool cb_embd_ctx_add(cb_embd_ctx *c, const int32_t *tokens, int32_t n);

/* Decodes the pass: out[i] (n_embd floats) gets input i's vector, of unit length (an all-zero vector
 * stays zero). Returns 0, llama_decode's code, or a CB_EMBD_ code; out is then partly written. The
 * pass is emptied and the context's cells cleared either way. */
int cb_embd_ctx_run(cb_embd_ctx *c, float *const *out);

#endif
