#include "server.h"
#include "metrics.h"
#include "openai.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct srv srv;

/* One accepted completion request, from submit to its FINISHED event. */
typedef struct srv_req {
    srv *s;
    struct evhttp_request *req; /* ours until the reply ends, even after the client has gone */
    bool gone;                  /* the client closed the connection: write nothing more */
    cobatch_req_id id;
    oai_kind kind;
    bool stream, include_usage;
    char cid[48]; /* "cmpl-..." / "chatcmpl-..." */
    long created;
    char *text; /* (cap) the whole output, for non-streaming replies */
    size_t len, cap;
    int64_t t_last_token_us;
    struct srv_req *prev, *next; /* the server's in-flight list */
} srv_req;

struct srv {
    srv_params p;
    cobatch_engine *engine;
    char model[128];
    struct event_base *base;
    struct evhttp *http;
    struct event *ev_engine, *ev_term, *ev_int, *ev_drain;
    bool draining, stopping;
    int in_flight;
    srv_req *reqs; /* in flight, for the shutdown */
    uint64_t next_cid;
    srv_metrics m;
};

/* ---------------------------------------------------------------- replies ------------------- */

static void count_status(srv *s, int status) {
    if (status >= 500)
        s->m.http_errors_5xx++;
    else if (status >= 400)
        s->m.http_errors_4xx++;
}

static void reply_json(srv *s, struct evhttp_request *req, int status, const char *json) {
    struct evbuffer *out = evbuffer_new();
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    if (out && json) evbuffer_add(out, json, strlen(json));
    count_status(s, status);
    evhttp_send_reply(req, status, status < 400 ? "OK" : "Error", out);
    if (out) evbuffer_free(out);
}

