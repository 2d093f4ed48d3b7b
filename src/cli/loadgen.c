/* loadgen.c — `cobatch loadgen --url URL`: measures any OpenAI-compatible server the way
 * `vllm bench serve` does. Prompts are sent as token ids made with the local model's tokenizer
 * (-m), so the server must run the same model. */
#include "../bench/bench.h"
#include "../bench/loadgen.h"
#include "../bench/metrics.h"
#include "args.h"
#include "cli.h"
#include "flags.h"
#include "wargs.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "ttft:500,tpot:50" -> limits in ms (<= 0: none). Returns false on a bad string. */
static bool parse_slos(char *s, double *ttft, double *tpot, double *e2el) {
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
        char *colon = strchr(tok, ':');
        double v;
        if (!colon || !cb_parse_float(colon + 1, 0, 1e9, &v)) return false;
        *colon = '\0';
        if (!strcmp(tok, "ttft"))
            *ttft = v;
        else if (!strcmp(tok, "tpot"))
            *tpot = v;
        else if (!strcmp(tok, "e2el"))
            *e2el = v;
        else
            return false;
    }
    return true;
}

/* What the flags asked for: the server, the workload, the goodput limits and the outputs. */
typedef struct {
    struct cobatch_engine_params ep;
    cb_wargs wa;
    cb_loadgen_params lp;
    const char *url, *json_path, *label;
    char slos[256], host[256];
    double slo_ttft, slo_tpot, slo_e2el; /* ms; 0: none */
} loadgen_opts;

/* What the answers came to: output tokens (as the server's usage says), requests that met the
 * goodput limits, failed ones, and prompt tokens the server said it had cached, of those asked. */
typedef struct {
    int64_t usage_tokens, good, failed, cached, cached_of;
} answer_counts;

/* Parses and checks the flags into o. Returns -1 to go on, or the exit code (0 after --help, 2 on a
 * bad flag). */
static int parse_loadgen_flags(int argc, char **argv, loadgen_opts *o) {
    *o = (loadgen_opts){.ep = cobatch_engine_default_params(), .lp = {.path = "/v1/completions"}, .label = "server"};
    cb_wargs_init(&o->wa);
    const char *slos_arg = NULL;
    const cb_flag own[] = {
        {"--url", "URL", CB_FLAG_STR, &o->url, .help = "the server, http://HOST:PORT (http only)"},
        {"--endpoint", "PATH", CB_FLAG_STR, &o->lp.path,
         .help = "default /v1/completions (token-id prompts, streaming);\n/v1/chat/completions sends each prompt's "
                 "text as a user message"},
        {"--served-model", "NAME", CB_FLAG_STR, &o->lp.model, .help = "the \"model\" field to send (default: none)"},
        {"--api-key", "KEY", CB_FLAG_STR, &o->lp.api_key, .help = "sent as 'Authorization: Bearer KEY'"},
        {"-m, --model", "FILE", CB_FLAG_STR, &o->ep.model_path,
         .help = "the model whose tokenizer makes the prompts (default: the fetched\nSmolLM2-135M); the server "
                 "must serve the same model"},
        {"--goodput", "SLOS", CB_FLAG_STR, &slos_arg,
         .help = "e.g. ttft:500,tpot:50,e2el:10000 (ms): requests meeting all of them"},
        {"--label", "TEXT", CB_FLAG_STR, &o->label, .help = "the row's name in the table"},
        {"--json", "FILE", CB_FLAG_STR, &o->json_path, .help = "every figure as JSON"},
        {"--prediction", NULL, CB_FLAG_SET, &o->lp.prediction,
         .help = "chat: send each request's prediction (the edit workload's file,\nOpenAI's Predicted Outputs)"},
        {"--timeout", "S", CB_FLAG_INT, &o->lp.timeout_s, 1, 86400,
         .help = "a request fails after S seconds without a byte from the server,\ndefault 600 (the OpenAI SDKs' "
                 "read timeout)"},
        {"--text-prompts", NULL, CB_FLAG_SET, &o->wa.text,
         .help = "send prompts as text (the tokens detokenized) instead of token ids:\nfor routers that take "
                 "text only (sglang-router)"},
    };
    cb_flag wfl[CB_WARGS_FLAGS];
    cb_cli cli = {.cmd = "cobatch loadgen",
                  .usage = "usage: cobatch loadgen --url http://HOST:PORT [flags]\n",
                  .groups = {{"loadgen", own, sizeof(own) / sizeof(own[0])}, cb_wargs_flags(wfl, &o->wa)},
                  .n_groups = 2};
    int pr = cb_flags_parse(&cli, argc, argv, stdout, stderr);
    if (pr != 0) return pr == 1 ? 0 : 2;
    if (slos_arg) snprintf(o->slos, sizeof(o->slos), "%s", slos_arg);
    int port = 80;
    if (!o->url || sscanf(o->url, "http://%255[^:/]:%d", o->host, &port) < 1 || port < 1 || port > 65535) {
        fprintf(stderr, "cobatch loadgen: give the server as --url http://HOST:PORT\n");
        return 2;
    }
    if (o->slos[0] && !parse_slos(o->slos, &o->slo_ttft, &o->slo_tpot, &o->slo_e2el)) {
        fprintf(stderr, "cobatch loadgen: --goodput takes ttft:MS,tpot:MS,e2el:MS (any of them)\n");
        return 2;
    }
    o->lp.host = o->host;
    o->lp.port = port;
    bool chat = strstr(o->lp.path, "/chat/completions") != NULL;
    if (chat) o->wa.text = true; /* a message is text */
    if (!chat && o->wa.workload && !strcmp(o->wa.workload, "sessions") && !o->wa.file) {
        fprintf(stderr,
                "cobatch loadgen: the sessions workload is a conversation: give --endpoint /v1/chat/completions\n");
        return 2;
    }
    o->lp.concurrency = o->wa.concurrency;
    if (!o->ep.model_path) o->ep.model_path = cb_default_model();
    return -1;
}

