/* bench.h — the in-process benchmark: one workload through one engine configuration, measured
 * from the client side of the public API (submit, poll). */
#ifndef CB_BENCH_H
#define CB_BENCH_H

#include "../runtime/ceiling.h"
#include "metrics.h"
#include "workload.h"

#include <cobatch.h>
#include <stdio.h>

typedef struct {
    struct cobatch_engine_params engine;
    bool prediction; /* requests send their workload item's prediction (the `edit` workload's file) */
    char label[96];
} cb_bench_config;

typedef struct {
    cb_metrics m;
    double wall_s;
    double cpu_s, cpu_user_s; /* CPU time of this process over the run (engine, llama.cpp's workers and
                                 client): user + system, and user alone */
    struct cobatch_stats stats;
    struct cobatch_kv_info kv; /* the KV memory the engine resolved to */
    cb_req_timeline *tl;       /* (n) owned: free with cb_bench_result_free */
    int n;
    double ideal_s, efficiency;      /* against the ceiling: see cb_bench_efficiency; < 0 when not known */
    struct cobatch_step_info *steps; /* (n_steps) the scheduling trace */
    int n_steps;
    size_t steps_cap;
    double step_s, decode_s;  /* over the trace's steps: their wall time, and of it the time inside
                                 llama_decode (cobatch_step_info.decode_us); the rest is host work */
    int32_t *prompt, *cached; /* (n) each request's prompt tokens, and those the prefix cache supplied */
} cb_bench_result;

/* The steps of r's trace that ran the long lane's graph. */
int cb_bench_lane_steps(const cb_bench_result *r);

/* What a run was, for the JSON report. */
typedef struct {
    const char *workload, *model_name, *model_path;
    int n_requests;
    uint64_t seed;
    double request_rate, burstiness;
    int max_concurrency, repeat;
} cb_bench_info;

struct cJSON;
/* {mean, p50, p90, p99, max, n} as a new cJSON object (the caller owns it). */
struct cJSON *cb_dist_json(const cb_dist *d);

/* Writes every figure as JSON: the run, each configuration's engine parameters and metrics, the
 * ceiling, the model (name, file, sha256, synthetic or real), the machine and llama.cpp's commit.
 * Returns 0 or -1. */
int cb_bench_write_json(const char *path, const cb_bench_info *info, const cb_bench_config *cfgs,
                        const cb_bench_result *res, int n, const cb_ceiling *ceil);

/* Writes throughput.svg, ttft_cdf.svg, itl_cdf.svg and steps.svg into dir (which must exist).
 * Returns 0 or -1. */
int cb_bench_write_plots(const char *dir, const cb_bench_config *cfgs, const cb_bench_result *res, int n);

/* Runs the workload (arrival times as set; concurrency > 0 caps requests in flight, closed loop).
 * A `sessions` workload runs as a chat client would, in tokens: a turn is sent think_s after the
 * answer to the turn before, its prompt the conversation so far (system prompt, then each turn's
 * message and answer as generated; no chat template between them). Returns 0, or -1 with a
 * message. */
int cb_bench_run(const cb_bench_config *cfg, const cb_workload *w, int concurrency, bool progress, cb_bench_result *out,
                 char *err, size_t errlen);
void cb_bench_result_free(cb_bench_result *r);

/* Scheduling efficiency = ideal time / wall time, where the ideal time for the workload's token
 * mix is  prompt_s  +  output tokens / decode tok/s at batch B, B = min(sequences the configuration
 * may run at once, requests that can run at once: at_once). prompt_s: the seconds the prompt tokens
 * the ideal computes take at their positions (cb_ceiling_prompt_seconds; a session workload's: the
 * system prompt once and each turn's new message after its conversation, the rest from the cache).
 * The ceiling must be measured at the workload's context. Only meaningful when every request (every
 * session) starts at once; sets r->ideal_s and r->efficiency. */
void cb_bench_efficiency(cb_bench_result *r, const cb_ceiling *c, int32_t max_seqs, int32_t at_once, double prompt_s);

/* The share of the steps' wall time spent outside llama_decode: (step_s - decode_s) / step_s, or -1
 * when the run had no steps. Time between steps (the engine waiting for work) is not in it. */
double cb_bench_host_share(const cb_bench_result *r);

/* Writes the trace: one line per step, cobatch_step_info's fields (config label, t_ms since the
 * first step, step_ms, decode_rows, prefill_tokens, requests, running, waiting, kv_cells,
 * preempted, graph_runs, swapped, lane_tokens, lane_ms, context_cells, embd_tokens, embd_ms,
 * decode_ms, attended_cells). */
void cb_bench_write_trace(FILE *f, const char *label, const cb_bench_result *r);
/* The trace's format, shared with `cobatch serve --trace`: a header line, then one tab-separated
 * line per step (t_ms counts from t0_us). */
void cb_trace_write_header(FILE *f);
void cb_trace_write_step(FILE *f, const char *label, int64_t t0_us, const struct cobatch_step_info *s);
/* A trace written while an engine runs (`cobatch serve --trace`, `cobatch batch --trace`): the
 * engine's on_step is cb_trace_sink_step with the sink as its user. */
typedef struct {
    FILE *f;
    const char *label; /* the config column */
    int64_t t0;        /* the first step's start */
} cb_trace_sink;
/* Opens path for writing and writes the header; false when it cannot. */
bool cb_trace_open(cb_trace_sink *t, const char *path, const char *label);
/* Engine thread: one line a step, flushed (readable while the engine runs, tail -f; one write a step). */
void cb_trace_sink_step(const struct cobatch_step_info *s, void *user);

/* A session workload's turns (w->n_sessions > 0): per turn, its requests' TTFT and how much of
 * their prompts the cache supplied (prompt[i], cached[i]: item i's prompt tokens and those read from
 * the cache; < 0 when not known), printed to f as a Markdown table and returned as a JSON array
 * (owned by the caller; NULL when out of memory). */
struct cJSON *cb_print_turns(FILE *f, const cb_workload *w, const cb_req_timeline *tl, const int32_t *prompt,
                             const int32_t *cached);

/* Prints a Markdown table of the results; speedups are against results[base]. */
void cb_bench_print_table(FILE *f, const cb_bench_config *cfgs, const cb_bench_result *res, int n, int base);

#endif
