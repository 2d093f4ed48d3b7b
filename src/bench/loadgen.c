#include "loadgen.h"
#include "../util/buf.h"
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
    int32_t usage_prompt; /* usage.prompt_tokens, or -1 */
    int chunks;           /* content chunks seen */
    char *answer;         /* sessions: the answer's text, for the turns after it (answer_cap) */
    size_t answer_len, answer_cap;
} lg_req;

struct lg {
    const cb_loadgen_params *p;
    const cb_workload *w;
    cb_loadgen_result *r;
    struct event_base *base;
    lg_req *reqs;
    bool *sent; /* (n) sent, or ended unsent */
    int next;   /* items before it are all sent */
    int done, in_flight;
    int64_t t0;
    struct event *tick;
};

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A session's answer grows by a chunk's text (a turn the answer cannot be kept for goes on without
 * the rest of it). */
static void keep_answer(lg_req *q, const char *t) {
    size_t n = strlen(t);
    if (!cb_grow((void **)&q->answer, &q->answer_cap, q->answer_len + n + 1, 1, 256)) return;
    memcpy(q->answer + q->answer_len, t, n + 1);
    q->answer_len += n;
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
    cJSON *pt = usage ? cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens") : NULL;
    if (cJSON_IsNumber(pt)) q->usage_prompt = (int32_t)pt->valuedouble;
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
            if (q->g->w->n_sessions > 0) keep_answer(q, text->valuestring);
        }
    }
    cJSON_Delete(j);
}

static void on_chunk(struct evhttp_request *req, void *arg) {
    lg_req *q = arg;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    if (!cb_grow((void **)&q->line, &q->cap, q->len + n + 1, 1, 256)) return;
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
    g->r->usage_prompt[q->idx] = q->usage_prompt;
    if (g->w->n_sessions > 0 && q->usage_prompt >= 0) t->n_in = q->usage_prompt; /* the conversation so far */
    g->done++;
    g->in_flight--;
    /* the connection cannot be freed inside its own callback */
    event_base_once(g->base, -1, EV_TIMEOUT, free_conn, q->conn, NULL);
    if (g->done == g->w->n)
        event_base_loopexit(g->base, NULL);
    else
        start_next(g);
}

static void add_message(cJSON *msgs, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content ? content : "");
    cJSON_AddItemToArray(msgs, m);
}

