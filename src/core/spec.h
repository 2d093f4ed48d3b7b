/* spec.h — how many draft tokens a step should check, from what rows cost and how often drafts hold.
 * Pure, no llama.h.
 *
 * A request that checks k drafted tokens adds k rows to the step and gets, when each draft holds
 * with probability a given the ones before held, 1 + a + a^2 + ... + a^k tokens (the last row's
 * sample is a token whether or not the drafts held). A step's time is what steps of as many rows
 * took (each row count's own recent mean, between two measured counts the line through them), and
 * where none was measured near, fixed + row x rows (the pass over the weights, then each row's
 * share: its matrix work and its attention over its context) fitted on all of them. The table
 * matters on CPUs whose kernels are not linear in rows: on an AMD EPYC with AVX-512 a second row
 * of one sequence doubles a one-row step, and eight more cost 5.1x in all. The k-th draft of a request gains a^k tokens
 * for one more row; it is worth adding while that gain per row beats what the step earns per row of its time, d /
 * (fixed / row + d) tokens for d decoding requests: with one request decoding and a large fixed cost nearly any draft
 * pays (deep drafts), with a full batch and rows that cost as much as the fixed part only drafts that almost always
 * hold do, and under heavy load none: speculation turns itself off rather than slow a batch down (llama.cpp's lookup
 * decoding ran at 0.77x at 8 slots because it did not). */
#ifndef CB_SPEC_H
#define CB_SPEC_H

#include <stdbool.h>
#include <stdint.h>

/* Row counts the table keeps a mean for (a step of more rows: the line only). */
#define CB_ROW_COST_ROWS 64

/* A least-squares line through (rows, microseconds) of recent steps, older steps weighing less, and
 * each row count's decayed mean. */
typedef struct {
    double w, x, y, xx, xy;                                    /* decayed sums: weight, rows, us, rows^2, rows x us */
    double bw[CB_ROW_COST_ROWS + 1], by[CB_ROW_COST_ROWS + 1]; /* per row count: weight, us */
} cb_row_cost;

/* A step of `rows` rows took `us`; the sums decay by `keep` (in (0, 1]) first. */
void cb_row_cost_note(cb_row_cost *c, int32_t rows, int64_t us, double keep);
/* The fitted fixed and per-row cost in microseconds; false until steps of different row counts give a
 * line with a positive slope (then nothing is written). A negative intercept (noise) gives fixed 0. */
bool cb_row_cost_get(const cb_row_cost *c, double *fixed_us, double *row_us);
/* What a step of `rows` rows should take: the measured mean of that row count, else the line between
 * the nearest measured counts either side, else the nearest measured count moved along row_us (or
 * fixed_us + row_us x rows with none measured). fixed_us and row_us: the fit, or the caller's prior.
 * c may be NULL (the line alone). */
double cb_row_cost_at(const cb_row_cost *c, int32_t rows, double fixed_us, double row_us);

/* How often a request's drafts hold: accepted of drafted, counted from a prior of `prior_accepted`
 * of `prior_drafted` so a new request neither trusts nor distrusts its first draft too much. */
typedef struct {
    double drafted, accepted;
} cb_accept;

/* A step tried `drafted` draft tokens and `accepted` held; counts decay by `keep` first. Tried: those
 * that held and the one that failed, if one did (a draft behind a failed one was never tried), so
 * the rate is that of one token holding given the ones before it held. */
void cb_accept_note(cb_accept *a, int32_t drafted, int32_t accepted, double keep);
/* The chance that a draft token holds given those before it did, in [0, 1]. */
double cb_accept_rate(const cb_accept *a, double prior_accepted, double prior_drafted);

/* One step's choice. The step has step_rows rows before drafts, each a token (at least n); of them, n
 * requests may draft: request i has avail[i] draft
 * tokens ready and holds them at rate rate[i]. table (may be NULL), fixed_us and row_us: what a step
 * of so many rows takes (cb_row_cost_at); start_us: what
 * a request's drafts cost before their rows (the split layout: its rows after the first are a graph
 * run of their own, another pass over the weights; 0 where rows share one graph); room: draft rows
 * the step's token budget and cells allow in all. Writes k[i] (0..avail[i]) and returns the draft
 * rows in all. Greedy by expected tokens per time: the next draft of a request that drafts
 * (rate^(k+1) for row_us), or the best first drafts of one that does not (their gains for start_us
 * and their rows); stops at the first piece that does not beat the step's own tokens per time.
 * O(n x avail x pieces), n at most the batch's sequences. */
int32_t cb_spec_choose(int32_t n, int32_t step_rows, const int32_t *avail, const double *rate, const cb_row_cost *table,
                       double fixed_us, double row_us, double start_us, int32_t room, int32_t *k);

/* Checking a drafted token d when sampling (not greedy): the standard rule that keeps the output
 * distribution exactly the target's. A draft from text (lookup, prediction, pool) is one token with
 * certainty (q(d) = 1), so d holds with the target's probability p(d) (u < p(d)); otherwise the token
 * is drawn from the residual max(0, p - q) renormalized, which is p without d. ids/probs: the
 * target's candidates after its sampler chain (penalties, top-k/p, temperature; n of them, the
 * probabilities summing to 1); u, u2: uniform in [0, 1) from the request's seeded generator. Returns
 * the token and whether it is d (*held); -1 when no candidate is left (p(d) = 1 and d rejected
 * cannot happen: u < 1). */
int32_t cb_spec_check_sampled(const int32_t *ids, const float *probs, int32_t n, int32_t d, double u, double u2,
                              bool *held);

/* The tokens a request expects from k drafts holding at rate a: 1 + a + ... + a^k. */
double cb_spec_expected(double a, int32_t k);

#endif
