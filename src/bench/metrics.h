/* metrics.h — serving metrics the way vLLM's benchmark defines them, from per-request timelines.
 * Pure computation: no clock, no engine.
 *   TTFT  first token time - submit time
 *   TPOT  (finish - first token) / (output tokens - 1), per request with more than one token
 *   ITL   every gap between consecutive output tokens of a request, over all requests
 *   E2EL  finish - submit
 * Percentiles interpolate linearly between order statistics (numpy's default). */
#ifndef CB_METRICS_H
#define CB_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t t_submit_us, t_first_us, t_finish_us;
    int64_t *t_tokens_us; /* (n_out) when each output token was made; owned by the caller */
    int32_t n_in, n_out;
    bool ok; /* finished with stop or length */
} cb_req_timeline;

typedef struct {
    double mean, p50, p90, p99, max;
    size_t n;
} cb_dist;

typedef struct {
    double duration_s;
    int32_t completed, failed;
    int64_t input_tokens, output_tokens;
    double req_per_s, out_tok_per_s, total_tok_per_s;
    cb_dist ttft_ms, tpot_ms, itl_ms, e2el_ms;
} cb_metrics;

/* Sorts v in place and summarizes it (all zeros when n == 0). */
cb_dist cb_dist_of(double *v, size_t n);
/* The q-th percentile (0..100) of sorted values. */
double cb_percentile_sorted(const double *sorted, size_t n, double q);

/* Computes every metric over n timelines; duration_s is the benchmark's wall time. Returns 0, or
 * -1 on allocation failure. */
int cb_metrics_compute(const cb_req_timeline *reqs, size_t n, double duration_s, cb_metrics *out);

#endif