/* Counts r's answers: output tokens, goodput against o's limits, failures and cached prompt tokens. */
static answer_counts count_answers(const loadgen_opts *o, const cb_loadgen_result *r, const cb_workload *w) {
    answer_counts a = {0};
    for (int i = 0; i < r->n; i++) {
        const cb_req_timeline *t = &r->tl[i];
        if (!t->ok) {
            a.failed++;
            continue;
        }
        a.usage_tokens += r->usage_out[i] >= 0 ? r->usage_out[i] : t->n_out;
        if (r->usage_cached[i] >= 0)
            a.cached += r->usage_cached[i], a.cached_of += w->n_sessions ? t->n_in : w->items[i].n_in;
        double ttft = (double)(t->t_first_us - t->t_submit_us) / 1e3,
               e2el = (double)(t->t_finish_us - t->t_submit_us) / 1e3;
        double tpot = t->n_out > 1 ? (double)(t->t_finish_us - t->t_first_us) / 1e3 / (t->n_out - 1) : 0;
        a.good += (!o->slo_ttft || ttft <= o->slo_ttft) && (!o->slo_tpot || tpot <= o->slo_tpot) &&
                  (!o->slo_e2el || e2el <= o->slo_e2el);
    }
    return a;
}

/* Prints the run's line and its row of the table. */
static void print_row(const loadgen_opts *o, const cb_workload *w, const char *model_name, const cb_loadgen_result *r,
                      const cb_metrics *m, const answer_counts *a) {
    const cb_wargs *wa = &o->wa;
    double out_tps = a->usage_tokens / r->wall_s;
    printf("workload %s: %d requests to %s%s, %s", w->name, w->n, o->url, o->lp.path,
           wa->concurrency > 0 ? "closed loop"
           : wa->rate > 0      ? "open loop"
                               : "all at once");
    if (wa->concurrency > 0) printf(" (%d in flight)", wa->concurrency);
    if (wa->rate > 0) printf(" (%.2f req/s, burstiness %.2f)", wa->rate, wa->burstiness);
    printf("; prompts by %s\n\n", model_name);
    printf("| server | wall s | loadgen cpu s | failed | req/s | out tok/s | total tok/s | TTFT p50 / p90 / p99 ms | "
           "TPOT mean / p99 ms | ITL p50 / p99 ms | E2EL p50 / p99 ms | goodput req/s | prefix hit |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    char hit[24] = "-"; /* share of the prompt tokens the server said it had cached; - if it never said */
    if (a->cached_of > 0) snprintf(hit, sizeof(hit), "%.0f%%", 100.0 * (double)a->cached / (double)a->cached_of);
    printf("| %s | %.2f | %.2f | %lld | %.2f | %.1f | %.1f | %.0f / %.0f / %.0f | %.1f / %.1f | %.1f / %.1f | %.0f / "
           "%.0f | "
           "%s%.2f | %s |\n",
           o->label, r->wall_s, r->cpu_s, (long long)a->failed, m->req_per_s, out_tps,
           (m->input_tokens + a->usage_tokens) / r->wall_s, m->ttft_ms.p50, m->ttft_ms.p90, m->ttft_ms.p99,
           m->tpot_ms.mean, m->tpot_ms.p99, m->itl_ms.p50, m->itl_ms.p99, m->e2el_ms.p50, m->e2el_ms.p99,
           o->slos[0] ? "" : "(no SLO) ", a->good / r->wall_s, hit);
}

/* Writes every figure to o->json_path, taking *turns (set to NULL) into the report; cache_hits and
 * host_hits are the server's counters over the run when tiers. 0, or 1 when it cannot be written. */
static int write_json(const loadgen_opts *o, const cb_workload *w, const cb_loadgen_result *r, const cb_metrics *m,
                      const answer_counts *a, cJSON **turns, bool tiers, double cache_hits, double host_hits) {
    int rc = 0;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "label", o->label);
    cJSON_AddStringToObject(j, "url", o->url);
    cJSON_AddStringToObject(j, "workload", w->name);
    cJSON_AddNumberToObject(j, "requests", w->n);
    cJSON_AddNumberToObject(j, "request_rate", o->wa.rate);
    cJSON_AddNumberToObject(j, "max_concurrency", o->wa.concurrency);
    cJSON_AddNumberToObject(j, "wall_s", r->wall_s);
    cJSON_AddNumberToObject(j, "loadgen_cpu_s", r->cpu_s);
    cJSON_AddNumberToObject(j, "failed", (double)a->failed);
    cJSON *fs = cJSON_AddObjectToObject(j, "failed_by_status"); /* "0": no HTTP answer */
    for (int i = 0; fs && i < r->n; i++) {
        if (r->tl[i].ok) continue;
        char k[16];
        snprintf(k, sizeof(k), "%d", r->status[i]);
        cJSON *c = cJSON_GetObjectItemCaseSensitive(fs, k);
        if (c)
            cJSON_SetNumberValue(c, c->valuedouble + 1);
        else
            cJSON_AddNumberToObject(fs, k, 1);
    }
    cJSON_AddNumberToObject(j, "output_tokens", (double)a->usage_tokens);
    cJSON_AddNumberToObject(j, "prefix_cached_tokens", (double)a->cached); /* of the requests that reported it */
    cJSON_AddNumberToObject(j, "prefix_cached_of_prompt_tokens", (double)a->cached_of);
    cJSON_AddNumberToObject(j, "request_throughput", m->req_per_s);
    cJSON_AddNumberToObject(j, "output_throughput", a->usage_tokens / r->wall_s);
    cJSON_AddNumberToObject(j, "goodput", a->good / r->wall_s);
    cJSON_AddItemToObject(j, "ttft_ms", cb_dist_json(&m->ttft_ms));
    cJSON_AddItemToObject(j, "tpot_ms", cb_dist_json(&m->tpot_ms));
    cJSON_AddItemToObject(j, "itl_ms", cb_dist_json(&m->itl_ms));
    cJSON_AddItemToObject(j, "e2el_ms", cb_dist_json(&m->e2el_ms));
    if (*turns) cJSON_AddItemToObject(j, "turns", *turns), *turns = NULL;
    if (tiers) {
        cJSON_AddNumberToObject(j, "server_cache_hit_tokens", cache_hits);
        cJSON_AddNumberToObject(j, "server_cache_host_hit_tokens", host_hits);
    }
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    FILE *f = fopen(o->json_path, "w");
    if (!f || !text || fputs(text, f) < 0) rc = 1;
    if (f) fclose(f);
    free(text);
    return rc;
}

