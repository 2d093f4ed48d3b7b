/* report.c — the JSON report of `cobatch bench --json`, and the table of a session workload's turns. */
#include "../util/sha256.h"
#include "bench.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef COBATCH_LLAMA_COMMIT
#define COBATCH_LLAMA_COMMIT "unknown"
#endif

cJSON *cb_dist_json(const cb_dist *d) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "mean", d->mean);
    cJSON_AddNumberToObject(o, "p50", d->p50);
    cJSON_AddNumberToObject(o, "p90", d->p90);
    cJSON_AddNumberToObject(o, "p99", d->p99);
    cJSON_AddNumberToObject(o, "max", d->max);
    cJSON_AddNumberToObject(o, "n", (double)d->n);
    return o;
}

static const char *mode_name(enum cobatch_mode m) {
    return m == COBATCH_MODE_SEQUENTIAL ? "sequential" : m == COBATCH_MODE_STATIC ? "static" : "continuous";
}

static cJSON *machine(void) {
    cJSON *o = cJSON_CreateObject();
    char cpu[256] = "unknown", line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof(line), f)) {
        char *colon = strchr(line, ':');
        if (!strncmp(line, "model name", 10) && colon) {
            snprintf(cpu, sizeof(cpu), "%s", colon + 2);
            cpu[strcspn(cpu, "\n")] = '\0';
            break;
        }
    }
    if (f) fclose(f);
    cJSON_AddStringToObject(o, "cpu", cpu);
    cJSON_AddNumberToObject(o, "cores", (double)sysconf(_SC_NPROCESSORS_ONLN));
    cJSON_AddStringToObject(o, "llama_cpp_commit", COBATCH_LLAMA_COMMIT);
    return o;
}

static cJSON *config(const cb_bench_config *c) {
    const struct cobatch_engine_params *p = &c->engine;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "label", c->label);
    cJSON_AddStringToObject(o, "mode", mode_name(p->mode));
    cJSON_AddNumberToObject(o, "prefill_chunk", p->prefill_chunk);
    cJSON_AddNumberToObject(o, "max_num_seqs", cobatch_params_max_num_seqs(p));
    cJSON_AddNumberToObject(o, "max_num_batched_tokens", p->max_num_batched_tokens);
    cJSON_AddNumberToObject(o, "n_ctx", p->n_ctx);
    cJSON_AddNumberToObject(o, "n_threads", p->n_threads);
    cJSON_AddNumberToObject(o, "kv_reserve", p->kv_reserve);
    cJSON_AddStringToObject(o, "kv_layout", p->kv_layout == COBATCH_KV_SPLIT ? "split" : "unified");
    struct cobatch_engine_params run = *p; /* the attention path auto made (measured or cached) */
    cobatch_params_resolve(&run);
    cJSON_AddBoolToObject(o, "flash_attn", run.flash_attn != 0);
    cJSON_AddStringToObject(o, "cache_type_k", cobatch_kv_type_name(run.cache_type_k));
    cJSON_AddStringToObject(o, "cache_type_v", cobatch_kv_type_name(run.cache_type_v));
    cJSON_AddStringToObject(o, "spec",
                            p->spec == COBATCH_SPEC_NGRAM       ? "ngram"
                            : p->spec == COBATCH_SPEC_NGRAM_OWN ? "ngram-own"
                                                                : "off");
    cJSON_AddNumberToObject(o, "spec_max", p->spec_max > 0 ? p->spec_max : 8);
    cJSON_AddBoolToObject(o, "prediction", c->prediction);
    return o;
}

