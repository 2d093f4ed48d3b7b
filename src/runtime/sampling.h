/* sampling.h — per-request llama_sampler chains. Engine thread only. */
#ifndef CB_SAMPLING_H
#define CB_SAMPLING_H

#include "llama_common.h"
#include "model.h"

#include <cobatch.h>

struct llama_sampler;
struct llama_token_data;

/* Builds the chain: the logit biases (ids checked by the caller), penalties, then greedy at
 * temperature <= 0, else top_k, top_p, min_p, temperature and a seeded draw. Returns NULL on
 * allocation failure. Caller frees with cb_sampler_free. */
struct llama_sampler *cb_sampler_new(const cb_model *m, const struct cobatch_sampling *s,
                                     const struct cobatch_logit_bias *bias, size_t n_bias);
void cb_sampler_free(struct llama_sampler *smpl);
/* A copy of a sampler in its current state (a chat's grammar, for each of its requests), or NULL
 * when memory runs out. */
struct llama_sampler *cb_sampler_clone(const struct llama_sampler *smpl);
/* Room for the model's n_vocab candidates (cb_sampler_sample's scratch); free() it. NULL when memory
 * runs out. */
struct llama_token_data *cb_sampler_scratch_new(const cb_model *m);

/* A grammar sampler for GBNF text (root rule "root"; repetitions past 2000 widened as rules llama.cpp
 * keeps, util/gbnf.h) held to lim (llama_common.h), or NULL with the reason in err (it does not
 * parse, or a bound refuses it). */
struct llama_sampler *cb_grammar_new(const cb_model *m, const char *gbnf, const cb_grammar_limits *lim, char *err,
                                     size_t errlen);

/* Samples (and accepts) a token from logits row `row` of the last decode. If margin is not NULL
 * it gets the raw top-1 minus top-2 logit of that row. With a grammar (else NULL) the token is one
 * the grammar allows: the chain samples first and the grammar checks only its token; only when it
 * refuses is the whole row masked by the grammar and sampled again (llama.cpp common's order, so
 * a constrained request pays for the grammar on the tokens it would have refused). think (else
 * NULL), a reasoning block's follower (cb_common_think_new), masks the row first and takes every
 * token. scratch: room for n_vocab candidates, used with a grammar or think. Returns -1 when the
 * grammar allows no token at all, -2 when the token sampled blew the grammar (cb_common_grammar_blown
 * says why). */
int32_t cb_sampler_sample(struct llama_sampler *smpl, struct llama_sampler *grammar, struct llama_sampler *think,
                          const cb_model *m, int32_t row, float *margin, struct llama_token_data *scratch);

/* Log-probabilities at logits row `row` of the last decode (the log-softmax of the raw logits):
 * out[0] = token and its log-probability, out[1..k] the k most likely tokens, most likely first (ties:
 * lower id first). Reads the row in place, twice; copies nothing. */
void cb_logprobs(const cb_model *m, int32_t row, int32_t token, int32_t k, struct cobatch_logprob *out);

#endif
