/* bench.h — the in-process benchmark: one workload through one engine configuration, measured
 * from the client side of the public API (submit, poll). */
#ifndef CB_BENCH_H
#define CB_BENCH_H

#include "metrics.h"
#include "workload.h"

#include <cobatch.h>
#include <stdio.h>

typedef struct {
    struct cobatch_engine_params engine;
    char label[96];
} cb_bench_config;

typedef struct {
    cb_metrics m;
    double wall_s, cpu_s; /* cpu: user + sys of this process over the run (engine + client) */
    struct cobatch_stats stats;
    cb_req_timeline *tl; /* (n) owned: free with cb_bench_result_free */
    int n;
    struct cobatch_step_info *steps; /* (n_steps) the scheduling trace */
    int n_steps, steps_cap;
} cb_bench_result;

/* Runs the workload (arrival times as set; concurrency > 0 caps requests in flight, closed loop).
 * Returns 0, or -1 with a message. */
int cb_bench_run(const cb_bench_config *cfg, const cb_workload *w, int concurrency, bool progress, cb_bench_result *out,
                 char *err, size_t errlen);
void cb_bench_result_free(cb_bench_result *r);

/* Writes the trace: one line per step (config label, ms since start, decode rows, prefill tokens,
 * requests in batch, running, waiting, KV cells, preempted). */
void cb_bench_write_trace(FILE *f, const char *label, const cb_bench_result *r);

/* Prints a Markdown table of the results; speedups are against results[base]. */
void cb_bench_print_table(FILE *f, const cb_bench_config *cfgs, const cb_bench_result *res, int n, int base);

#endif