static void reply_error(srv *s, struct evhttp_request *req, int status, const char *type, const char *param,
                        const char *fmt, ...) {
    oai_error e = {.status = status, .type = type};
    snprintf(e.param, sizeof(e.param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof(e.message), fmt, ap);
    va_end(ap);
    char *j = oai_error_json(&e);
    reply_json(s, req, status, j);
    free(j);
}

/* 200 with a cJSON object as the body; takes ownership of o. */
static void reply_cjson(srv *s, struct evhttp_request *req, cJSON *o) {
    char *j = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (j)
        reply_json(s, req, 200, j);
    else
        reply_error(s, req, 500, "server_error", NULL, "out of memory");
    free(j);
}

static void sse_send(struct evhttp_request *req, const char *json) {
    struct evbuffer *b = evbuffer_new();
    if (!b) return;
    evbuffer_add_printf(b, "data: %s\n\n", json);
    evhttp_send_reply_chunk(req, b);
    evbuffer_free(b);
}

/* ---------------------------------------------------------------- engine events ------------- */

static void req_free(srv_req *r) {
    srv *s = r->s;
    if (r->prev)
        r->prev->next = r->next;
    else if (s->reqs == r)
        s->reqs = r->next;
    if (r->next) r->next->prev = r->prev;
    free(r->text);
    free(r);
}

/* libevent detaches an unfinished request from a connection that fails and leaves it to us: it
 * is freed when we end it (evhttp_send_* on a request without a connection frees it). */
static void on_client_close(struct evhttp_connection *conn, void *arg) {
    (void)conn;
    srv_req *r = arg;
    r->gone = true;
    cobatch_cancel(r->s->engine, r->id);
}

static void detach(srv_req *r) {
    struct evhttp_connection *c = evhttp_request_get_connection(r->req);
    if (c) evhttp_connection_set_closecb(c, NULL, NULL);
}

static const char *finish_name(enum cobatch_finish_reason f) { return f == COBATCH_FINISH_LENGTH ? "length" : "stop"; }

/* Output for a non-streaming reply. Bounded by the request's max_tokens (the engine's context). */
static void append(srv_req *r, const char *text, size_t n) {
    if (r->len + n + 1 > r->cap) {
        size_t cap = (r->cap + n) * 2 + 64;
        char *t = realloc(r->text, cap);
        if (!t) return;
        r->text = t;
        r->cap = cap;
    }
    memcpy(r->text + r->len, text, n);
    r->len += n;
    r->text[r->len] = '\0';
}

static void on_token(srv *s, srv_req *r, const struct cobatch_event *ev) {
    s->m.generation_tokens++;
    if (r->t_last_token_us) srv_hist_observe(&s->m.itl, (double)(ev->t_us - r->t_last_token_us) / 1e6);
    r->t_last_token_us = ev->t_us;
    if (r->gone || !ev->text_len) return;
    if (r->stream) {
        char *j = oai_chunk_json(r->kind, r->cid, r->created, s->model, ev->text, NULL, false);
        if (j) sse_send(r->req, j);
        free(j);
        return;
    }
    append(r, ev->text, ev->text_len);
}

static void maybe_stop(srv *s);

static void on_finished(srv *s, srv_req *r, const struct cobatch_event *ev) {
    const struct cobatch_timings *t = &ev->timings;
    switch (ev->reason) {
    case COBATCH_FINISH_STOP: s->m.finished_stop++; break;
    case COBATCH_FINISH_LENGTH: s->m.finished_length++; break;
    case COBATCH_FINISH_CANCELLED: s->m.finished_cancelled++; break;
    default: s->m.finished_error++; break;
    }
    s->m.prompt_tokens += (uint64_t)ev->n_prompt;
    if (t->t_first_token_us) srv_hist_observe(&s->m.ttft, (double)(t->t_first_token_us - t->t_submit_us) / 1e6);
    if (t->t_scheduled_us) srv_hist_observe(&s->m.queue, (double)(t->t_scheduled_us - t->t_submit_us) / 1e6);
    srv_hist_observe(&s->m.e2e, (double)(t->t_finish_us - t->t_submit_us) / 1e6);
    if (r->gone) {
        if (r->stream)
            evhttp_send_reply_end(r->req); /* no connection: this frees the request */
        else
            evhttp_request_free(r->req);
    } else {
        detach(r);
        bool ok = ev->reason == COBATCH_FINISH_STOP || ev->reason == COBATCH_FINISH_LENGTH;
        const char *why = ev->reason == COBATCH_FINISH_CANCELLED ? "the server is shutting down"
                                                                 : (ev->error ? ev->error : "generation failed");
        if (r->stream) {
            char *j =
                ok ? oai_chunk_json(r->kind, r->cid, r->created, s->model, ev->text, finish_name(ev->reason), false)
                   : NULL;
            if (!ok) {
                oai_error e = {.status = 500, .type = "server_error"};
                snprintf(e.message, sizeof(e.message), "%s", why);
                j = oai_error_json(&e);
            }
            if (j) sse_send(r->req, j);
            free(j);
            if (ok && r->include_usage) {
                j = oai_usage_chunk_json(r->kind, r->cid, r->created, s->model, ev->n_prompt, ev->n_generated,
                                         ev->n_cached);
                if (j) sse_send(r->req, j);
                free(j);
            }
            struct evbuffer *b = evbuffer_new();
            if (b) {
                evbuffer_add_printf(b, "data: [DONE]\n\n");
                evhttp_send_reply_chunk(r->req, b);
                evbuffer_free(b);
            }
            evhttp_send_reply_end(r->req);
        } else if (ok) {
            append(r, ev->text, ev->text_len);
            char *j = oai_response_json(r->kind, r->cid, r->created, s->model, r->text ? r->text : "",
                                        finish_name(ev->reason), ev->n_prompt, ev->n_generated, ev->n_cached);
            if (j)
                reply_json(s, r->req, 200, j);
            else
                reply_error(s, r->req, 500, "server_error", NULL, "out of memory");
            free(j);
        } else {
            reply_error(s, r->req, ev->reason == COBATCH_FINISH_CANCELLED ? 503 : 500,
                        ev->reason == COBATCH_FINISH_CANCELLED ? "service_unavailable" : "server_error", NULL, "%s",
                        why);
        }
    }
    s->in_flight--;
    req_free(r);
    maybe_stop(s);
}

static void on_engine_events(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    srv *s = arg;
    uint64_t v;
    ssize_t n = read(fd, &v, sizeof(v)); /* reset the eventfd; events are drained below */
    (void)n;
    struct cobatch_event evs[64];
    int k;
    while ((k = cobatch_poll(s->engine, evs, 64, 0)) > 0) {
        for (int i = 0; i < k; i++) {
            srv_req *r = evs[i].user_data;
            if (evs[i].type == COBATCH_EVENT_TOKEN)
                on_token(s, r, &evs[i]);
            else
                on_finished(s, r, &evs[i]);
            cobatch_event_clear(&evs[i]);
        }
    }
}

/* ---------------------------------------------------------------- endpoints ----------------- */

/* The body as a NUL-terminated string (in the request's buffer), or NULL with a reply sent. */
static char *body_of(srv *s, struct evhttp_request *req, size_t *len) {
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    *len = evbuffer_get_length(in);
    if (*len > s->p.max_body) {
        reply_error(s, req, 413, "invalid_request_error", NULL, "the body is %zu bytes; the limit is %zu", *len,
                    s->p.max_body);
        return NULL;
    }
    evbuffer_add(in, "", 1); /* terminate */
    return (char *)evbuffer_pullup(in, -1);
}

static void handle_completion(srv *s, struct evhttp_request *req, oai_kind kind) {
    if (s->draining) {
        reply_error(s, req, 503, "service_unavailable", NULL, "the server is shutting down");
        return;
    }
    size_t len;
    char *body = body_of(s, req, &len);
    if (!body) return;
    oai_request o;
    oai_error e;
    if (oai_parse(kind, body, len, &o, &e) != 0) {
        char *j = oai_error_json(&e);
        reply_json(s, req, e.status, j);
        free(j);
        oai_request_free(&o);
        return;
    }
    srv_req *r = calloc(1, sizeof(*r));
    if (!r) {
        oai_request_free(&o);
        reply_error(s, req, 500, "server_error", NULL, "out of memory");
        return;
    }
    r->s = s;
    r->req = req;
    r->kind = kind;
    r->stream = o.stream;
    r->include_usage = o.include_usage;
    r->created = (long)time(NULL);
    snprintf(r->cid, sizeof(r->cid), "%s-%llx%06llx", kind == OAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)r->created, (unsigned long long)++s->next_cid);
    o.params.user_data = r;
    char err[256] = "";
    cobatch_req_id id = cobatch_submit(s->engine, &o.params, err, sizeof(err));
    oai_request_free(&o);
    if (id <= 0) {
        req_free(r);
        if (id == COBATCH_ERR_QUEUE_FULL) {
            s->m.rejected_queue_full++;
            evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
            reply_error(s, req, 429, "rate_limit_error", NULL, "%s", err);
        } else if (id == COBATCH_ERR_SHUTDOWN) {
            reply_error(s, req, 503, "service_unavailable", NULL, "%s", err);
        } else {
            reply_error(s, req, id == COBATCH_ERR_NOMEM ? 500 : 400,
                        id == COBATCH_ERR_NOMEM ? "server_error" : "invalid_request_error",
                        kind == OAI_CHAT ? "messages" : "prompt", "%s", err);
        }
        return;
    }
    r->id = id;
    s->in_flight++;
    r->next = s->reqs;
    if (s->reqs) s->reqs->prev = r;
    s->reqs = r;
    evhttp_connection_set_closecb(evhttp_request_get_connection(req), on_client_close, r);
    if (r->stream) {
        struct evkeyvalq *h = evhttp_request_get_output_headers(req);
        evhttp_add_header(h, "Content-Type", "text/event-stream");
        evhttp_add_header(h, "Cache-Control", "no-cache");
        evhttp_send_reply_start(req, 200, "OK");
        if (kind == OAI_CHAT) { /* the opening chunk carries the role */
            char *j = oai_chunk_json(kind, r->cid, r->created, s->model, "", NULL, true);
            if (j) sse_send(req, j);
            free(j);
        }
    }
}

