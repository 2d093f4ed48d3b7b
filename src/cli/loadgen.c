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

int cb_cmd_loadgen(int argc, char **argv) {
    struct cobatch_engine_params ep = cobatch_engine_default_params();
    cb_wargs wa;
    cb_wargs_init(&wa);
    cb_loadgen_params lp = {.path = "/v1/completions"};
    const char *url = NULL, *json_path = NULL, *label = "server";
    const char *slos_arg = NULL;
    const cb_flag own[] = {
        {"--url", "URL", CB_FLAG_STR, &url, .help = "the server, http://HOST:PORT (http only)"},
        {"--endpoint", "PATH", CB_FLAG_STR, &lp.path,
         .help = "default /v1/completions (token-id prompts, streaming);\n/v1/chat/completions sends each prompt's "
                 "text as a user message"},
        {"--served-model", "NAME", CB_FLAG_STR, &lp.model, .help = "the \"model\" field to send (default: none)"},
        {"--api-key", "KEY", CB_FLAG_STR, &lp.api_key, .help = "sent as 'Authorization: Bearer KEY'"},
        {"-m, --model", "FILE", CB_FLAG_STR, &ep.model_path,
         .help = "the model whose tokenizer makes the prompts (default: the fetched\nSmolLM2-135M); the server "
                 "must serve the same model"},
        {"--goodput", "SLOS", CB_FLAG_STR, &slos_arg,
         .help = "e.g. ttft:500,tpot:50,e2el:10000 (ms): requests meeting all of them"},
        {"--label", "TEXT", CB_FLAG_STR, &label, .help = "the row's name in the table"},
        {"--json", "FILE", CB_FLAG_STR, &json_path, .help = "every figure as JSON"},
        {"--text-prompts", NULL, CB_FLAG_SET, &wa.text,
         .help = "send prompts as text (the tokens detokenized) instead of token ids:\nfor routers that take "
                 "text only (sglang-router)"},
    };
    cb_flag wfl[CB_WARGS_FLAGS];
    cb_cli cli = {.cmd = "cobatch loadgen",
                  .usage = "usage: cobatch loadgen --url http://HOST:PORT [flags]\n",
                  .groups = {{"loadgen", own, sizeof(own) / sizeof(own[0])}, cb_wargs_flags(wfl, &wa)},
                  .n_groups = 2};
    int pr = cb_flags_parse(&cli, argc, argv, stdout, stderr);
    if (pr != 0) return pr == 1 ? 0 : 2;
    char slos[256] = "";
    if (slos_arg) snprintf(slos, sizeof(slos), "%s", slos_arg);
    char host[256];
    int port = 80;
    if (!url || sscanf(url, "http://%255[^:/]:%d", host, &port) < 1 || port < 1 || port > 65535) {
        fprintf(stderr, "cobatch loadgen: give the server as --url http://HOST:PORT\n");
        return 2;
    }
    double slo_ttft = 0, slo_tpot = 0, slo_e2el = 0;
    if (slos[0] && !parse_slos(slos, &slo_ttft, &slo_tpot, &slo_e2el)) {
        fprintf(stderr, "cobatch loadgen: --goodput takes ttft:MS,tpot:MS,e2el:MS (any of them)\n");
        return 2;
    }
    lp.host = host;
    lp.port = port;
    bool chat = strstr(lp.path, "/chat/completions") != NULL;
    if (chat) wa.text = true; /* a message is text */
    if (!chat && wa.workload && !strcmp(wa.workload, "sessions") && !wa.file) {
        fprintf(stderr,
                "cobatch loadgen: the sessions workload is a conversation: give --endpoint /v1/chat/completions\n");
        return 2;
    }
    lp.concurrency = wa.concurrency;
    if (!ep.model_path) ep.model_path = cb_default_model();
    char err[512] = "", model_name[128];
    cb_workload w;
    if (cb_wargs_build(&wa, &ep, &w, model_name, sizeof(model_name), err, sizeof(err)) != 0) {
        fprintf(stderr, "cobatch loadgen: %s\n", err);
        return 2;
    }
    cb_loadgen_result r;
    double hits0 = 0, host0 = 0, hits1 = 0, host1 = 0; /* cobatch serve's cache counters, by tier */
    bool tiers = w.n_sessions > 0 && cb_loadgen_cache_hits(&lp, &hits0, &host0) == 0;
    if (cb_loadgen_run(&lp, &w, &r, err, sizeof(err)) != 0) {
        fprintf(stderr, "cobatch loadgen: %s\n", err);
        cb_workload_free(&w);
        return 1;
    }
    cb_metrics m;
    cb_metrics_compute(r.tl, (size_t)r.n, r.wall_s, &m);
    int64_t usage_tokens = 0, good = 0, failed = 0, cached = 0, cached_of = 0;
    for (int i = 0; i < r.n; i++) {
        const cb_req_timeline *t = &r.tl[i];
        if (!t->ok) {
            failed++;
            continue;
        }
        usage_tokens += r.usage_out[i] >= 0 ? r.usage_out[i] : t->n_out;
        if (r.usage_cached[i] >= 0) cached += r.usage_cached[i], cached_of += w.n_sessions ? t->n_in : w.items[i].n_in;
        double ttft = (double)(t->t_first_us - t->t_submit_us) / 1e3,
               e2el = (double)(t->t_finish_us - t->t_submit_us) / 1e3;
        double tpot = t->n_out > 1 ? (double)(t->t_finish_us - t->t_first_us) / 1e3 / (t->n_out - 1) : 0;
        good += (!slo_ttft || ttft <= slo_ttft) && (!slo_tpot || tpot <= slo_tpot) && (!slo_e2el || e2el <= slo_e2el);
    }
    double out_tps = usage_tokens / r.wall_s;
    printf("workload %s: %d requests to %s%s, %s", w.name, w.n, url, lp.path,
           wa.concurrency > 0 ? "closed loop"
           : wa.rate > 0      ? "open loop"
                              : "all at once");
    if (wa.concurrency > 0) printf(" (%d in flight)", wa.concurrency);
    if (wa.rate > 0) printf(" (%.2f req/s, burstiness %.2f)", wa.rate, wa.burstiness);
    printf("; prompts by %s\n\n", model_name);
    printf("| server | wall s | loadgen cpu s | failed | req/s | out tok/s | total tok/s | TTFT p50 / p90 / p99 ms | "
           "TPOT mean / p99 ms | ITL p50 / p99 ms | E2EL p50 / p99 ms | goodput req/s | prefix hit |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    char hit[24] = "-"; /* share of the prompt tokens the server said it had cached; - if it never said */
    if (cached_of > 0) snprintf(hit, sizeof(hit), "%.0f%%", 100.0 * (double)cached / (double)cached_of);
    printf("| %s | %.2f | %.2f | %lld | %.2f | %.1f | %.1f | %.0f / %.0f / %.0f | %.1f / %.1f | %.1f / %.1f | %.0f / "
           "%.0f | "
           "%s%.2f | %s |\n",
           label, r.wall_s, r.cpu_s, (long long)failed, m.req_per_s, out_tps,
           (m.input_tokens + usage_tokens) / r.wall_s, m.ttft_ms.p50, m.ttft_ms.p90, m.ttft_ms.p99, m.tpot_ms.mean,
           m.tpot_ms.p99, m.itl_ms.p50, m.itl_ms.p99, m.e2el_ms.p50, m.e2el_ms.p99, slos[0] ? "" : "(no SLO) ",
           good / r.wall_s, hit);
    cJSON *turns = w.n_sessions > 0 ? cb_print_turns(stdout, &w, r.tl, r.usage_prompt, r.usage_cached) : NULL;
    tiers = tiers && cb_loadgen_cache_hits(&lp, &hits1, &host1) == 0;
    if (tiers)
        printf("\nthe server's prefix cache over the run (its /metrics): %.0f prompt tokens, %.0f of them from its "
               "host tier\n",
               hits1 - hits0, host1 - host0);
    int rc = 0;
    if (json_path) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "label", label);
        cJSON_AddStringToObject(o, "url", url);
        cJSON_AddStringToObject(o, "workload", w.name);
        cJSON_AddNumberToObject(o, "requests", w.n);
        cJSON_AddNumberToObject(o, "request_rate", wa.rate);
        cJSON_AddNumberToObject(o, "max_concurrency", wa.concurrency);
        cJSON_AddNumberToObject(o, "wall_s", r.wall_s);
        cJSON_AddNumberToObject(o, "loadgen_cpu_s", r.cpu_s);
        cJSON_AddNumberToObject(o, "failed", (double)failed);
        cJSON *fs = cJSON_AddObjectToObject(o, "failed_by_status"); /* "0": no HTTP answer */
        for (int i = 0; fs && i < r.n; i++) {
            if (r.tl[i].ok) continue;
            char k[16];
            snprintf(k, sizeof(k), "%d", r.status[i]);
            cJSON *c = cJSON_GetObjectItemCaseSensitive(fs, k);
            if (c)
                cJSON_SetNumberValue(c, c->valuedouble + 1);
            else
                cJSON_AddNumberToObject(fs, k, 1);
        }
        cJSON_AddNumberToObject(o, "output_tokens", (double)usage_tokens);
        cJSON_AddNumberToObject(o, "prefix_cached_tokens", (double)cached); /* of the requests that reported it */
        cJSON_AddNumberToObject(o, "prefix_cached_of_prompt_tokens", (double)cached_of);
        cJSON_AddNumberToObject(o, "request_throughput", m.req_per_s);
        cJSON_AddNumberToObject(o, "output_throughput", out_tps);
        cJSON_AddNumberToObject(o, "goodput", good / r.wall_s);
        cJSON_AddItemToObject(o, "ttft_ms", cb_dist_json(&m.ttft_ms));
        cJSON_AddItemToObject(o, "tpot_ms", cb_dist_json(&m.tpot_ms));
        cJSON_AddItemToObject(o, "itl_ms", cb_dist_json(&m.itl_ms));
        cJSON_AddItemToObject(o, "e2el_ms", cb_dist_json(&m.e2el_ms));
        if (turns) cJSON_AddItemToObject(o, "turns", turns), turns = NULL;
        if (tiers) {
            cJSON_AddNumberToObject(o, "server_cache_hit_tokens", hits1 - hits0);
            cJSON_AddNumberToObject(o, "server_cache_host_hit_tokens", host1 - host0);
        }
        char *text = cJSON_Print(o);
        cJSON_Delete(o);
        FILE *f = fopen(json_path, "w");
        if (!f || !text || fputs(text, f) < 0) rc = 1;
        if (f) fclose(f);
        free(text);
    }
    cJSON_Delete(turns);
    cb_loadgen_result_free(&r);
    cb_workload_free(&w);
    return rc ? 1 : failed ? 1 : 0;
}
