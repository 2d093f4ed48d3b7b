/* server_internal.h — what the server's files share: the server's state (struct srv, the event loop's
 * alone), its answers (reply.c) and the endpoints that only read the engine (endpoints.c). server.c
 * has the completion requests' lifecycle, the routing and the drain. */
#ifndef CB_SERVER_INTERNAL_H
#define CB_SERVER_INTERNAL_H

#include "server.h"
#include "guard.h"
#include "httpd.h"
#include "intake.h"
#include "metrics.h"
#include "routes.h"
#include "../openai/dialect.h"

#include <cjson/cJSON.h>
#include <event2/event.h>

typedef struct srv srv;

struct srv {
    cb_srv_params p;
    cobatch_engine *engine;
    char model[128];
    struct event_base *base;
    cb_httpd *httpd;
    intake *in;
    intake *answers; /* a second worker: whole answers are built there, off the loop */
    intake *bulk;    /* a third: bodies over CB_SRV_BULK_BYTES, whose rendering can take seconds, so that no small
                        request waits behind them */
    struct event *ev_engine, *ev_intake, *ev_bulk, *ev_answers, *ev_term, *ev_int, *ev_tick, *ev_ping;
    bool leaving;                     /* a signal came: /health answers 503 (the grace, then the drain) */
    int64_t grace_end_us;             /* when the grace ends and the drain begins */
    bool draining, cut;               /* cut: the drain timed out, what runs is being cancelled */
    int64_t drain_end_us, cut_end_us; /* when the drain times out; when to leave even if requests remain */
    int64_t flush_end_us;             /* when to leave once nothing is left but answers in transit */
    int n_reqs;
    struct cb_srv_req *reqs;
    uint64_t next_cid;
    bool has_embeddings; /* the engine computes embeddings (POST /v1/embeddings) */
    cb_guard guard;      /* the Host, Origin and Content-Type checks */
    cb_srv_metrics m;
};

/* reply.c: an answer of JSON (NULL: out of memory, a 500), counted by its status; a 429 or 503 says
 * Retry-After. */
void cb_srv_reply_json(srv *s, cb_conn *c, int status, const char *json, const char *extra);
/* An error in OpenAI's shape, or in dialect d's (d NULL: OpenAI's). */
void cb_srv_reply_error(srv *s, cb_conn *c, int status, const char *type, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
void cb_srv_dreply_error(srv *s, cb_conn *c, const cb_dialect *d, int status, const char *type, const char *param,
                         const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* A 200 of o (taken). */
void cb_srv_reply_cjson(srv *s, cb_conn *c, cJSON *o);

/* endpoints.c: GET /v1/models, /v1/models/{model}, /tokenizer_info, Ollama's /api/tags, /api/ps and
 * /api/show, /props, the chat page and /metrics. */
void cb_srv_handle_models(srv *s, cb_conn *c);
void cb_srv_handle_model_info(srv *s, cb_conn *c);
void cb_srv_handle_tokenizer_info(srv *s, cb_conn *c);
void cb_srv_handle_ollama_model(srv *s, cb_conn *c, cb_srv_route_id id);
void cb_srv_handle_props(srv *s, cb_conn *c);
void cb_srv_handle_webui(cb_conn *c);
void cb_srv_handle_metrics(srv *s, cb_conn *c);

#endif