static void handle_models(srv *s, struct evhttp_request *req) {
    cJSON *root = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(root, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON_AddStringToObject(m, "id", s->model);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "cobatch");
    cJSON_AddNumberToObject(m, "max_model_len", cobatch_n_ctx_seq(s->engine));
    cJSON_AddItemToArray(data, m);
    reply_cjson(s, req, root);
}

/* The body parsed as JSON (caller deletes), or NULL with a 413/400 reply sent. */
static cJSON *body_json(srv *s, struct evhttp_request *req) {
    size_t len;
    char *body = body_of(s, req, &len);
    if (!body) return NULL;
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) reply_error(s, req, 400, "invalid_request_error", NULL, "the body is not valid JSON");
    return root;
}

static void handle_tokenize(srv *s, struct evhttp_request *req) {
    cJSON *root = body_json(s, req);
    if (!root) return;
    cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "content");
    if (!c) c = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!cJSON_IsString(c)) {
        cJSON_Delete(root);
        reply_error(s, req, 400, "invalid_request_error", "content", "give the text as a string in 'content'");
        return;
    }
    int32_t cap = (int32_t)strlen(c->valuestring) + 16, *toks = malloc(sizeof(int32_t) * (size_t)cap);
    int32_t n = toks ? cobatch_tokenize(s->engine, c->valuestring, toks, cap) : -1;
    cJSON_Delete(root);
    if (n < 0 || n > cap) {
        free(toks);
        reply_error(s, req, 500, "server_error", NULL, "cannot tokenize");
        return;
    }
    cJSON *out = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(out, "tokens");
    for (int32_t i = 0; i < n; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(toks[i]));
    cJSON_AddNumberToObject(out, "count", n);
    cJSON_AddNumberToObject(out, "max_model_len", cobatch_n_ctx_seq(s->engine));
    free(toks);
    reply_cjson(s, req, out);
}