static cJSON *result(const cb_bench_result *r) {
    const cb_metrics *m = &r->m;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "wall_s", r->wall_s);
    cJSON_AddNumberToObject(o, "spec_drafted", (double)r->stats.spec_drafted);
    cJSON_AddNumberToObject(o, "spec_accepted", (double)r->stats.spec_accepted);
    cJSON_AddNumberToObject(o, "cpu_s", r->cpu_s);
    cJSON_AddNumberToObject(o, "cpu_user_s", r->cpu_user_s);
    cJSON_AddNumberToObject(o, "kv_bytes", (double)r->kv.kv_bytes);
    cJSON_AddNumberToObject(o, "completed", m->completed);
    cJSON_AddNumberToObject(o, "failed", m->failed);
    cJSON_AddNumberToObject(o, "input_tokens", (double)m->input_tokens);
    cJSON_AddNumberToObject(o, "output_tokens", (double)m->output_tokens);
    cJSON_AddNumberToObject(o, "request_throughput", m->req_per_s);
    cJSON_AddNumberToObject(o, "output_throughput", m->out_tok_per_s);
    cJSON_AddNumberToObject(o, "total_token_throughput", m->total_tok_per_s);
    cJSON_AddItemToObject(o, "ttft_ms", cb_dist_json(&m->ttft_ms));
    cJSON_AddItemToObject(o, "tpot_ms", cb_dist_json(&m->tpot_ms));
    cJSON_AddItemToObject(o, "itl_ms", cb_dist_json(&m->itl_ms));
    cJSON_AddItemToObject(o, "e2el_ms", cb_dist_json(&m->e2el_ms));
    if (r->efficiency >= 0) {
        cJSON_AddNumberToObject(o, "ideal_s", r->ideal_s);
        cJSON_AddNumberToObject(o, "scheduling_efficiency", r->efficiency);
    }
    cJSON_AddNumberToObject(o, "steps", (double)r->stats.steps);
    cJSON_AddNumberToObject(o, "lane_steps", cb_bench_lane_steps(r));
    cJSON_AddNumberToObject(o, "step_s", r->step_s); /* the steps' wall time, and of it llama_decode's */
    cJSON_AddNumberToObject(o, "decode_s", r->decode_s);
    if (cb_bench_host_share(r) >= 0) cJSON_AddNumberToObject(o, "host_share", cb_bench_host_share(r));
    cJSON_AddNumberToObject(o, "preemptions", (double)r->stats.preemptions);
    cJSON_AddNumberToObject(o, "preemptions_swapped", (double)r->stats.swapped_out);
    cJSON_AddNumberToObject(o, "preemptions_recomputed", (double)r->stats.recomputed);
    cJSON_AddNumberToObject(o, "swapped_in", (double)r->stats.swapped_in);
    cJSON_AddNumberToObject(o, "swap_peak_bytes", (double)r->stats.swap_peak_bytes);
    cJSON_AddNumberToObject(o, "swap_copied_bytes", (double)r->stats.swap_copied_bytes);
    cJSON_AddNumberToObject(o, "swap_copy_ms", (double)r->stats.swap_copy_us / 1e3);
    cJSON_AddNumberToObject(o, "decode_retries", (double)r->stats.decode_retries);
    cJSON_AddNumberToObject(o, "kv_peak_cells", r->stats.kv_peak);
    cJSON_AddNumberToObject(o, "kv_total_cells", r->stats.kv_total);
    cJSON_AddNumberToObject(o, "wasted_decode_slots", (double)r->stats.wasted_decode_slots);
    cJSON_AddNumberToObject(o, "stream_moves", (double)r->stats.stream_moves);
    cJSON_AddNumberToObject(o, "prompt_tokens_computed", (double)r->stats.prompt_tokens);
    cJSON_AddNumberToObject(o, "prefix_query_tokens", (double)r->stats.prefix_query_tokens);
    cJSON_AddNumberToObject(o, "prefix_hit_tokens", (double)r->stats.prefix_hit_tokens);
    cJSON *all = cJSON_AddObjectToObject(o, "engine_stats"); /* every statistic, by its field's name */
#define CB_STAT_JSON(type, field, kind, metric, help, source)                                                          \
    cJSON_AddNumberToObject(all, #field, (double)r->stats.field);
    COBATCH_STATS(CB_STAT_JSON)
#undef CB_STAT_JSON
    return o;
}

static cJSON *ceiling(const cb_ceiling *c) {
    cJSON *o = cJSON_CreateObject(), *pf = cJSON_CreateArray(), *dc = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "weight_buffer_types", c->weight_bufts);
    for (int i = 0; i < c->n_chunk; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "chunk", c->chunk[i]);
        cJSON_AddNumberToObject(e, "tok_per_s", c->prefill_tps[i]);
        cJSON_AddItemToArray(pf, e);
    }
    for (int i = 0; i < c->n_batch; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "batch", c->batch[i]);
        cJSON_AddNumberToObject(e, "tok_per_s", c->decode_tps[i]);
        cJSON_AddItemToArray(dc, e);
    }
    cJSON_AddItemToObject(o, "prefill", pf);
    cJSON_AddItemToObject(o, "decode", dc);
    cJSON_AddNumberToObject(o, "decode_context", c->context);
    cJSON_AddNumberToObject(o, "prefill_growth_s_per_token_per_token", c->prefill_growth);
    return o;
}

