/* server.h — `cobatch serve`: an OpenAI-compatible HTTP server over the engine.
 * One libevent (evhttp) thread owns sockets and response buffers; the engine runs on its own
 * thread; they meet only through cobatch_submit / cobatch_cancel and the event queue, whose
 * eventfd wakes the loop. The server thread never computes (no llama.h here). */
#ifndef CB_SERVER_H
#define CB_SERVER_H

#include "../openai/openai.h"

#include <cobatch.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    const char *host;          /* default 127.0.0.1 */
    int port;                  /* default 8080; 0 = any free port (printed) */
    const char *api_key;       /* NULL: no authentication */
    const char *model_name;    /* served name; NULL = the model file's base name */
    const char *model_path;    /* to name the model when model_name is NULL */
    size_t max_body;           /* request body bytes; 0 = 1 MiB */
    size_t max_head;           /* request line + headers bytes; 0 = 16 KiB */
    int max_connections;       /* open at once; 0 = 1024 */
    int request_timeout_s;     /* a request must arrive whole in this time; 0 = 30 */
    int idle_timeout_s;        /* keep-alive connection without a request; 0 = 60 */
    int write_timeout_s;       /* a client that reads nothing this long is dropped; 0 = 60 */
    size_t max_stream_backlog; /* streamed bytes a client may leave unread; 0 = 4 MiB */
    int sndbuf;                /* kernel send buffer of a connection; 0 = the system autotuning */
    int drain_timeout_s;       /* after SIGTERM: how long running requests may finish; default 30 */
    int drain_grace_s;         /* after SIGTERM, before the drain: /health answers 503 (a router or load balancer
                                  takes the replica out) while requests are still taken and served; default 0 */
    enum cobatch_sched_policy sched_policy; /* the engine's: a request's priority needs PRIORITY */
    const char *port_file;                  /* if set, the bound port is written there once listening (tests) */
    bool no_webui;                          /* GET / answers 404 instead of the chat page */
    const char *allowed_hosts;              /* more names a loopback listener answers to, and origins it serves
                                               (guard.h: comma-separated, ".suffix", "*"); NULL: none */
    bool public_metrics;                    /* /metrics without the API key (default: with it, as /v1) */
    int sse_ping_interval_s;                /* a stream with no bytes for this long gets a keep-alive (its head
                                               first, if none went yet); 0: the default (10), < 0: none */
    cb_openai_defaults defaults;            /* for the fields a request leaves out (OpenAI's:
                                               cb_openai_default_defaults) */
} cb_srv_params;

/* Serves until SIGTERM/SIGINT and the drain: on the first signal /health answers 503 (for
 * drain_grace_s more seconds requests are still taken: the grace a router needs to stop sending
 * here; a second signal ends it), then new and
 * queued requests get 503 at once, running ones may finish for drain_timeout_s; then they are cut
 * short (a stream gets a last chunk with an error, a non-streaming request a 503); a second
 * signal cuts at once. Takes a running engine (not owned). Returns 0 on a clean stop, or -1 with
 * a message printed (cannot bind, ...). */
int cb_srv_run(cobatch_engine *engine, const cb_srv_params *p);

#endif
