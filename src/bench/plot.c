/* plot.c — SVG charts for `cobatch bench --plot DIR`: throughput per configuration, latency CDFs
 * (TTFT, ITL) and tokens per step over time. Plain SVG 1.1, no scripts, readable in a browser. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *COLORS[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define NCOL (sizeof(COLORS) / sizeof(COLORS[0]))

enum { W = 900, H = 480, ML = 90, MR = 260, MT = 50, MB = 60 }; /* canvas and margins (legend right) */

static FILE *svg_open(const char *dir, const char *name, const char *title) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    fprintf(f,
            "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' font-family='sans-serif' "
            "font-size='12'>\n<rect width='100%%' height='100%%' fill='white'/>\n"
            "<text x='%d' y='28' font-size='16' font-weight='bold'>%s</text>\n",
            W, H, ML, title);
    return f;
}

static int svg_close(FILE *f) {
    fputs("</svg>\n", f);
    return fclose(f) == 0 ? 0 : -1;
}

/* A "nice" upper bound for an axis: 1, 2 or 5 times a power of ten. */
static double nice_max(double v) {
    if (v <= 0) return 1;
    double p = pow(10, floor(log10(v)));
    return v <= p ? p : v <= 2 * p ? 2 * p : v <= 5 * p ? 5 * p : 10 * p;
}

static void axes(FILE *f, double xmax, double ymax, const char *xlabel, const char *ylabel, bool xlog) {
    int pw = W - ML - MR, ph = H - MT - MB;
    fprintf(f, "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='black'/>\n", ML, H - MB, ML + pw, H - MB);
    fprintf(f, "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='black'/>\n", ML, MT, ML, H - MB);
    for (int k = 0; k <= 4; k++) {
        double yv = ymax * k / 4;
        int y = H - MB - ph * k / 4;
        fprintf(f, "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='#ddd'/>\n", ML, y, ML + pw, y);
        if (ymax > 0) /* a bar chart (ymax 0) has names, not numbers, on its y axis */
            fprintf(f, "<text x='%d' y='%d' text-anchor='end'>%g</text>\n", ML - 6, y + 4, yv);
        double xv = xlog ? pow(10, log10(xmax) * k / 4) : xmax * k / 4;
        int x = ML + pw * k / 4;
        fprintf(f, "<text x='%d' y='%d' text-anchor='middle'>%.3g</text>\n", x, H - MB + 18, xv);
    }
    fprintf(f, "<text x='%d' y='%d' text-anchor='middle'>%s</text>\n", ML + pw / 2, H - 16, xlabel);
    fprintf(f, "<text x='20' y='%d' transform='rotate(-90 20 %d)' text-anchor='middle'>%s</text>\n", MT + ph / 2,
            MT + ph / 2, ylabel);
}

static void legend(FILE *f, const cb_bench_config *cfgs, int n) {
    for (int i = 0; i < n; i++) {
        int y = MT + 10 + i * 20;
        fprintf(f, "<rect x='%d' y='%d' width='14' height='10' fill='%s'/>\n", W - MR + 20, y - 9, COLORS[i % NCOL]);
        fprintf(f, "<text x='%d' y='%d'>%s</text>\n", W - MR + 40, y, cfgs[i].label);
    }
}