static void handle_detokenize(srv *s, struct evhttp_request *req) {
    cJSON *root = body_json(s, req);
    if (!root) return;
    cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    int n = cJSON_IsArray(t) ? cJSON_GetArraySize(t) : -1;
    int32_t *toks = n >= 0 ? malloc(sizeof(int32_t) * (size_t)(n + 1)) : NULL;
    for (int i = 0; toks && i < n; i++) {
        cJSON *x = cJSON_GetArrayItem(t, i);
        if (!cJSON_IsNumber(x)) {
            free(toks);
            toks = NULL;
            break;
        }
        toks[i] = (int32_t)x->valuedouble;
    }
    cJSON_Delete(root);
    if (!toks) {
        reply_error(s, req, 400, "invalid_request_error", "tokens", "give 'tokens' as an array of token ids");
        return;
    }
    int32_t need = cobatch_detokenize(s->engine, toks, n, NULL, 0);
    char *text = need >= 0 ? malloc((size_t)need + 1) : NULL;
    int32_t k = text ? cobatch_detokenize(s->engine, toks, n, text, need + 1) : -1;
    free(toks);
    if (k < 0) {
        free(text);
        reply_error(s, req, 400, "invalid_request_error", "tokens", "a token id is outside the vocabulary");
        return;
    }
    text[k] = '\0';
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "content", text);
    cJSON_AddStringToObject(out, "prompt", text);
    free(text);
    reply_cjson(s, req, out);
}

