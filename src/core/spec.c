#include "spec.h"

#include <math.h>

void cb_row_cost_note(cb_row_cost *c, int32_t rows, int64_t us, double keep) {
    if (rows <= 0 || us <= 0) return;
    if (!(keep > 0 && keep <= 1)) keep = 1;
    double x = rows, y = (double)us;
    c->w = c->w * keep + 1;
    c->x = c->x * keep + x;
    c->y = c->y * keep + y;
    c->xx = c->xx * keep + x * x;
    c->xy = c->xy * keep + x * y;
}

bool cb_row_cost_get(const cb_row_cost *c, double *fixed_us, double *row_us) {
    if (c->w <= 0) return false;
    double var = c->xx * c->w - c->x * c->x; /* w^2 x the variance of the row counts */
    if (var <= 1e-9 * c->w * c->w) return false;
    double slope = (c->xy * c->w - c->x * c->y) / var;
    if (!(slope > 0)) return false;
    double icpt = (c->y - slope * c->x) / c->w;
    *fixed_us = icpt > 0 ? icpt : 0;
    *row_us = slope;
    return true;
}

void cb_accept_note(cb_accept *a, int32_t drafted, int32_t accepted, double keep) {
    if (drafted <= 0) return;
    if (!(keep > 0 && keep <= 1)) keep = 1;
    if (accepted < 0) accepted = 0;
    if (accepted > drafted) accepted = drafted;
    a->drafted = a->drafted * keep + drafted;
    a->accepted = a->accepted * keep + accepted;
}

double cb_accept_rate(const cb_accept *a, double prior_accepted, double prior_drafted) {
    double d = a->drafted + prior_drafted, h = a->accepted + prior_accepted;
    if (d <= 0) return 0;
    double r = h / d;
    return r < 0 ? 0 : r > 1 ? 1 : r;
}

int32_t cb_spec_check_sampled(const int32_t *ids, const float *probs, int32_t n, int32_t d, double u, double u2,
                              bool *held) {
    *held = false;
    double pd = 0, rest = 0;
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] == d)
            pd += probs[i];
        else
            rest += probs[i] > 0 ? probs[i] : 0;
    }
    if (u < pd) {
        *held = true;
        return d;
    }
    if (!(rest > 0)) return -1;
    double target = u2 * rest, run = 0;
    int32_t last = -1;
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] == d || !(probs[i] > 0)) continue;
        run += probs[i];
        last = ids[i];
        if (target < run) return ids[i];
    }
    return last; /* rounding left target at the sum's end */
}

double cb_spec_expected(double a, int32_t k) {
    double sum = 1, term = 1;
    for (int32_t i = 0; i < k; i++) {
        term *= a;
        sum += term;
    }
    return sum;
}

int32_t cb_spec_choose(int32_t n, const int32_t *avail, const double *rate, double fixed_us, double row_us,
                       int32_t room, int32_t *k) {
    for (int32_t i = 0; i < n; i++)
        k[i] = 0;
    if (n <= 0 || room <= 0 || !(row_us > 0) || !(fixed_us >= 0)) return 0;
    double tokens = n, time = fixed_us + row_us * n;
    int32_t total = 0;
    while (total < room) {
        int32_t best = -1;
        double gain = 0;
        for (int32_t i = 0; i < n; i++) {
            if (k[i] >= avail[i]) continue;
            double g = pow(rate[i], k[i] + 1);
            if (g > gain) gain = g, best = i;
        }
        /* worth a row when its expected tokens beat the step's tokens per row of time */
        if (best < 0 || gain * time <= tokens * row_us) break;
        k[best]++;
        total++;
        tokens += gain;
        time += row_us;
    }
    return total;
}