static int plot_throughput(const char *dir, const cb_bench_config *cfgs, const cb_bench_result *res, int n) {
    FILE *f = svg_open(dir, "throughput.svg", "Output throughput per configuration (tok/s)");
    if (!f) return -1;
    double vmax = 0;
    for (int i = 0; i < n; i++)
        vmax = fmax(vmax, res[i].m.out_tok_per_s);
    vmax = nice_max(vmax);
    int pw = W - ML - MR, ph = H - MT - MB, bh = ph / (n ? n : 1);
    axes(f, vmax, 0, "output tokens per second", "", false);
    for (int i = 0; i < n; i++) {
        int w = (int)(pw * res[i].m.out_tok_per_s / vmax), y = MT + i * bh + bh / 6;
        fprintf(f, "<rect x='%d' y='%d' width='%d' height='%d' fill='%s'/>\n", ML, y, w, bh * 2 / 3, COLORS[i % NCOL]);
        fprintf(f, "<text x='%d' y='%d'>%.1f</text>\n", ML + w + 4, y + bh / 3 + 4, res[i].m.out_tok_per_s);
    }
    legend(f, cfgs, n);
    return svg_close(f);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Latency CDF on a log x axis; which: 0 TTFT, 1 ITL. */
static int plot_cdf(const char *dir, const cb_bench_config *cfgs, const cb_bench_result *res, int n, int which) {
    FILE *f = svg_open(dir, which ? "itl_cdf.svg" : "ttft_cdf.svg",
                       which ? "Inter-token latency, CDF" : "Time to first token, CDF");
    if (!f) return -1;
    double xmax = 1;
    double **vals = calloc((size_t)n, sizeof(double *));
    size_t *cnt = calloc((size_t)n, sizeof(size_t));
    for (int i = 0; vals && cnt && i < n; i++) {
        const cb_bench_result *r = &res[i];
        size_t cap = 0;
        for (int q = 0; q < r->n; q++)
            cap += which ? (size_t)(r->tl[q].n_out > 1 ? r->tl[q].n_out - 1 : 0) : 1;
        vals[i] = malloc(sizeof(double) * (cap + 1));
        for (int q = 0; vals[i] && q < r->n; q++) {
            const cb_req_timeline *t = &r->tl[q];
            if (!t->ok || t->n_out < 1) continue;
            if (!which) vals[i][cnt[i]++] = (double)(t->t_first_us - t->t_submit_us) / 1e3;
            for (int32_t k = 1; which && k < t->n_out; k++)
                vals[i][cnt[i]++] = (double)(t->t_tokens_us[k] - t->t_tokens_us[k - 1]) / 1e3;
        }
        if (vals[i]) qsort(vals[i], cnt[i], sizeof(double), cmp_double);
        if (cnt[i]) xmax = fmax(xmax, vals[i][cnt[i] - 1]);
    }
    xmax = nice_max(xmax);
    int pw = W - ML - MR, ph = H - MT - MB;
    axes(f, xmax, 1, which ? "milliseconds (log scale)" : "milliseconds (log scale)", "fraction of samples", true);
    double lx = log10(xmax);
    for (int i = 0; vals && cnt && i < n; i++) {
        if (!cnt[i]) continue;
        fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' points='", COLORS[i % NCOL]);
        size_t step = cnt[i] > 2000 ? cnt[i] / 2000 : 1; /* at most ~2000 points a line */
        for (size_t k = 0; k < cnt[i]; k += step) {
            double v = fmax(vals[i][k], 1.0); /* the axis starts at 1 ms */
            fprintf(f, "%.1f,%.1f ", ML + pw * log10(v) / lx, H - MB - ph * (double)(k + 1) / (double)cnt[i]);
        }
        fprintf(f, "%.1f,%d'/>\n", ML + pw * log10(fmax(vals[i][cnt[i] - 1], 1.0)) / lx, MT);
        free(vals[i]);
    }
    free(vals);
    free(cnt);
    legend(f, cfgs, n);
    return svg_close(f);
}

/* Rows (decode + prefill tokens) of each step over time, one line per configuration. */
static int plot_steps(const char *dir, const cb_bench_config *cfgs, const cb_bench_result *res, int n) {
    FILE *f = svg_open(dir, "steps.svg", "Tokens per engine step over time");
    if (!f) return -1;
    double tmax = 0, ymax = 1;
    for (int i = 0; i < n; i++) {
        const cb_bench_result *r = &res[i];
        if (!r->n_steps) continue;
        tmax = fmax(tmax, (double)(r->steps[r->n_steps - 1].t_end_us - r->steps[0].t_start_us) / 1e6);
        for (int k = 0; k < r->n_steps; k++)
            ymax = fmax(ymax, r->steps[k].decode_rows + r->steps[k].prefill_tokens);
    }
    tmax = nice_max(tmax);
    ymax = nice_max(ymax);
    int pw = W - ML - MR, ph = H - MT - MB;
    axes(f, tmax, ymax, "seconds since the first step", "tokens in the step", false);
    for (int i = 0; i < n; i++) {
        const cb_bench_result *r = &res[i];
        if (!r->n_steps) continue;
        fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='1' points='", COLORS[i % NCOL]);
        int step = r->n_steps > 4000 ? r->n_steps / 4000 : 1;
        for (int k = 0; k < r->n_steps; k += step) {
            const struct cobatch_step_info *s = &r->steps[k];
            fprintf(f, "%.1f,%.1f ", ML + pw * ((double)(s->t_start_us - r->steps[0].t_start_us) / 1e6) / tmax,
                    H - MB - ph * (s->decode_rows + s->prefill_tokens) / ymax);
        }
        fputs("'/>\n", f);
    }
    legend(f, cfgs, n);
    return svg_close(f);
}

int cb_bench_write_plots(const char *dir, const cb_bench_config *cfgs, const cb_bench_result *res, int n) {
    int rc = plot_throughput(dir, cfgs, res, n);
    rc |= plot_cdf(dir, cfgs, res, n, 0);
    rc |= plot_cdf(dir, cfgs, res, n, 1);
    rc |= plot_steps(dir, cfgs, res, n);
    return rc ? -1 : 0;
}
