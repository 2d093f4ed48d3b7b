#include "loadgen.h"
#include "../util/util.h"

#include <cjson/cJSON.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

typedef struct lg lg;

typedef struct {
    lg *g;
    int idx;
    struct evhttp_connection *conn;
    char *line; /* (cap) SSE bytes not yet ending in a newline */
    size_t len, cap;
    int32_t usage_out;    /* completion_tokens from the usage chunk, or -1 */
    int32_t usage_cached; /* usage.prompt_tokens_details.cached_tokens, or -1 */
    int chunks;           /* content chunks seen */
} lg_req;

struct lg {
    const cb_loadgen_params *p;
    const cb_workload *w;
    cb_loadgen_result *r;
    struct event_base *base;
    lg_req *reqs;
    int next, done, in_flight;
    int64_t t0;
    struct event *tick;
};

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* One SSE "data:" payload: a chunk with text counts as a token arrival (the server streams a
 * chunk per token); a usage chunk gives the exact completion token count. */
static void on_data(lg_req *q, const char *json) {
    if (!strcmp(json, "[DONE]")) return;
    cJSON *j = cJSON_Parse(json);
    if (!j) return;
    cb_req_timeline *t = &q->g->r->tl[q->idx];
    cJSON *usage = cJSON_GetObjectItemCaseSensitive(j, "usage");
    cJSON *ct = usage ? cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens") : NULL;
    if (cJSON_IsNumber(ct)) q->usage_out = (int32_t)ct->valuedouble;
    cJSON *det = usage ? cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens_details") : NULL;
    cJSON *cached = det ? cJSON_GetObjectItemCaseSensitive(det, "cached_tokens") : NULL;
    if (cJSON_IsNumber(cached)) q->usage_cached = (int32_t)cached->valuedouble;
    cJSON *choices = cJSON_GetObjectItemCaseSensitive(j, "choices");
    cJSON *c0 = cJSON_IsArray(choices) ? cJSON_GetArrayItem(choices, 0) : NULL;
    if (c0) {
        cJSON *text = cJSON_GetObjectItemCaseSensitive(c0, "text");
        cJSON *delta = cJSON_GetObjectItemCaseSensitive(c0, "delta");
        if (!text && delta) text = cJSON_GetObjectItemCaseSensitive(delta, "content");
        if (cJSON_IsString(text) && text->valuestring[0]) {
            int64_t now = now_us();
            if (!t->t_first_us) t->t_first_us = now;
            int32_t cap = q->g->w->items[q->idx].n_out * 2 + 8;
            if (t->n_out < cap) t->t_tokens_us[t->n_out] = now;
            t->n_out++;
            q->chunks++;
        }
    }
    cJSON_Delete(j);
}

static void on_chunk(struct evhttp_request *req, void *arg) {
    lg_req *q = arg;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    if (q->len + n + 1 > q->cap) {
        size_t cap = (q->len + n + 1) * 2;
        char *l = realloc(q->line, cap);
        if (!l) return;
        q->line = l;
        q->cap = cap;
    }
    evbuffer_remove(in, q->line + q->len, n);
    q->len += n;
    q->line[q->len] = '\0';
    char *start = q->line, *nl;
    while ((nl = strchr(start, '\n'))) {
        *nl = '\0';
        if (nl > start && nl[-1] == '\r') nl[-1] = '\0';
        if (!strncmp(start, "data: ", 6)) on_data(q, start + 6);
        start = nl + 1;
    }
    q->len = strlen(start);
    memmove(q->line, start, q->len + 1);
}

static void start_next(lg *g);

static void free_conn(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    evhttp_connection_free(arg);
}

static void on_done(struct evhttp_request *req, void *arg) {
    lg_req *q = arg;
    lg *g = q->g;
    cb_req_timeline *t = &g->r->tl[q->idx];
    t->t_finish_us = now_us();
    int status = req ? evhttp_request_get_response_code(req) : 0;
    g->r->status[q->idx] = status;
    t->ok = status == 200 && t->t_first_us != 0;
    g->r->usage_out[q->idx] = q->usage_out; /* n_out counts chunks (token arrivals), this the tokens */
    g->r->usage_cached[q->idx] = q->usage_cached;
    g->done++;
    g->in_flight--;
    /* the connection cannot be freed inside its own callback */
    event_base_once(g->base, -1, EV_TIMEOUT, free_conn, q->conn, NULL);
    if (g->done == g->w->n)
        event_base_loopexit(g->base, NULL);
    else
        start_next(g);
}

static char *body_of(const cb_loadgen_params *p, const cb_work_item *it) {
    cJSON *b = cJSON_CreateObject();
    if (p->model) cJSON_AddStringToObject(b, "model", p->model);
    if (strstr(p->path, "/chat/completions")) { /* the prompt's text as one user message */
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", it->text ? it->text : "");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(b, "messages"), m);
    } else if (it->text) {
        cJSON_AddStringToObject(b, "prompt", it->text);
    } else {
        cJSON *arr = cJSON_AddArrayToObject(b, "prompt");
        for (int32_t i = 0; i < it->n_in; i++)
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(it->tokens[i]));
    }
    cJSON_AddNumberToObject(b, "max_tokens", it->n_out);
    cJSON_AddBoolToObject(b, "ignore_eos", true);
    cJSON_AddNumberToObject(b, "temperature", 0);
    cJSON_AddBoolToObject(b, "stream", true);
    cJSON_AddItemToObject(b, "stream_options", cJSON_CreateObject());
    cJSON_AddBoolToObject(cJSON_GetObjectItem(b, "stream_options"), "include_usage", true);
    char *s = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    return s;
}