static void handle_metrics(srv *s, struct evhttp_request *req) {
    struct cobatch_stats st;
    cobatch_engine_stats(s->engine, &st);
    char *text = srv_metrics_render(&s->m, &st, s->model);
    struct evbuffer *out = evbuffer_new();
    if (!text || !out) {
        free(text);
        if (out) evbuffer_free(out);
        reply_error(s, req, 500, "server_error", NULL, "out of memory");
        return;
    }
    evbuffer_add(out, text, strlen(text));
    free(text);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain; version=0.0.4");
    evhttp_send_reply(req, 200, "OK", out);
    evbuffer_free(out);
}

static bool authorized(srv *s, struct evhttp_request *req) {
    if (!s->p.api_key) return true;
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    return h && !strncmp(h, "Bearer ", 7) && !strcmp(h + 7, s->p.api_key);
}

static void route(struct evhttp_request *req, void *arg) {
    srv *s = arg;
    s->m.http_requests++;
    const char *uri = evhttp_request_get_uri(req);
    size_t plen = strcspn(uri, "?");
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    struct {
        const char *path;
        enum evhttp_cmd_type cmd;
        bool auth;
        int which;
    } R[] = {{"/health", EVHTTP_REQ_GET, false, 0},
             {"/metrics", EVHTTP_REQ_GET, false, 1},
             {"/v1/models", EVHTTP_REQ_GET, true, 2},
             {"/v1/completions", EVHTTP_REQ_POST, true, 3},
             {"/v1/chat/completions", EVHTTP_REQ_POST, true, 4},
             {"/tokenize", EVHTTP_REQ_POST, true, 5},
             {"/detokenize", EVHTTP_REQ_POST, true, 6}};
    for (size_t i = 0; i < sizeof(R) / sizeof(R[0]); i++) {
        if (strlen(R[i].path) != plen || strncmp(uri, R[i].path, plen)) continue;
        if (cmd != R[i].cmd) {
            reply_error(s, req, 405, "invalid_request_error", NULL, "use %s for %s",
                        R[i].cmd == EVHTTP_REQ_GET ? "GET" : "POST", R[i].path);
            return;
        }
        if (R[i].auth && !authorized(s, req)) {
            reply_error(s, req, 401, "invalid_request_error", NULL,
                        "a valid API key is required (Authorization: "
                        "Bearer KEY)");
            return;
        }
        switch (R[i].which) {
        case 0:
            if (s->draining)
                reply_error(s, req, 503, "service_unavailable", NULL, "the server is shutting down");
            else
                reply_json(s, req, 200, "{\"status\":\"ok\"}");
            return;
        case 1: handle_metrics(s, req); return;
        case 2: handle_models(s, req); return;
        case 3: handle_completion(s, req, OAI_COMPLETION); return;
        case 4: handle_completion(s, req, OAI_CHAT); return;
        case 5: handle_tokenize(s, req); return;
        default: handle_detokenize(s, req); return;
        }
    }
    reply_error(s, req, 404, "invalid_request_error", NULL, "no route for %.*s", (int)(plen < 200 ? plen : 200), uri);
}

/* ---------------------------------------------------------------- lifecycle ----------------- */

/* Stops once drained, after a short grace so the last replies leave their socket buffers
 * (evhttp_free drops unsent output). */
static void maybe_stop(srv *s) {
    if (!s->draining || s->in_flight > 0 || s->stopping) return;
    s->stopping = true;
    struct timeval grace = {0, 300000};
    event_base_loopexit(s->base, &grace);
}

static void on_drain_timeout(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    srv *s = arg;
    fprintf(stderr, "cobatch serve: drain timeout, %d requests cut short\n", s->in_flight);
    event_base_loopexit(s->base, NULL);
}

static void on_signal(evutil_socket_t sig, short what, void *arg) {
    (void)what;
    srv *s = arg;
    if (s->draining) return;
    fprintf(stderr, "cobatch serve: signal %d: no new requests, %d running may finish (up to %d s)\n", (int)sig,
            s->in_flight, s->p.drain_timeout_s);
    s->draining = true;
    struct timeval tv = {s->p.drain_timeout_s, 0};
    s->ev_drain = evtimer_new(s->base, on_drain_timeout, s);
    if (s->ev_drain) evtimer_add(s->ev_drain, &tv);
    maybe_stop(s);
}

