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
    for (int32_t i = 1; i <= CB_ROW_COST_ROWS; i++)
        c->bw[i] *= keep, c->by[i] *= keep;
    if (rows <= CB_ROW_COST_ROWS) c->bw[rows] += 1, c->by[rows] += y;
}

/* a row count is measured while its steps weigh one and a half recent ones at least: one step alone
 * is noise on a shared host, and a count not seen for a while (~20 steps at keep 0.98 for two) is
 * forgotten */
static bool measured(const cb_row_cost *c, int32_t rows) {
    return c && rows >= 1 && rows <= CB_ROW_COST_ROWS && c->bw[rows] >= 1.5;
}

double cb_row_cost_at(const cb_row_cost *c, int32_t rows, double fixed_us, double row_us) {
    if (rows < 1) return 0;
    if (measured(c, rows)) return c->by[rows] / c->bw[rows];
    int32_t lo = rows - 1, hi = rows + 1;
    while (lo >= 1 && !measured(c, lo))
        lo--;
    while (hi <= CB_ROW_COST_ROWS && !measured(c, hi))
        hi++;
    double ylo = lo >= 1 ? c->by[lo] / c->bw[lo] : 0, yhi = hi <= CB_ROW_COST_ROWS ? c->by[hi] / c->bw[hi] : 0;
    if (lo >= 1 && hi <= CB_ROW_COST_ROWS) return ylo + (yhi - ylo) * (rows - lo) / (double)(hi - lo);
    if (lo >= 1) return ylo + row_us * (rows - lo);
    if (hi <= CB_ROW_COST_ROWS) {
        double y = yhi - row_us * (hi - rows);
        return y > yhi * rows / hi ? y : yhi * rows / hi; /* no cheaper than its share of the row count above */
    }
    return fixed_us + row_us * rows;
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

/* What m more rows cost a step of `rows`: never less than half the fitted line's rows, nor a tenth of
 * the step's own rows (neighbouring counts differ by about one row, noise on a shared host can make
 * them fall, and noise must not make rows free). */
static double more_rows(const cb_row_cost *c, int32_t rows, int32_t m, double fixed_us, double row_us) {
    double now = cb_row_cost_at(c, rows, fixed_us, row_us), d = cb_row_cost_at(c, rows + m, fixed_us, row_us) - now;
    double least = 0.1 * m * now / rows;
    if (least < 0.5 * m * row_us) least = 0.5 * m * row_us;
    return d > least ? d : least;
}

int32_t cb_spec_choose(int32_t n, int32_t step_rows, const int32_t *avail, const double *rate, const cb_row_cost *table,
                       double fixed_us, double row_us, double start_us, int32_t room, int32_t *k) {
    for (int32_t i = 0; i < n; i++)
        k[i] = 0;
    if (n <= 0 || room <= 0 || !(row_us > 0) || !(fixed_us >= 0) || !(start_us >= 0)) return 0;
    int32_t rows = step_rows > n ? step_rows : n, total = 0;
    double tokens = rows, time = cb_row_cost_at(table, rows, fixed_us, row_us);
    while (total < room) {
        /* the best next piece: one more draft of a request that drafts, or the best first m drafts of
         * one that does not yet (they pay start_us between them), by expected tokens per time */
        int32_t best = -1, best_m = 0;
        double best_gain = 0, best_cost = 1, best_ratio = 0;
        for (int32_t i = 0; i < n; i++) {
            if (k[i] >= avail[i]) continue;
            double gain = 0, term = 1, ratio = 0, g = 0, cost = 0;
            int32_t m = 0, most = k[i] > 0 ? 1 : avail[i];
            if (most > room - total) most = room - total;
            for (int32_t j = 0; j < k[i]; j++)
                term *= rate[i];
            for (int32_t j = 1; j <= most; j++) {
                term *= rate[i];
                gain += term;
                double c = (k[i] > 0 ? 0 : start_us) + more_rows(table, rows, j, fixed_us, row_us);
                if (gain / c > ratio) ratio = gain / c, m = j, g = gain, cost = c;
            }
            if (m > 0 && ratio > best_ratio) best = i, best_m = m, best_gain = g, best_cost = cost, best_ratio = ratio;
        }
        /* worth it when its expected tokens per time beat the step's */
        if (best < 0 || best_gain * time <= tokens * best_cost) break;
        k[best] += best_m;
        total += best_m;
        rows += best_m;
        tokens += best_gain;
        time += best_cost;
    }
    return total;
}