int cb_cmd_loadgen(int argc, char **argv) {
    loadgen_opts o;
    int pr = parse_loadgen_flags(argc, argv, &o);
    if (pr >= 0) return pr;
    char err[512] = "", model_name[128];
    cb_workload w;
    if (cb_wargs_build(&o.wa, &o.ep, &w, model_name, sizeof(model_name), err, sizeof(err)) != 0) {
        fprintf(stderr, "cobatch loadgen: %s\n", err);
        return 2;
    }
    cb_loadgen_result r;
    double hits0 = 0, host0 = 0, hits1 = 0, host1 = 0; /* cobatch serve's cache counters, by tier */
    bool tiers = w.n_sessions > 0 && cb_loadgen_cache_hits(&o.lp, &hits0, &host0) == 0;
    if (cb_loadgen_run(&o.lp, &w, &r, err, sizeof(err)) != 0) {
        fprintf(stderr, "cobatch loadgen: %s\n", err);
        cb_workload_free(&w);
        return 1;
    }
    cb_metrics m;
    if (cb_metrics_compute(r.tl, (size_t)r.n, r.wall_s, &m) != 0) {
        fprintf(stderr, "cobatch loadgen: out of memory computing the metrics\n");
        cb_loadgen_result_free(&r);
        cb_workload_free(&w);
        return 1;
    }
    answer_counts a = count_answers(&o, &r, &w);
    print_row(&o, &w, model_name, &r, &m, &a);
    cJSON *turns = w.n_sessions > 0 ? cb_print_turns(stdout, &w, r.tl, r.usage_prompt, r.usage_cached) : NULL;
    tiers = tiers && cb_loadgen_cache_hits(&o.lp, &hits1, &host1) == 0;
    if (tiers)
        printf("\nthe server's prefix cache over the run (its /metrics): %.0f prompt tokens, %.0f of them from its "
               "host tier\n",
               hits1 - hits0, host1 - host0);
    int rc = 0;
    if (o.json_path) rc = write_json(&o, &w, &r, &m, &a, &turns, tiers, hits1 - hits0, host1 - host0);
    cJSON_Delete(turns);
    cb_loadgen_result_free(&r);
    cb_workload_free(&w);
    return rc ? 1 : a.failed ? 1 : 0;
}
