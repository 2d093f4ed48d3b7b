#include "bench.h"
#include "../util/buf.h"
#include "../util/util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* This process's CPU time so far, user and system apart (every thread: the engine's, llama.cpp's
 * workers and the client's). */
static void cpu_seconds(double *user, double *sys) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *user = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6;
    *sys = (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/* Engine thread: append the step to the trace (read only after the engine is freed). */
static void on_step(const struct cobatch_step_info *info, void *user) {
    cb_bench_result *r = user;
    if (!cb_grow((void **)&r->steps, &r->steps_cap, (size_t)r->n_steps + 1, sizeof(*r->steps), 1024))
        return; /* the trace loses a step; the benchmark goes on */
    r->steps[r->n_steps++] = *info;
}

static void progress_line(const char *label, int done, int n, double t) {
    fprintf(stderr, "\r%-40.40s %4d/%-4d requests  %6.1f s", label, done, n, t);
    fflush(stderr);
}

/* A session workload's conversations (w->n_sessions > 0): each session's tokens so far, and each
 * request's answer as generated. */
typedef struct {
    int32_t **conv; /* (n_sessions) growable */
    int32_t *n_conv;
    size_t *cap_conv;
    int32_t **answer; /* (n) each request's generated tokens, n_out + 1 room */
} sessions;

static void sessions_free(sessions *ss, int n_sessions, int n) {
    for (int i = 0; ss->conv && i < n_sessions; i++)
        free(ss->conv[i]);
    for (int i = 0; ss->answer && i < n; i++)
        free(ss->answer[i]);
    free(ss->conv);
    free(ss->n_conv);
    free(ss->cap_conv);
    free(ss->answer);
}

static int sessions_init(sessions *ss, const cb_workload *w) {
    memset(ss, 0, sizeof(*ss));
    if (w->n_sessions == 0) return 0;
    ss->conv = calloc((size_t)w->n_sessions, sizeof(*ss->conv));
    ss->n_conv = calloc((size_t)w->n_sessions, sizeof(int32_t));
    ss->cap_conv = calloc((size_t)w->n_sessions, sizeof(size_t));
    ss->answer = calloc((size_t)w->n, sizeof(*ss->answer));
    if (!ss->conv || !ss->n_conv || !ss->cap_conv || !ss->answer) return -1;
    for (int i = 0; i < w->n; i++)
        if (!(ss->answer[i] = malloc(sizeof(int32_t) * ((size_t)w->items[i].n_out + 1)))) return -1;
    return 0;
}

static int conv_add(sessions *ss, int s, const int32_t *t, int32_t n) {
    if (!cb_grow((void **)&ss->conv[s], &ss->cap_conv[s], (size_t)ss->n_conv[s] + (size_t)n, sizeof(int32_t), 256))
        return -1;
    memcpy(ss->conv[s] + ss->n_conv[s], t, sizeof(int32_t) * (size_t)n);
    ss->n_conv[s] += n;
    return 0;
}

/* When item i may be sent, in seconds from t0: its arrival, or for a later turn of a session the
 * answer to the turn before plus the think time; -1 while that answer is to come, -2 when the turn
 * before failed (this one is not sent). */
static double ready_at(const cb_workload *w, const cb_bench_result *r, int i, int64_t t0) {
    const cb_work_item *it = &w->items[i];
    if (w->n_sessions == 0 || it->turn == 0) return it->arrival_s;
    const cb_req_timeline *b = &r->tl[i - w->n_sessions];
    if (!b->t_finish_us) return -1;
    if (!b->ok) return -2;
    return (double)(b->t_finish_us - t0) / 1e6 + w->think_s;
}

/* The prompt of session item i: the conversation so far with its message added (the turn before's
 * answer first). */
static int session_prompt(sessions *ss, const cb_workload *w, const cb_bench_result *r, int i) {
    const cb_work_item *it = &w->items[i];
    int s = it->session;
    if (it->turn == 0 && conv_add(ss, s, w->system_tokens, w->n_system) != 0) return -1;
    if (it->turn > 0) {
        int b = i - w->n_sessions;
        int32_t n = r->tl[b].n_out < w->items[b].n_out ? r->tl[b].n_out : w->items[b].n_out;
        if (conv_add(ss, s, ss->answer[b], n) != 0) return -1;
    }
    return conv_add(ss, s, it->tokens, it->n_in);
}

/* One run of a workload: its items' state between their submissions and their events. */
typedef struct {
    const cb_workload *w;
    cb_bench_result *r;
    cobatch_engine *e;
    bool *sent;      /* (n) submitted, or given up as failed */
    bool prediction; /* requests send their item's prediction (cb_bench_config.prediction) */
    sessions ss;
    int64_t t0;
    int first, done, in_flight; /* first: the first item not yet sent */
} bench_run;

/* Zeroes the result and makes room for its timelines and (of a session workload) the conversations.
 * 0, or -1 with a message. */
static int run_alloc(bench_run *run, char *err, size_t errlen) {
    const cb_workload *w = run->w;
    cb_bench_result *r = run->r;
    memset(r, 0, sizeof(*r));
    r->ideal_s = r->efficiency = -1;
    r->n = w->n;
    r->tl = calloc((size_t)w->n, sizeof(*r->tl));
    r->prompt = calloc((size_t)w->n, sizeof(int32_t));
    r->cached = calloc((size_t)w->n, sizeof(int32_t));
    run->sent = calloc((size_t)w->n, sizeof(bool));
    int rc = sessions_init(&run->ss, w);
    if (!r->tl || !r->prompt || !r->cached || !run->sent || rc != 0) {
        cb_set_err(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < w->n; i++) {
        r->tl[i].t_tokens_us = calloc((size_t)w->items[i].n_out + 1, sizeof(int64_t));
        r->tl[i].n_in = w->items[i].n_in;
        if (!r->tl[i].t_tokens_us) {
            cb_set_err(err, errlen, "out of memory");
            return -1;
        }
    }
    return 0;
}

/* Submits the items that are due at now_s, while concurrency allows; lowers *wait_s to the time
 * until the next one is. 0, or -1 with a message. */
static int submit_ready(bench_run *run, int concurrency, double now_s, double *wait_s, char *err, size_t errlen) {
    const cb_workload *w = run->w;
    cb_bench_result *r = run->r;
    /* in arrival order; a session's turns each when the turn before is answered */
    for (int i = run->first; i < w->n && (concurrency <= 0 || run->in_flight < concurrency); i++) {
        if (run->sent[i]) continue;
        double at = ready_at(w, r, i, run->t0);
        if (at == -2) { /* the turn before failed: this one counts as failed, unsent (and so the next) */
            run->sent[i] = true;
            r->tl[i].t_finish_us = cobatch_time_us();
            run->done++;
            continue;
        }
        if (at < 0 || at > now_s) {
            if (at > now_s && at - now_s < *wait_s) *wait_s = at - now_s;
            if (w->n_sessions == 0) break;
            continue;
        }
        const cb_work_item *it = &w->items[i];
        struct cobatch_request_params p = cobatch_request_default_params();
        p.prompt_tokens = it->tokens;
        p.n_prompt_tokens = it->n_in;
        if (w->n_sessions > 0) {
            if (session_prompt(&run->ss, w, r, i) != 0) {
                cb_set_err(err, errlen, "out of memory");
                return -1;
            }
            p.prompt_tokens = run->ss.conv[it->session];
            p.n_prompt_tokens = r->tl[i].n_in = run->ss.n_conv[it->session];
        }
        p.max_tokens = it->n_out;
        p.ignore_eos = true; /* exact output lengths */
        if (run->prediction) p.prediction = it->prediction;
        p.priority = it->priority;
        p.user_data = &r->tl[i];
        struct cobatch_error refused = {0};
        cobatch_req_id id = cobatch_submit(run->e, &p, &refused);
        if (id == COBATCH_ERR_TOO_LONG && w->n_sessions > 0) { /* the conversation outgrew the context: */
            run->sent[i] = true; /* it ends here, failed, as a client's would (its later turns with it) */
            r->tl[i].t_submit_us = r->tl[i].t_finish_us = cobatch_time_us();
            run->done++;
            continue;
        }
        if (id <= 0) {
            cb_set_err(err, errlen, "%s", refused.message);
            return -1;
        }
        run->sent[i] = true;
        run->in_flight++;
    }
    while (run->first < w->n && run->sent[run->first])
        run->first++;
    return 0;
}

/* Waits up to timeout_ms for the engine's events and records them: each token's time (and token, of
 * a session workload), each finished request's timings and prompt. */
static void take_events(bench_run *run, int timeout_ms) {
    const cb_workload *w = run->w;
    cb_bench_result *r = run->r;
    struct cobatch_event ev[64];
    int k = cobatch_poll(run->e, ev, 64, timeout_ms);
    for (int j = 0; j < k; j++) {
        cb_req_timeline *q = ev[j].user_data;
        int i = (int)(q - r->tl);
        if (ev[j].type == COBATCH_EVENT_TOKEN) {
            if (q->n_out < w->items[i].n_out + 1) {
                q->t_tokens_us[q->n_out] = ev[j].t_us;
                if (run->ss.answer) run->ss.answer[i][q->n_out] = ev[j].token;
            }
            q->n_out++;
        } else {
            q->t_submit_us = ev[j].timings.t_submit_us;
            q->t_first_us = ev[j].timings.t_first_token_us;
            q->t_finish_us = ev[j].timings.t_finish_us;
            q->ok = ev[j].reason == COBATCH_FINISH_STOP || ev[j].reason == COBATCH_FINISH_LENGTH;
            r->prompt[i] = ev[j].n_prompt;
            r->cached[i] = ev[j].n_cached;
            run->done++;
            run->in_flight--;
        }
        cobatch_event_clear(&ev[j]);
    }
}

int cb_bench_run(const cb_bench_config *cfg, const cb_workload *w, int concurrency, bool progress, cb_bench_result *r,
                 char *err, size_t errlen) {
    bench_run run = {.w = w, .r = r, .prediction = cfg->prediction};
    int rc = run_alloc(&run, err, errlen);
    if (rc != 0) goto early;
    struct cobatch_engine_params ep = cfg->engine;
    ep.on_step = on_step;
    ep.on_step_user = r;
    run.e = cobatch_engine_init(&ep, err, errlen);
    if (!run.e) {
        rc = -1;
        goto early;
    }

    progress = progress && isatty(STDERR_FILENO);
    double user0, sys0, user1, sys1;
    cpu_seconds(&user0, &sys0);
    run.t0 = cobatch_time_us();
    int64_t last_progress = 0;
    while (run.done < w->n) {
        double now_s = (double)(cobatch_time_us() - run.t0) / 1e6, wait_s = 0.1;
        if (submit_ready(&run, concurrency, now_s, &wait_s, err, errlen) != 0) {
            rc = -1;
            break;
        }
        int timeout_ms = wait_s * 1e3 < 1 ? 1 : (int)(wait_s * 1e3);
        take_events(&run, timeout_ms);
        int64_t now = cobatch_time_us();
        if (progress && now - last_progress > 250000) {
            progress_line(cfg->label, run.done, w->n, (double)(now - run.t0) / 1e6);
            last_progress = now;
        }
    }
    r->wall_s = (double)(cobatch_time_us() - run.t0) / 1e6;
    cpu_seconds(&user1, &sys1);
    r->cpu_user_s = user1 - user0;
    r->cpu_s = r->cpu_user_s + (sys1 - sys0);
    cobatch_engine_stats(run.e, &r->stats);
    cobatch_kv_info(run.e, &r->kv);
    cobatch_engine_free(run.e);
    for (int i = 0; i < r->n_steps; i++) { /* (the engine thread is done with the trace) */
        r->step_s += (double)(r->steps[i].t_end_us - r->steps[i].t_start_us) / 1e6;
        r->decode_s += (double)r->steps[i].decode_us / 1e6;
    }
    if (progress) fprintf(stderr, "\r%*s\r", 70, "");
    if (rc == 0 && cb_metrics_compute(r->tl, (size_t)r->n, r->wall_s, &r->m) != 0) {
        cb_set_err(err, errlen, "out of memory");
        rc = -1;
    }
early:
    sessions_free(&run.ss, w->n_sessions, w->n);
    free(run.sent);
    return rc;
}

void cb_bench_efficiency(cb_bench_result *r, const cb_ceiling *c, int32_t max_seqs, int32_t at_once, double prompt_s) {
    int32_t b = max_seqs < at_once ? max_seqs : at_once;
    double pf = cb_ceiling_prefill(c), dc = cb_ceiling_decode(c, b);
    r->ideal_s = r->efficiency = -1;
    if (pf <= 0 || dc <= 0 || r->wall_s <= 0 || prompt_s < 0) return;
    r->ideal_s = prompt_s + (double)r->m.output_tokens / dc;
    r->efficiency = r->ideal_s / r->wall_s;
}

void cb_bench_result_free(cb_bench_result *r) {
    for (int i = 0; i < r->n && r->tl; i++)
        free(r->tl[i].t_tokens_us);
    free(r->tl);
    free(r->steps);
    free(r->prompt);
    free(r->cached);
    memset(r, 0, sizeof(*r));
}

void cb_trace_write_header(FILE *f) {
    fputs("config\tt_ms\tstep_ms\tdecode_rows\tprefill_tokens\trequests\trunning\twaiting\tkv_cells\tpreempted\tgraph_"
          "runs\tswapped\tlane_tokens\tlane_ms\tcontext_cells\tembd_tokens\tembd_ms\tdecode_ms\tattended_cells\tdraft_"
          "rows\n",
          f);
}

void cb_trace_write_step(FILE *f, const char *label, int64_t t0_us, const struct cobatch_step_info *s) {
    fprintf(f, "%s\t%.3f\t%.3f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.3f\t%d\t%d\t%.3f\t%.3f\t%lld\t%d\n", label,
            (double)(s->t_start_us - t0_us) / 1e3, (double)(s->t_end_us - s->t_start_us) / 1e3, s->decode_rows,
            s->prefill_tokens, s->n_requests, s->running, s->waiting, s->kv_used, s->preempted, s->graph_runs,
            s->swapped, s->lane_tokens, (double)s->lane_us / 1e3, s->context_cells, s->embd_tokens,
            (double)s->embd_us / 1e3, (double)s->decode_us / 1e3, (long long)s->attended_cells, s->draft_rows);
}

bool cb_trace_open(cb_trace_sink *t, const char *path, const char *label) {
    *t = (cb_trace_sink){.f = fopen(path, "w"), .label = label};
    if (t->f) cb_trace_write_header(t->f);
    return t->f != NULL;
}

void cb_trace_sink_step(const struct cobatch_step_info *s, void *user) {
    cb_trace_sink *t = user;
    if (!t->t0) t->t0 = s->t_start_us;
    cb_trace_write_step(t->f, t->label, t->t0, s);
    fflush(t->f);
}

void cb_bench_write_trace(FILE *f, const char *label, const cb_bench_result *r) {
    for (int i = 0; i < r->n_steps; i++)
        cb_trace_write_step(f, label, r->steps[0].t_start_us, &r->steps[i]);
}

double cb_bench_host_share(const cb_bench_result *r) {
    return r->step_s > 0 ? (r->step_s - r->decode_s) / r->step_s : -1;
}

int cb_bench_lane_steps(const cb_bench_result *r) {
    int n = 0;
    for (int i = 0; i < r->n_steps; i++)
        n += r->steps[i].lane_tokens > 0;
    return n;
}

void cb_bench_print_table(FILE *f, const cb_bench_config *cfgs, const cb_bench_result *res, int n, int base) {
    fprintf(f,
            "| config | wall s | cpu s | cpu user s | speedup | req/s | out tok/s | total tok/s | TTFT p50 / p99 ms | "
            "TPOT mean ms | ITL p50 / p99 ms | E2EL p50 / p99 ms | sched eff | steps | host %% | preempt / swap | "
            "peak KV | wasted slots | prefix hit | prompt computed |\n");
    fprintf(f, "|---|");
    for (int c = 1; c < 20; c++)
        fprintf(f, "---:|");
    fprintf(f, "\n");
    for (int i = 0; i < n; i++) {
        const cb_bench_result *r = &res[i];
        const cb_metrics *m = &r->m;
        char eff[16] = "-";
        if (r->efficiency >= 0) snprintf(eff, sizeof(eff), "%.0f%%", r->efficiency * 100);
        char steps[48]; /* the steps, and of them those that ran the long lane's graph */
        int lane = cb_bench_lane_steps(r);
        int at = snprintf(steps, sizeof(steps), "%lld", (long long)r->stats.steps);
        if (lane) snprintf(steps + at, sizeof(steps) - (size_t)at, " (lane %d)", lane);
        char host[16] = "-"; /* the steps' time outside llama_decode */
        if (cb_bench_host_share(r) >= 0) snprintf(host, sizeof(host), "%.1f%%", cb_bench_host_share(r) * 100);
        char hit[16] = "-"; /* share of the admitted prompt tokens the prefix cache supplied */
        if (r->stats.prefix_query_tokens > 0)
            snprintf(hit, sizeof(hit), "%.0f%%",
                     100.0 * (double)r->stats.prefix_hit_tokens / r->stats.prefix_query_tokens);
        fprintf(f,
                "| %s | %.2f | %.2f | %.2f | %.2fx | %.2f | %.1f | %.1f | %.0f / %.0f | %.1f | %.1f / %.1f | %.0f / "
                "%.0f | %s | %s | %s | %lld / %lld | %d | %lld | %s | %lld |\n",
                cfgs[i].label, r->wall_s, r->cpu_s, r->cpu_user_s, res[base].wall_s / r->wall_s, m->req_per_s,
                m->out_tok_per_s, m->total_tok_per_s, m->ttft_ms.p50, m->ttft_ms.p99, m->tpot_ms.mean, m->itl_ms.p50,
                m->itl_ms.p99, m->e2el_ms.p50, m->e2el_ms.p99, eff, steps, host, (long long)r->stats.preemptions,
                (long long)r->stats.swapped_out, r->stats.kv_peak, (long long)r->stats.wasted_decode_slots, hit,
                (long long)r->stats.prompt_tokens);
    }
    for (int i = 0; i < n; i++)
        if (res[i].m.failed) fprintf(f, "\n%s: %d requests failed\n", cfgs[i].label, res[i].m.failed);
}
