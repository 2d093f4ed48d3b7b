/* prompts.h — workload prompts in tokens of the model under test, through an engine's tokenizer
 * (cobatch_tokenize is thread-safe and needs no decode). */
#ifndef CB_PROMPTS_H
#define CB_PROMPTS_H

#include "workload.h"

#include <cobatch.h>

/* A cb_prompt_fn: exactly n tokens of English-like text (BOS first when the model wants one);
 * engine is a cobatch_engine *. */
int cb_prompt_make(void *engine, uint64_t *rng, int32_t n, int32_t *out);
/* A cb_tokenize_fn over a cobatch_engine *. */
int32_t *cb_prompt_tokenize(void *engine, const char *text, int32_t *n);
/* A cb_tokenize_fn of a user message: the prompt the model's chat template makes of it. */
int32_t *cb_prompt_chat(void *engine, const char *user, int32_t *n);

#endif
