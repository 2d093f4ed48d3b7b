#include "metrics.h"
#include "../openai/dialect.h"
#include "../util/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double TTFT_B[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80};
static const double ITL_B[] = {0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1, 2.5, 5};
static const double E2E_B[] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320};
static const double QUEUE_B[] = {0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80};

#define NB(a) ((int)(sizeof(a) / sizeof((a)[0])))

void cb_srv_metrics_init(cb_srv_metrics *m) {
    memset(m, 0, sizeof(*m));
    m->ttft = (cb_srv_hist){.bounds = TTFT_B, .n = NB(TTFT_B)};
    m->itl = (cb_srv_hist){.bounds = ITL_B, .n = NB(ITL_B)};
    m->e2e = (cb_srv_hist){.bounds = E2E_B, .n = NB(E2E_B)};
    m->queue = (cb_srv_hist){.bounds = QUEUE_B, .n = NB(QUEUE_B)};
}

void cb_srv_hist_observe(cb_srv_hist *h, double v) {
    int i = 0;
    while (i < h->n && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

static void gauge(cb_buf *b, const char *name, const char *help, const char *model, double v) {
    cb_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s{model_name=\"%s\"} %.17g\n", name, help, name, name, model, v);
}

static void counter(cb_buf *b, const char *name, const char *help, const char *model, double v) {
    cb_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s{model_name=\"%s\"} %.17g\n", name, help, name, name, model,
                  v);
}

static void hist(cb_buf *b, const char *name, const char *help, const char *model, const cb_srv_hist *h) {
    cb_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->counts[i];
        cb_buf_printf(b, "%s_bucket{model_name=\"%s\",le=\"%g\"} %llu\n", name, model, h->bounds[i],
                      (unsigned long long)cum);
    }
    cum += h->counts[h->n];
    cb_buf_printf(b, "%s_bucket{model_name=\"%s\",le=\"+Inf\"} %llu\n", name, model, (unsigned long long)cum);
    cb_buf_printf(b, "%s_sum{model_name=\"%s\"} %.17g\n%s_count{model_name=\"%s\"} %llu\n", name, model, h->sum, name,
                  model, (unsigned long long)h->count);
}

/* The HTTP side: requests, refusals, connections, streams. */
static void http_part(cb_buf *bp, const cb_srv_metrics *m, const cb_srv_gauges *g, const char *model) {
    counter(bp, "cobatch:http_requests_total", "HTTP requests received.", model, (double)m->http_requests);
    counter(bp, "cobatch:http_client_errors_total", "HTTP 4xx answers.", model, (double)m->http_errors_4xx);
    counter(bp, "cobatch:http_server_errors_total", "HTTP 5xx answers.", model, (double)m->http_errors_5xx);
    counter(bp, "cobatch:rejected_queue_full_total", "Requests refused because the queue was full.", model,
            (double)m->rejected_queue_full);
    counter(bp, "cobatch:rejected_busy_total", "Requests refused because the parsing worker had its most jobs.", model,
            (double)m->rejected_busy);
    counter(bp, "cobatch:client_gone_total", "Requests cancelled because their client closed the connection.", model,
            (double)m->client_gone);
    counter(bp, "cobatch:slow_clients_total", "Streams dropped because their client left too much unread.", model,
            (double)m->slow_clients);
    counter(bp, "cobatch:hosted_tools_offered_total",
            "Hosted tools (web search, file search, ...; Anthropic's server tools) offered in requests, taken as "
            "offers this server never calls.",
            model, (double)cb_dialect_offers);
    counter(bp, "cobatch:sse_pings_total", "Keep-alives sent on streams with no output for the ping interval.", model,
            (double)m->sse_pings);
    gauge(bp, "cobatch:http_connections", "Open HTTP connections.", model, g->connections);
    counter(bp, "cobatch:http_connections_total", "HTTP connections accepted.", model, (double)g->accepted);
    counter(bp, "cobatch:http_connections_refused_total",
            "Connections refused (the connection cap, or no file descriptor left).", model,
            (double)g->refused_connections);
    counter(bp, "cobatch:http_request_timeouts_total", "Requests that did not arrive whole in time.", model,
            (double)g->request_timeouts);
    counter(bp, "cobatch:http_bad_requests_total", "Requests refused before routing (malformed, too large).", model,
            (double)g->bad_requests);
    counter(bp, "cobatch:http_resets_total",
            "Connections the server closed with a reset: an answer cut (a slow reader, a write that timed out, no "
            "memory), or request bytes left unread (a refusal, a refused body still arriving).",
            model, (double)g->resets);
    gauge(bp, "cobatch:http_buffered_bytes", "Request bytes the connections hold.", model, (double)g->buffered_bytes);
    gauge(bp, "cobatch:requests_open", "Requests accepted and not yet answered.", model, g->requests_open);
    gauge(bp, "cobatch:intake_pending", "Requests being parsed or tokenized.", model, g->intake_pending);
    gauge(bp, "cobatch:draining", "1 while the server drains before it stops.", model, g->draining);
}

/* Whether a statistic's field counts microseconds (its name ends in "_us"). */
static bool in_us(const char *field) {
    size_t n = strlen(field);
    return n > 3 && strcmp(field + n - 3, "_us") == 0;
}

/* The engine's statistics, from their one list (COBATCH_STATS in cobatch.h): every gauge and
 * counter, a field in microseconds shown in seconds. */
static void engine_part(cb_buf *b, const struct cobatch_stats *st, const char *model) {
    char name[128];
#define CB_STAT_METRIC(type, field, kind, metric, help, source)                                                        \
    if (kind != COBATCH_STAT_NONE) {                                                                                   \
        snprintf(name, sizeof(name), "cobatch:%s", metric);                                                            \
        double v = (double)st->field / (in_us(#field) ? 1e6 : 1);                                                      \
        (kind == COBATCH_STAT_GAUGE ? gauge : counter)(b, name, help, model, v);                                       \
    }
    COBATCH_STATS(CB_STAT_METRIC)
#undef CB_STAT_METRIC
}

char *cb_srv_metrics_render(const cb_srv_metrics *m, const cb_srv_gauges *g, const struct cobatch_stats *st,
                            const struct cobatch_weights_info *w, const char *model) {
    cb_buf b = {0};
    cb_buf_printf(
        &b,
        "# HELP cobatch:weights_info Where the weights live on the CPU backend (buffer types) and the --repack "
        "mode.\n# TYPE cobatch:weights_info gauge\n"
        "cobatch:weights_info{model_name=\"%s\",buffer_types=\"%s\",repack=\"%s\",amx=\"%s\"} 1\n",
        model, w->buffer_types, w->repack, w->amx ? "true" : "false");
    engine_part(&b, st, model);
    /* As vLLM counts them: cached cells no request uses are free (evicted on demand). */
    int32_t used = st->kv_used - st->kv_cached;
    gauge(&b, "cobatch:kv_cache_used_cells", "KV cells the requests hold (shared cells once).", model, used);
    gauge(&b, "cobatch:kv_cache_usage_perc", "Fraction of KV cells the requests hold.", model,
          st->kv_total ? (double)used / st->kv_total : 0);
    counter(&b, "cobatch:prompt_tokens_total", "Prompt tokens of finished requests.", model, (double)m->prompt_tokens);
    counter(&b, "cobatch:generation_tokens_total", "Generated tokens.", model, (double)m->generation_tokens);
    cb_buf_printf(&b, "# HELP cobatch:request_success_total Finished requests by reason.\n"
                      "# TYPE cobatch:request_success_total counter\n");
    const char *names[] = {"stop", "length", "abort", "error"};
    uint64_t vals[] = {m->finished_stop, m->finished_length, m->finished_cancelled, m->finished_error};
    for (int i = 0; i < 4; i++)
        cb_buf_printf(&b, "cobatch:request_success_total{model_name=\"%s\",finished_reason=\"%s\"} %llu\n", model,
                      names[i], (unsigned long long)vals[i]);
    http_part(&b, m, g, model);
    hist(&b, "cobatch:time_to_first_token_seconds", "Time to first token.", model, &m->ttft);
    hist(&b, "cobatch:inter_token_latency_seconds", "Time between consecutive tokens.", model, &m->itl);
    hist(&b, "cobatch:e2e_request_latency_seconds", "Submit to finish.", model, &m->e2e);
    hist(&b, "cobatch:request_queue_time_seconds", "Submit to first scheduled step.", model, &m->queue);
    if (b.failed) {
        cb_buf_free(&b);
        return NULL;
    }
    return b.s;
}
