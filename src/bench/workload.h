/* workload.h — deterministic benchmark workloads in tokens of the model under test.
 * Lengths are exact: prompts are made by a callback that returns exactly the tokens asked for.
 * Arrivals: all at once (0), or open-loop with gamma inter-arrival times (vLLM's definition:
 * shape = burstiness, mean = 1 / rate; burstiness 1 is Poisson). Pure: no engine, no clock. */
#ifndef CB_WORKLOAD_H
#define CB_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    int32_t n_in, n_out;
    double arrival_s;
    int32_t priority;
    int32_t *tokens;  /* (n_in) owned by the workload */
    char *text;       /* the prompt as text, for a client that sends text (loadgen --text-prompts); NULL
                         otherwise; owned */
    int32_t session;  /* `sessions`: the conversation it is a turn of (tokens: that turn's new user message);
                         -1 otherwise */
    int32_t turn;     /* `sessions`: which turn (0: the first) */
    char *prediction; /* `edit`: the text the answer is expected to repeat (the file), for a client that
                         sends it (OpenAI's Predicted Outputs); NULL otherwise; owned */
} cb_work_item;

typedef struct {
    cb_work_item *items; /* (n) */
    int n;
    char name[32];
    /* `sessions` (vLLM's multi-turn benchmark shape): n_sessions conversations of n / n_sessions
     * turns, item t * n_sessions + s being turn t of session s. Every session opens with the same
     * system prompt; a turn is sent think_s after the answer to the one before, with the whole
     * conversation so far (the answers as the server gave them), so it needs a chat endpoint. */
    int32_t n_sessions;     /* 0: not a session workload */
    int32_t *system_tokens; /* (n_system) owned */
    int32_t n_system;
    char *system_text; /* the system prompt as text (with the items' text); owned */
    double think_s;
} cb_workload;

/* Text to tokens (with BOS as the model wants): returns a malloc'd array and its length, or NULL. */
typedef int32_t *(*cb_tokenize_fn)(void *ctx, const char *text, int32_t *n);

typedef struct {
    int num_prompts; /* 0 = the workload's own count */
    uint64_t seed;
    int32_t random_input_len, random_output_len; /* `random` */
    int32_t context_len;                         /* `long-context`: each prompt's tokens; 0 = 4096 */
    double random_range_ratio;
    int32_t prefix_len, distinct_len, output_len, sharing_degree; /* `shared-prefix`, `multi-prefix`; 0 = defaults */
    int32_t sessions, turns, system_len, task_len, turn_len;      /* `sessions` (output_len too; system_len:
                                                                     `multi-prefix` too); 0 = defaults */
    double think_s;                                               /* `sessions`: between an answer and the next turn */
    int32_t edit_lines;                                           /* `edit`: lines of each file; 0 = 40 */
    cb_tokenize_fn chat_fn; /* `edit`: a user message to the prompt tokens the model's chat template makes */
    void *chat_ctx;
} cb_workload_opts;

/* Fills out[0, n) with exactly n prompt tokens drawn with *rng. Returns 0 or -1. */
typedef int (*cb_prompt_fn)(void *ctx, uint64_t *rng, int32_t n, int32_t *out);

/* Names: long, long16, long-context, mixed, mixed-small, decode-heavy, prefill-heavy, random,
 * shared-prefix, multi-prefix, sessions. long-context: 16 distinct prompts of context_len tokens (4096)
 * asking for output_len (128), where agents' requests live. shared-prefix (BatchLLM-style): groups of sharing_degree
 * requests share a prefix of prefix_len tokens, each adds distinct_len tokens of its own and asks for output_len;
 * requests are shuffled. multi-prefix (BatchLLM's prefix tree of two levels): every request starts
 * with one system prompt of system_len tokens (470), then its group's document of prefix_len (1000;
 * a group: sharing_degree requests, 4), then a question of distinct_len (100) of its own, and asks
 * for output_len (50); shuffled. sessions: `sessions` conversations (default 32) of `turns` turns (4) behind a system
 * prompt of system_len tokens (470): a task of task_len tokens (90), then turn_len new tokens (50)
 * a turn, output_len answer tokens (32) each. edit (edit.c): 16 requests, each a file of edit_lines
 * lines (40) of Python functions and the instruction to rename one and reply with the whole file
 * (rendered by chat_fn; the file also as the item's prediction), asking for the file's tokens and 16
 * more (output_len if given). Returns 0, or -1 with a message (unknown name, a prompt that could not be
 * made). */
int cb_workload_make(const char *name, const cb_workload_opts *opts, cb_prompt_fn fn, void *ctx, cb_workload *out,
                     char *err, size_t errlen);
void cb_workload_free(cb_workload *w);
/* edit.c: the `edit` workload's w->n items (tokens, text, prediction), drawn with *rng. 0, or -1 with
 * a message. */
int cb_workload_edit(const cb_workload_opts *o, uint64_t *rng, cb_workload *w, char *err, size_t errlen);

/* Loads a workload from JSONL: one request per line, {"prompt": "text"} or
 * {"prompt_tokens": [ids]}, with optional "max_tokens" (default 128), "arrival_s" and "priority".
 * Blank lines are skipped. *has_arrivals tells whether any line gave an arrival time. Returns 0,
 * or -1 with a message naming the line. */
int cb_workload_load_jsonl(const char *path, cb_tokenize_fn fn, void *ctx, cb_workload *out, bool *has_arrivals,
                           char *err, size_t errlen);
/* The same from an open stream (path names the workload and the lines in errors). */
int cb_workload_read_jsonl(FILE *f, const char *path, cb_tokenize_fn fn, void *ctx, cb_workload *out,
                           bool *has_arrivals, char *err, size_t errlen);
const char *cb_workload_names(void);

/* Sets arrival times: rate <= 0 means all at once; otherwise gamma(burstiness) inter-arrivals
 * with mean 1/rate, the first request at 0. */
void cb_workload_set_arrivals(cb_workload *w, double rate, double burstiness, uint64_t seed);

/* Sorts by arrival time, keeping the order of equal times (stable). */
void cb_workload_sort_by_arrival(cb_workload *w);

/* Deterministic generator shared by the workload code: uniform integer in [lo, hi]. */
static inline uint64_t cb_rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static inline int32_t cb_rng_range(uint64_t *rng, int32_t lo, int32_t hi) {
    if (hi <= lo) return lo;
    return lo + (int32_t)(cb_rng_next(rng) % (uint64_t)(hi - lo + 1));
}
static inline double cb_rng_unit(uint64_t *rng) {
    return (double)(cb_rng_next(rng) >> 11) / (double)(1ULL << 53);
} /* [0, 1) */

#endif