static void send_one(lg *g, int idx) {
    lg_req *q = &g->reqs[idx];
    q->g = g;
    q->idx = idx;
    q->usage_out = -1;
    q->usage_cached = -1;
    g->r->tl[idx].t_submit_us = now_us();
    g->r->tl[idx].n_in = g->w->items[idx].n_in;
    g->in_flight++;
    q->conn = evhttp_connection_base_new(g->base, NULL, g->p->host, (uint16_t)g->p->port);
    struct evhttp_request *req = q->conn ? evhttp_request_new(on_done, q) : NULL;
    char *body = body_of(g->p, &g->w->items[idx]);
    if (!req || !body) {
        free(body);
        if (req) evhttp_request_free(req);
        on_done(NULL, q);
        return;
    }
    evhttp_connection_set_timeout(q->conn, g->p->timeout_s > 0 ? g->p->timeout_s : 600);
    evhttp_request_set_chunked_cb(req, on_chunk);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Host", g->p->host);
    evhttp_add_header(h, "Content-Type", "application/json");
    if (g->p->api_key) {
        char auth[512];
        snprintf(auth, sizeof(auth), "Bearer %s", g->p->api_key);
        evhttp_add_header(h, "Authorization", auth);
    }
    evbuffer_add(evhttp_request_get_output_buffer(req), body, strlen(body));
    free(body);
    if (evhttp_make_request(q->conn, req, EVHTTP_REQ_POST, g->p->path ? g->p->path : "/v1/completions") != 0)
        on_done(NULL, q);
}

/* Closed loop: keep `concurrency` in flight. Open loop: whatever is due by its arrival time. */
static void start_next(lg *g) {
    double t = (double)(now_us() - g->t0) / 1e6;
    while (g->next < g->w->n) {
        if (g->p->concurrency > 0 ? g->in_flight >= g->p->concurrency : g->w->items[g->next].arrival_s > t) break;
        send_one(g, g->next++);
    }
}

static void on_tick(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    start_next(arg);
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

int cb_loadgen_run(const cb_loadgen_params *p, const cb_workload *w, cb_loadgen_result *r, char *err, size_t errlen) {
    memset(r, 0, sizeof(*r));
    lg g = {.p = p, .w = w, .r = r};
    r->n = w->n;
    r->tl = calloc((size_t)w->n, sizeof(*r->tl));
    r->status = calloc((size_t)w->n, sizeof(int));
    r->usage_out = calloc((size_t)w->n, sizeof(int32_t));
    r->usage_cached = calloc((size_t)w->n, sizeof(int32_t));
    g.reqs = calloc((size_t)w->n, sizeof(*g.reqs));
    g.base = event_base_new();
    if (!r->tl || !r->status || !r->usage_out || !r->usage_cached || !g.reqs || !g.base) {
        cb_set_err(err, errlen, "out of memory");
        goto fail;
    }
    for (int i = 0; i < w->n; i++) {
        r->tl[i].t_tokens_us = calloc((size_t)w->items[i].n_out * 2 + 8, sizeof(int64_t));
        if (!r->tl[i].t_tokens_us) {
            cb_set_err(err, errlen, "out of memory");
            goto fail;
        }
    }
    double cpu0 = cpu_seconds();
    g.t0 = now_us();
    g.tick = event_new(g.base, -1, EV_PERSIST, on_tick, &g);
    struct timeval tv = {0, 2000}; /* open loop: 2 ms arrival resolution */
    if (!g.tick || event_add(g.tick, &tv) != 0) {
        cb_set_err(err, errlen, "cannot start the timer");
        goto fail;
    }
    start_next(&g);
    if (w->n > 0) event_base_dispatch(g.base);
    r->wall_s = (double)(now_us() - g.t0) / 1e6;
    r->cpu_s = cpu_seconds() - cpu0;
    event_free(g.tick);
    event_base_loop(g.base, EVLOOP_NONBLOCK); /* run the pending connection frees */
    for (int i = 0; i < w->n; i++)
        free(g.reqs[i].line);
    free(g.reqs);
    event_base_free(g.base);
    return 0;
fail:
    if (g.tick) event_free(g.tick);
    free(g.reqs);
    if (g.base) event_base_free(g.base);
    cb_loadgen_result_free(r);
    return -1;
}

void cb_loadgen_result_free(cb_loadgen_result *r) {
    for (int i = 0; r->tl && i < r->n; i++)
        free(r->tl[i].t_tokens_us);
    free(r->tl);
    free(r->status);
    free(r->usage_out);
    free(r->usage_cached);
    memset(r, 0, sizeof(*r));
}
