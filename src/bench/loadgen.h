/* loadgen.h — the client side of `vllm bench serve`: sends a workload to any OpenAI-compatible
 * server (cobatch serve, llama-server, vLLM) over HTTP with streaming, and measures TTFT, TPOT,
 * ITL and E2EL from the client. One libevent thread; keep it light, it shares the machine. */
#ifndef CB_LOADGEN_H
#define CB_LOADGEN_H

#include "metrics.h"
#include "workload.h"

typedef struct {
    const char *host;
    int port;
    const char *path;    /* /v1/completions */
    const char *model;   /* "model" field; NULL = omitted */
    const char *api_key; /* NULL = no Authorization header */
    int concurrency;     /* > 0: closed loop with this many in flight; else arrival times */
    int timeout_s;       /* seconds a request waits for a byte before it fails; default 600 */
    bool prediction;     /* chat: send a workload item's prediction (its "prediction" field) */
} cb_loadgen_params;

typedef struct {
    cb_req_timeline *tl; /* (n) */
    int n;
    int *status;           /* (n) HTTP status, 0 if the connection failed */
    int32_t *usage_out;    /* (n) completion_tokens the server reported, -1 if none */
    int32_t *usage_cached; /* (n) prompt tokens it served from a prefix cache (usage.prompt_tokens_details.
                              cached_tokens), -1 if it did not say */
    int32_t *usage_prompt; /* (n) prompt_tokens it reported, -1 if none */
    double wall_s, cpu_s;
} cb_loadgen_result;

/* Runs the workload against the server (a `sessions` workload: each turn with the conversation
 * before it, the answers as the server streamed them; a turn whose turn before failed is not sent
 * and counts as failed, status 0). Returns 0 (individual failures are in status), or -1 with
 * a message when nothing could run. */
int cb_loadgen_run(const cb_loadgen_params *p, const cb_workload *w, cb_loadgen_result *out, char *err, size_t errlen);
void cb_loadgen_result_free(cb_loadgen_result *r);

/* The server's prefix-cache counters from its /metrics (cobatch serve's): prompt tokens it found
 * cached (hits) and, of those, loaded from its host tier (host). Returns 0, or -1 when the server
 * does not answer or does not count them (another server). Blocking; one GET. */
int cb_loadgen_cache_hits(const cb_loadgen_params *p, double *hits, double *host);

#endif