int cb_bench_write_json(const char *path, const cb_bench_info *info, const cb_bench_config *cfgs,
                        const cb_bench_result *res, int n, const cb_ceiling *ceil) {
    cJSON *root = cJSON_CreateObject();
    cJSON *run = cJSON_AddObjectToObject(root, "run");
    cJSON_AddStringToObject(run, "workload", info->workload);
    cJSON_AddNumberToObject(run, "requests", info->n_requests);
    cJSON_AddNumberToObject(run, "seed", (double)info->seed);
    cJSON_AddNumberToObject(run, "request_rate", info->request_rate); /* 0: all at once */
    cJSON_AddNumberToObject(run, "burstiness", info->burstiness);
    cJSON_AddNumberToObject(run, "max_concurrency", info->max_concurrency);
    cJSON_AddNumberToObject(run, "repeat", info->repeat);
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "name", info->model_name);
    cJSON_AddStringToObject(model, "file", info->model_path);
    char hex[65] = "";
    if (cb_sha256_file(info->model_path, hex) == 0) cJSON_AddStringToObject(model, "sha256", hex);
    /* cobatch mkmodel names its models "synthetic ..." */
    cJSON_AddBoolToObject(model, "synthetic", strstr(info->model_name, "synthetic") != NULL);
    cJSON_AddItemToObject(root, "machine", machine());
    if (ceil && ceil->n_chunk) cJSON_AddItemToObject(root, "ceiling", ceiling(ceil));
    cJSON *arr = cJSON_AddArrayToObject(root, "configurations");
    for (int i = 0; i < n; i++) {
        cJSON *c = config(&cfgs[i]);
        cJSON_AddItemToObject(c, "result", result(&res[i]));
        cJSON_AddItemToArray(arr, c);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return -1;
    FILE *f = fopen(path, "w");
    int rc = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF ? 0 : -1;
    if (f && fclose(f) != 0) rc = -1;
    free(text);
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

cJSON *cb_print_turns(FILE *f, const cb_workload *w, const cb_req_timeline *tl, const int32_t *prompt,
                      const int32_t *cached) {
    int n_turns = w->n / w->n_sessions;
    double *ttft = malloc(sizeof(double) * (size_t)w->n_sessions);
    cJSON *arr = cJSON_CreateArray();
    fprintf(f, "\n| turn | requests | failed | TTFT p50 / p90 ms | prompt tokens (mean) | computed (sum) | read from "
               "the cache |\n|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int t = 0; ttft && arr && t < n_turns; t++) {
        int ok = 0;
        int64_t in = 0, hit = 0;
        for (int s = 0; s < w->n_sessions; s++) {
            int i = t * w->n_sessions + s;
            if (!tl[i].ok) continue;
            ttft[ok++] = (double)(tl[i].t_first_us - tl[i].t_submit_us) / 1e3;
            in += prompt[i] > 0 ? prompt[i] : 0;
            hit += cached[i] > 0 ? cached[i] : 0;
        }
        qsort(ttft, (size_t)ok, sizeof(double), cmp_double);
        double p50 = ok ? ttft[(ok - 1) / 2] : 0, p90 = ok ? ttft[(int)((ok - 1) * 0.9)] : 0;
        fprintf(f, "| %d | %d | %d | %.0f / %.0f | %.0f | %lld | %.0f%% |\n", t + 1, w->n_sessions, w->n_sessions - ok,
                p50, p90, ok ? (double)in / ok : 0, (long long)(in - hit), in ? 100.0 * (double)hit / (double)in : 0);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "turn", t + 1);
        cJSON_AddNumberToObject(o, "failed", w->n_sessions - ok);
        cJSON_AddNumberToObject(o, "ttft_p50_ms", p50);
        cJSON_AddNumberToObject(o, "ttft_p90_ms", p90);
        cJSON_AddNumberToObject(o, "prompt_tokens", (double)in);
        cJSON_AddNumberToObject(o, "cached_tokens", (double)hit);
        cJSON_AddItemToArray(arr, o);
    }
    free(ttft);
    return arr;
}
