/* draft.h — where a speculating request's draft tokens come from: pure, no llama.h.
 *
 * A draft is a guess at the tokens that follow a sequence, checked by the target model in one pass
 * (spec.h decides how many are worth checking). Three sources, none a model:
 * - lookup in the request's own text (prompt and output so far): the longest recent n-gram that
 *   ends the sequence and occurred before, and what followed it there (llama.cpp calls this
 *   ngram-simple; "prompt lookup decoding"). Agents re-emit what they read: a file being edited,
 *   JSON they quote, tool output.
 * - a client's prediction (OpenAI's Predicted Outputs): the same lookup in the text the client
 *   expects, from where the last match left off.
 * - a pool shared across requests: the token that last followed each n-gram of accepted text, a
 *   fixed-size table keyed by the n-gram's hash (llama.cpp's ngram-mod idea: constant memory,
 *   drafts of any length by walking it).
 * Engine thread only; nothing here allocates after creation. */
#ifndef CB_DRAFT_H
#define CB_DRAFT_H

#include <stdbool.h>
#include <stdint.h>

/* The longest n-gram of length in [n_min, n_max] that ends key[0, n_key) and occurs in hay[0, n_hay)
 * followed by at least one token; of its occurrences the first at or after position `from` (where a
 * prediction's last match ended; < 0: none), else the last one. Up to k of the tokens that follow it
 * go to out. For the request's own text pass the same array as key and hay (an occurrence then ends
 * before the key's own end). Returns how many tokens (0: no n-gram of n_min tokens recurs), and the
 * hay position after the last one in *end (may be NULL). O(n_hay x n_max) compares at worst: 20k
 * tokens of context take tens of microseconds, against a step of tens of milliseconds. */
int32_t cb_draft_lookup(const int32_t *key, int32_t n_key, const int32_t *hay, int32_t n_hay, int32_t n_min,
                        int32_t n_max, int32_t from, int32_t k, int32_t *out, int32_t *end);

/* The shared pool: 2^bits slots, each the token that last followed an n-gram (of a fixed length n)
 * and a tag of the n-gram's hash to tell collisions apart. */
typedef struct cb_ngram_pool cb_ngram_pool;

/* Returns a pool of 2^bits slots (bits in [8, 26]: 2^20 slots take 8 MiB) for n-grams of n tokens
 * (n in [1, 16]), or NULL on bad arguments or out of memory. Free with cb_ngram_pool_free. */
cb_ngram_pool *cb_ngram_pool_new(int bits, int32_t n);
void cb_ngram_pool_free(cb_ngram_pool *p);

/* Learns what follows each n-gram ending at positions [from, n_text) of text: slot(text[i-n, i)) =
 * text[i]. Call with accepted tokens only (a rejected draft must not teach the pool). */
void cb_ngram_pool_learn(cb_ngram_pool *p, const int32_t *text, int32_t n_text, int32_t from);

/* Walks the pool from the n-gram ending text[0, n_text): up to k tokens, each the one recorded after
 * the previous n tokens (text and what was drafted), into out; stops at an empty or foreign slot.
 * Returns how many. */
int32_t cb_ngram_pool_draft(const cb_ngram_pool *p, const int32_t *text, int32_t n_text, int32_t k, int32_t *out);

#endif
