#include "bench.h"
#include "../util/util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

/* Engine thread: append the step to the trace (read only after the engine is freed). */
static void on_step(const struct cobatch_step_info *info, void *user) {
    cb_bench_result *r = user;
    if (r->n_steps == r->steps_cap) {
        int cap = r->steps_cap ? r->steps_cap * 2 : 1024;
        struct cobatch_step_info *s = realloc(r->steps, sizeof(*s) * (size_t)cap);
        if (!s) return; /* the trace loses a step; the benchmark goes on */
        r->steps = s;
        r->steps_cap = cap;
    }
    r->steps[r->n_steps++] = *info;
}

static void progress_line(const char *label, int done, int n, double t) {
    fprintf(stderr, "\r%-40.40s %4d/%-4d requests  %6.1f s", label, done, n, t);
    fflush(stderr);
}

int cb_bench_run(const cb_bench_config *cfg, const cb_workload *w, int concurrency, bool progress, cb_bench_result *r,
                 char *err, size_t errlen) {
    memset(r, 0, sizeof(*r));
    r->ideal_s = r->efficiency = -1;
    r->n = w->n;
    r->tl = calloc((size_t)w->n, sizeof(*r->tl));
    if (!r->tl) return cb_set_err(err, errlen, "out of memory"), -1;
    for (int i = 0; i < w->n; i++) {
        r->tl[i].t_tokens_us = calloc((size_t)w->items[i].n_out + 1, sizeof(int64_t));
        r->tl[i].n_in = w->items[i].n_in;
        if (!r->tl[i].t_tokens_us) return cb_set_err(err, errlen, "out of memory"), -1;
    }
    struct cobatch_engine_params ep = cfg->engine;
    ep.on_step = on_step;
    ep.on_step_user = r;
    cobatch_engine *e = cobatch_engine_init(&ep, err, errlen);
    if (!e) return -1;

    progress = progress && isatty(STDERR_FILENO);
    double cpu0 = cpu_seconds();
    int64_t t0 = cobatch_time_us(), last_progress = 0;
    int next = 0, done = 0, in_flight = 0, rc = 0;
    while (done < w->n) {
        double now_s = (double)(cobatch_time_us() - t0) / 1e6;
        while (next < w->n && w->items[next].arrival_s <= now_s && (concurrency <= 0 || in_flight < concurrency)) {
            const cb_work_item *it = &w->items[next];
            struct cobatch_request_params p = cobatch_request_default_params();
            p.prompt_tokens = it->tokens;
            p.n_prompt_tokens = it->n_in;
            p.max_tokens = it->n_out;
            p.ignore_eos = true; /* exact output lengths */
            p.priority = it->priority;
            p.user_data = &r->tl[next];
            if (cobatch_submit(e, &p, err, errlen) <= 0) {
                rc = -1;
                goto out;
            }
            next++;
            in_flight++;
        }
        int timeout_ms = 100;
        if (next < w->n && (concurrency <= 0 || in_flight < concurrency)) {
            double wait = (w->items[next].arrival_s - now_s) * 1e3;
            timeout_ms = wait < 1 ? 1 : wait < 100 ? (int)wait : 100;
        }
        struct cobatch_event ev[64];
        int k = cobatch_poll(e, ev, 64, timeout_ms);
        for (int j = 0; j < k; j++) {
            cb_req_timeline *q = ev[j].user_data;
            if (ev[j].type == COBATCH_EVENT_TOKEN) {
                if (q->n_out < w->items[q - r->tl].n_out + 1) q->t_tokens_us[q->n_out] = ev[j].t_us;
                q->n_out++;
            } else {
                q->t_submit_us = ev[j].timings.t_submit_us;
                q->t_first_us = ev[j].timings.t_first_token_us;
                q->t_finish_us = ev[j].timings.t_finish_us;
                q->ok = ev[j].reason == COBATCH_FINISH_STOP || ev[j].reason == COBATCH_FINISH_LENGTH;
                done++;
                in_flight--;
            }
            cobatch_event_clear(&ev[j]);
        }
        int64_t now = cobatch_time_us();
        if (progress && now - last_progress > 250000) {
            progress_line(cfg->label, done, w->n, (double)(now - t0) / 1e6);
            last_progress = now;
        }
    }
out:
    r->wall_s = (double)(cobatch_time_us() - t0) / 1e6;
    r->cpu_s = cpu_seconds() - cpu0;
    cobatch_engine_stats(e, &r->stats);
    cobatch_engine_free(e);
    if (progress) fprintf(stderr, "\r%*s\r", 70, "");
    if (rc == 0 && cb_metrics_compute(r->tl, (size_t)r->n, r->wall_s, &r->m) != 0) {
        cb_set_err(err, errlen, "out of memory");
        rc = -1;
    }
    return rc;
}