static char *body_of(const lg *g, int idx) {
    const cb_loadgen_params *p = g->p;
    const cb_work_item *it = &g->w->items[idx];
    cJSON *b = cJSON_CreateObject();
    if (p->model) cJSON_AddStringToObject(b, "model", p->model);
    if (it->session >= 0) { /* the conversation so far: system, then each turn and its answer */
        cJSON *msgs = cJSON_AddArrayToObject(b, "messages");
        if (g->w->system_text) add_message(msgs, "system", g->w->system_text);
        for (int k = it->session; k <= idx; k += g->w->n_sessions) {
            add_message(msgs, "user", g->w->items[k].text);
            if (k < idx) add_message(msgs, "assistant", g->reqs[k].answer);
        }
    } else if (strstr(p->path, "/chat/completions")) { /* the prompt's text as one user message */
        add_message(cJSON_AddArrayToObject(b, "messages"), "user", it->text);
        if (p->prediction && it->prediction) {
            cJSON *pr = cJSON_AddObjectToObject(b, "prediction");
            cJSON_AddStringToObject(pr, "type", "content");
            cJSON_AddStringToObject(pr, "content", it->prediction);
        }
    } else if (it->text && !it->prediction) { /* (an edit's text is its user message: its tokens are the chat's) */
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
    q->usage_prompt = -1;
    g->sent[idx] = true;
    g->r->tl[idx].t_submit_us = now_us();
    g->r->tl[idx].n_in = g->w->items[idx].n_in;
    g->in_flight++;
    q->conn = evhttp_connection_base_new(g->base, NULL, g->p->host, (uint16_t)g->p->port);
    struct evhttp_request *req = q->conn ? evhttp_request_new(on_done, q) : NULL;
    char *body = body_of(g, idx);
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

/* A session's turn whose turn before failed ends unsent (as a request with no answer). */
static void skip(lg *g, int idx) {
    g->sent[idx] = true;
    g->r->tl[idx].t_submit_us = g->r->tl[idx].t_finish_us = now_us();
    g->r->usage_out[idx] = g->r->usage_cached[idx] = g->r->usage_prompt[idx] = -1;
    if (++g->done == g->w->n) event_base_loopexit(g->base, NULL);
}

/* Closed loop: keep `concurrency` in flight. Open loop: whatever is due by its arrival time. A
 * session's later turn: once the answer before it came and the think time passed. */
static void start_next(lg *g) {
    int64_t now = now_us();
    double t = (double)(now - g->t0) / 1e6;
    for (int i = g->next; i < g->w->n; i++) {
        if (g->sent[i]) {
            if (i == g->next) g->next++;
            continue;
        }
        if (g->p->concurrency > 0 && g->in_flight >= g->p->concurrency) break;
        const cb_work_item *it = &g->w->items[i];
        if (it->session >= 0 && it->turn > 0) {
            const cb_req_timeline *before = &g->r->tl[i - g->w->n_sessions];
            if (!g->sent[i - g->w->n_sessions] || !before->t_finish_us) continue; /* not answered yet */
            if (!before->ok) {
                skip(g, i);
                continue;
            }
            if (now < before->t_finish_us + (int64_t)(g->w->think_s * 1e6)) continue;
        } else if (g->p->concurrency <= 0 && it->arrival_s > t) {
            if (it->session < 0) break; /* in arrival order */
            continue;
        }
        send_one(g, i);
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
    r->usage_prompt = calloc((size_t)w->n, sizeof(int32_t));
    g.reqs = calloc((size_t)w->n, sizeof(*g.reqs));
    g.sent = calloc((size_t)w->n, sizeof(bool));
    g.base = event_base_new();
    if (!r->tl || !r->status || !r->usage_out || !r->usage_cached || !r->usage_prompt || !g.reqs || !g.sent ||
        !g.base) {
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
        free(g.reqs[i].line), free(g.reqs[i].answer);
    free(g.reqs);
    free(g.sent);
    event_base_free(g.base);
    return 0;
fail:
    if (g.tick) event_free(g.tick);
    free(g.reqs);
    free(g.sent);
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
    free(r->usage_prompt);
    memset(r, 0, sizeof(*r));
}

/* ---------------------------------------------------------------- the server's counters ------ */

typedef struct {
    struct event_base *base;
    char *body;
    int status;
} lg_get;

static void on_get(struct evhttp_request *req, void *arg) {
    lg_get *q = arg;
    q->status = req ? evhttp_request_get_response_code(req) : 0;
    struct evbuffer *in = req ? evhttp_request_get_input_buffer(req) : NULL;
    size_t n = in ? evbuffer_get_length(in) : 0;
    if (q->status == 200 && n < (16u << 20) && (q->body = malloc(n + 1))) {
        evbuffer_remove(in, q->body, n);
        q->body[n] = '\0';
    }
    event_base_loopexit(q->base, NULL);
}

/* The value of the first sample of metric `name` in a Prometheus text body; -1 when absent. */
static double metric_value(const char *body, const char *name) {
    size_t k = strlen(name);
    for (const char *l = body; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, name, k) != 0 || (l[k] != '{' && l[k] != ' ')) continue;
        const char *v = l[k] == '{' ? strchr(l + k, '}') : l + k;
        return v ? strtod(v + 1, NULL) : -1;
    }
    return -1;
}

int cb_loadgen_cache_hits(const cb_loadgen_params *p, double *hits, double *host) {
    lg_get q = {.base = event_base_new()};
    struct evhttp_connection *conn =
        q.base ? evhttp_connection_base_new(q.base, NULL, p->host, (uint16_t)p->port) : NULL;
    struct evhttp_request *req = conn ? evhttp_request_new(on_get, &q) : NULL;
    if (req) {
        evhttp_connection_set_timeout(conn, 10);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Host", p->host);
        if (p->api_key) {
            char auth[512];
            snprintf(auth, sizeof(auth), "Bearer %s", p->api_key);
            evhttp_add_header(evhttp_request_get_output_headers(req), "Authorization", auth);
        }
        if (evhttp_make_request(conn, req, EVHTTP_REQ_GET, "/metrics") == 0) event_base_dispatch(q.base);
    }
    *hits = q.body ? metric_value(q.body, "cobatch:prefix_cache_hits_total") : -1;
    *host = q.body ? metric_value(q.body, "cobatch:prefix_cache_host_hits_total") : -1;
    free(q.body);
    if (conn) evhttp_connection_free(conn);
    if (q.base) event_base_free(q.base);
    return *hits >= 0 && *host >= 0 ? 0 : -1;
}
