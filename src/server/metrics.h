/* metrics.h — Prometheus text for /metrics: counters and fixed-bucket histograms kept by the
 * server thread, plus the engine's gauges. Names follow vLLM's under a cobatch: prefix. */
#ifndef CB_SRV_METRICS_H
#define CB_SRV_METRICS_H

#include <cobatch.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HIST_MAX_BUCKETS 16

typedef struct {
    const double *bounds; /* (n) upper bounds in seconds, ascending */
    int n;
    uint64_t counts[HIST_MAX_BUCKETS + 1]; /* the last one is +Inf */
    double sum;
    uint64_t count;
} cb_srv_hist;

typedef struct {
    cb_srv_hist ttft, itl, e2e, queue;
    uint64_t finished_stop, finished_length, finished_cancelled, finished_error;
    uint64_t prompt_tokens, generation_tokens;
    uint64_t http_requests, http_errors_4xx, http_errors_5xx, rejected_queue_full;
    uint64_t rejected_busy; /* the intake worker had max jobs */
    uint64_t client_gone;   /* requests cancelled because their client closed the connection */
    uint64_t slow_clients;  /* streams dropped because the client left too much unread */
    uint64_t sse_pings;     /* keep-alives sent on streams with no output for the ping interval */
} cb_srv_metrics;

/* The server's state when /metrics is asked for. */
typedef struct {
    int connections, requests_open, intake_pending;
    uint64_t accepted, refused_connections, request_timeouts, bad_requests, resets;
    size_t buffered_bytes;
    bool draining;
} cb_srv_gauges;

void cb_srv_metrics_init(cb_srv_metrics *m);
void cb_srv_hist_observe(cb_srv_hist *h, double seconds);
/* Renders everything into a malloc'd NUL-terminated string (caller frees), or NULL. */
char *cb_srv_metrics_render(const cb_srv_metrics *m, const cb_srv_gauges *g, const struct cobatch_stats *st,
                            const struct cobatch_weights_info *w, const char *model);

#endif
