/* metrics.h — Prometheus text for /metrics: counters and fixed-bucket histograms kept by the
 * server thread, plus the engine's gauges. Names follow vLLM's under a cobatch: prefix. */
#ifndef CB_SRV_METRICS_H
#define CB_SRV_METRICS_H

#include <cobatch.h>
#include <stddef.h>
#include <stdint.h>

#define HIST_MAX_BUCKETS 16

typedef struct {
    const double *bounds; /* (n) upper bounds in seconds, ascending */
    int n;
    uint64_t counts[HIST_MAX_BUCKETS + 1]; /* the last one is +Inf */
    double sum;
    uint64_t count;
} srv_hist;

typedef struct {
    srv_hist ttft, itl, e2e, queue;
    uint64_t finished_stop, finished_length, finished_cancelled, finished_error;
    uint64_t prompt_tokens, generation_tokens;
    uint64_t http_requests, http_errors_4xx, http_errors_5xx, rejected_queue_full;
} srv_metrics;

void srv_metrics_init(srv_metrics *m);
void srv_hist_observe(srv_hist *h, double seconds);
/* Renders everything into a malloc'd NUL-terminated string (caller frees), or NULL. */
char *srv_metrics_render(const srv_metrics *m, const struct cobatch_stats *st, const char *model);

#endif
