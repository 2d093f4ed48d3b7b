#include "metrics.h"

#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cb_percentile_sorted(const double *s, size_t n, double q) {
    if (n == 0) return 0;
    double pos = q / 100.0 * (double)(n - 1);
    size_t lo = (size_t)pos;
    if (lo >= n - 1) return s[n - 1];
    double frac = pos - (double)lo;
    return s[lo] + (s[lo + 1] - s[lo]) * frac;
}

cb_dist cb_dist_of(double *v, size_t n) {
    cb_dist d = {0};
    d.n = n;
    if (n == 0) return d;
    qsort(v, n, sizeof(double), cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    d.mean = sum / (double)n;
    d.p50 = cb_percentile_sorted(v, n, 50);
    d.p90 = cb_percentile_sorted(v, n, 90);
    d.p99 = cb_percentile_sorted(v, n, 99);
    d.max = v[n - 1];
    return d;
}

int cb_metrics_compute(const cb_req_timeline *r, size_t n, double duration_s, cb_metrics *m) {
    memset(m, 0, sizeof(*m));
    m->duration_s = duration_s;
    size_t n_itl = 0;
    for (size_t i = 0; i < n; i++)
        if (r[i].ok && r[i].n_out > 1) n_itl += (size_t)(r[i].n_out - 1);
    double *ttft = malloc(sizeof(double) * (n + 1)), *tpot = malloc(sizeof(double) * (n + 1));
    double *e2el = malloc(sizeof(double) * (n + 1)), *itl = malloc(sizeof(double) * (n_itl + 1));
    if (!ttft || !tpot || !e2el || !itl) {
        free(ttft);
        free(tpot);
        free(e2el);
        free(itl);
        return -1;
    }
    size_t k_ttft = 0, k_tpot = 0, k_e2el = 0, k_itl = 0;
    for (size_t i = 0; i < n; i++) {
        const cb_req_timeline *q = &r[i];
        if (!q->ok) {
            m->failed++;
            continue;
        }
        m->completed++;
        m->input_tokens += q->n_in;
        m->output_tokens += q->n_out;
        if (q->n_out > 0) ttft[k_ttft++] = (double)(q->t_first_us - q->t_submit_us) / 1e3;
        e2el[k_e2el++] = (double)(q->t_finish_us - q->t_submit_us) / 1e3;
        if (q->n_out > 1) {
            tpot[k_tpot++] = (double)(q->t_finish_us - q->t_first_us) / 1e3 / (q->n_out - 1);
            for (int32_t t = 1; t < q->n_out && q->t_tokens_us; t++)
                itl[k_itl++] = (double)(q->t_tokens_us[t] - q->t_tokens_us[t - 1]) / 1e3;
        }
    }
    m->ttft_ms = cb_dist_of(ttft, k_ttft);
    m->tpot_ms = cb_dist_of(tpot, k_tpot);
    m->itl_ms = cb_dist_of(itl, k_itl);
    m->e2el_ms = cb_dist_of(e2el, k_e2el);
    if (duration_s > 0) {
        m->req_per_s = m->completed / duration_s;
        m->out_tok_per_s = (double)m->output_tokens / duration_s;
        m->total_tok_per_s = (double)(m->input_tokens + m->output_tokens) / duration_s;
    }
    free(ttft);
    free(tpot);
    free(e2el);
    free(itl);
    return 0;
}