void cb_bench_efficiency(cb_bench_result *r, const cb_ceiling *c, int32_t max_seqs) {
    int32_t b = max_seqs < r->n ? max_seqs : r->n;
    double pf = cb_ceiling_prefill(c), dc = cb_ceiling_decode(c, b);
    r->ideal_s = r->efficiency = -1;
    if (pf <= 0 || dc <= 0 || r->wall_s <= 0) return;
    r->ideal_s = (double)r->m.input_tokens / pf + (double)r->m.output_tokens / dc;
    r->efficiency = r->ideal_s / r->wall_s;
}

void cb_bench_result_free(cb_bench_result *r) {
    for (int i = 0; i < r->n && r->tl; i++)
        free(r->tl[i].t_tokens_us);
    free(r->tl);
    free(r->steps);
    memset(r, 0, sizeof(*r));
}

void cb_trace_write_header(FILE *f) {
    fputs("config\tt_ms\tstep_ms\tdecode_rows\tprefill_tokens\trequests\trunning\twaiting\tkv_cells\tpreempted\tgraph_"
          "runs\tswapped\tlane_tokens\tlane_ms\n",
          f);
}

void cb_trace_write_step(FILE *f, const char *label, int64_t t0_us, const struct cobatch_step_info *s) {
    fprintf(f, "%s\t%.3f\t%.3f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.3f\n", label,
            (double)(s->t_start_us - t0_us) / 1e3, (double)(s->t_end_us - s->t_start_us) / 1e3, s->decode_rows,
            s->prefill_tokens, s->n_requests, s->running, s->waiting, s->kv_used, s->preempted, s->graph_runs,
            s->swapped, s->lane_tokens, (double)s->lane_us / 1e3);
}

void cb_bench_write_trace(FILE *f, const char *label, const cb_bench_result *r) {
    for (int i = 0; i < r->n_steps; i++)
        cb_trace_write_step(f, label, r->steps[0].t_start_us, &r->steps[i]);
}

void cb_bench_print_table(FILE *f, const cb_bench_config *cfgs, const cb_bench_result *res, int n, int base) {
    fprintf(
        f,
        "| config | wall s | cpu s | speedup | req/s | out tok/s | total tok/s | TTFT p50 / p99 ms | "
        "TPOT mean ms | ITL p50 / p99 ms | E2EL p50 / p99 ms | sched eff | steps | preempt / swap | peak KV | wasted "
        "slots | prefix hit | prompt computed |\n");
    fprintf(f, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < n; i++) {
        const cb_bench_result *r = &res[i];
        const cb_metrics *m = &r->m;
        char eff[16] = "-";
        if (r->efficiency >= 0) snprintf(eff, sizeof(eff), "%.0f%%", r->efficiency * 100);
        char hit[16] = "-"; /* share of the admitted prompt tokens the prefix cache supplied */
        if (r->stats.prefix_query_tokens > 0)
            snprintf(hit, sizeof(hit), "%.0f%%",
                     100.0 * (double)r->stats.prefix_hit_tokens / r->stats.prefix_query_tokens);
        fprintf(f,
                "| %s | %.2f | %.2f | %.2fx | %.2f | %.1f | %.1f | %.0f / %.0f | %.1f | %.1f / %.1f | %.0f / %.0f | "
                "%s | %lld | %lld / %lld | %d | %lld | %s | %lld |\n",
                cfgs[i].label, r->wall_s, r->cpu_s, res[base].wall_s / r->wall_s, m->req_per_s, m->out_tok_per_s,
                m->total_tok_per_s, m->ttft_ms.p50, m->ttft_ms.p99, m->tpot_ms.mean, m->itl_ms.p50, m->itl_ms.p99,
                m->e2el_ms.p50, m->e2el_ms.p99, eff, (long long)r->stats.steps, (long long)r->stats.preemptions,
                (long long)r->stats.swapped_out, r->stats.kv_peak, (long long)r->stats.wasted_decode_slots, hit,
                (long long)r->stats.prompt_tokens);
    }
    for (int i = 0; i < n; i++)
        if (res[i].m.failed) fprintf(f, "\n%s: %d requests failed\n", cfgs[i].label, res[i].m.failed);
}