int srv_run(cobatch_engine *engine, const srv_params *params) {
    srv *s = calloc(1, sizeof(*s));
    if (!s) return -1;
    s->p = *params;
    if (!s->p.host) s->p.host = "127.0.0.1";
    if (!s->p.max_body) s->p.max_body = 1 << 20;
    if (s->p.drain_timeout_s <= 0) s->p.drain_timeout_s = 30;
    s->engine = engine;
    srv_metrics_init(&s->m);
    snprintf(s->model, sizeof(s->model), "%s", s->p.model_name ? s->p.model_name : "default");
    if (!s->p.model_name && s->p.model_path) { /* like vLLM: the model is named by its file */
        const char *b = strrchr(s->p.model_path, '/');
        snprintf(s->model, sizeof(s->model), "%s", b ? b + 1 : s->p.model_path);
        char *dot = strstr(s->model, ".gguf");
        if (dot && dot[5] == '\0') *dot = '\0';
    }
    signal(SIGPIPE, SIG_IGN);
    int rc = -1;
    s->base = event_base_new();
    s->http = s->base ? evhttp_new(s->base) : NULL;
    if (!s->http) goto out;
    /* evhttp refuses bodies past twice our limit itself; between the two, we answer 413 in JSON */
    evhttp_set_max_body_size(s->http, (ev_ssize_t)(s->p.max_body * 2));
    evhttp_set_timeout(s->http, 600);
    evhttp_set_gencb(s->http, route, s);
    struct evhttp_bound_socket *sock = evhttp_bind_socket_with_handle(s->http, s->p.host, (uint16_t)s->p.port);
    if (!sock) {
        fprintf(stderr, "cobatch serve: cannot listen on %s:%d: %s\n", s->p.host, s->p.port, strerror(errno));
        goto out;
    }
    struct sockaddr_storage ss;
    ev_socklen_t sl = sizeof(ss);
    int port = s->p.port;
    if (getsockname(evhttp_bound_socket_get_fd(sock), (struct sockaddr *)&ss, &sl) == 0)
        port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                              : ((struct sockaddr_in *)&ss)->sin_port);
    s->ev_engine = event_new(s->base, cobatch_event_fd(engine), EV_READ | EV_PERSIST, on_engine_events, s);
    s->ev_term = evsignal_new(s->base, SIGTERM, on_signal, s);
    s->ev_int = evsignal_new(s->base, SIGINT, on_signal, s);
    if (!s->ev_engine || !s->ev_term || !s->ev_int) goto out;
    event_add(s->ev_engine, NULL);
    event_add(s->ev_term, NULL);
    event_add(s->ev_int, NULL);
    fprintf(stderr, "cobatch serve: %s on http://%s:%d\n", s->model, s->p.host, port);
    if (s->p.port_file) {
        FILE *f = fopen(s->p.port_file, "w");
        if (f) fprintf(f, "%d\n", port), fclose(f);
    }
    event_base_dispatch(s->base);
    rc = 0;
    fprintf(stderr, "cobatch serve: stopped\n");
out:
    if (s->ev_engine) event_free(s->ev_engine);
    if (s->ev_term) event_free(s->ev_term);
    if (s->ev_int) event_free(s->ev_int);
    if (s->ev_drain) event_free(s->ev_drain);
    if (s->http) evhttp_free(s->http); /* closes connections: their requests are cancelled */
    while (s->reqs) {                  /* cut short by the drain timeout: the engine cancels them */
        if (s->reqs->gone) evhttp_request_free(s->reqs->req); /* detached ones are ours to free */
        req_free(s->reqs);
    }
    if (s->base) event_base_free(s->base);
    free(s);
    return rc;
}
