/* server.c — `cobatch serve`: routes, the completion endpoints over the engine, and the drain.
 * One event-loop thread; connections are httpd.c's, parsing and tokenizing run on the intake
 * worker, generation on the engine thread. A completion request goes
 *   http request -> intake (parse, tokenize) -> cobatch_submit -> TOKEN events -> FINISHED event
 * and ends in exactly one answer: a 200 (whole or streamed), or an error status with an error body
 * in its API's shape (a stream that has begun ends with an error event instead), or nothing when
 * its client has gone. Its output's shapes are output.c's, its head's checks admit.c's. */
#include "server_internal.h"
#include "../util/buf.h"
#include "../util/faultalloc.h"
#include "httpd.h"
#include "intake.h"
#include "metrics.h"
#include "../openai/bounds.h"
#include "../openai/openai.h"
#include "guard.h"
#include "../ollama/ollama.h"
#include "routes.h"
#include "webui.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <event2/event.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* A body of more than CB_SRV_BULK_BYTES, or of more JSON objects than CB_SRV_BULK_OBJECTS (messages,
 * blocks, items: a chat renders in ~0.35 ms a message on an idle core, ten times that beside a busy
 * engine, whose threads come first), is parsed, rendered and tokenized on a worker of its own, at
 * most CB_SRV_BULK_JOBS at a time beyond which such a request gets 503; the others (agents' turns
 * among them) never wait behind it. */
#define CB_SRV_BULK_BYTES (128 * 1024)
#define CB_SRV_BULK_OBJECTS 256
#define CB_SRV_BULK_JOBS 8

/* Whether a body goes to the bulk worker: its bytes, or its '{' counted (strings too: an estimate). */
static bool bulky(const char *body, size_t len) {
    if (len > CB_SRV_BULK_BYTES) return true;
    int n = 0;
    for (const char *p = body, *end = body + len; (p = memchr(p, '{', (size_t)(end - p))) != NULL; p++)
        if (++n > CB_SRV_BULK_OBJECTS) return true;
    return false;
}

/* ---------------------------------------------------------------- requests ------------------ */

static cb_srv_req *req_new(srv *s, cb_conn *c, cb_openai_kind kind, const cb_dialect *d) {
    cb_srv_req *r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    r->s = s;
    r->conn = c;
    r->kind = kind;
    r->dialect = d;
    r->created = (long)time(NULL);
    snprintf(r->cid, sizeof(r->cid), "%s%llx%06llx", d->id_prefix, (unsigned long long)r->created,
             (unsigned long long)++s->next_cid);
    r->next = s->reqs;
    if (s->reqs) s->reqs->prev = r;
    s->reqs = r;
    s->n_reqs++;
    return r;
}

static void req_free(cb_srv_req *r) {
    srv *s = r->s;
    if (r->prev)
        r->prev->next = r->next;
    else
        s->reqs = r->next;
    if (r->next) r->next->prev = r->prev;
    s->n_reqs--;
    for (int i = 0; i < r->n; i++) {
        cb_buf_free(&r->ch[i].text);
        free(r->ch[i].lp);
        cobatch_chat_output_clear(&r->ch[i].out);
        free(r->ch[i].sent_args);
        free(r->ch[i].ids);
    }
    cobatch_chat_free(r->chat);
    if (r->dst) r->dialect->stream_free(r->dst);
    free(r->dst);
    cJSON_Delete(r->echo);
    free(r->ch);
    for (int i = 0; i < r->n_stops; i++)
        free(r->stops[i]);
    free(r->stops);
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].tokens);
        free(r->prompts[i].text);
    }
    free(r->prompts);
    free(r->embd);
    free(r);
}

/* The client left (or was dropped): stop writing to it; the engine frees the request's cells. */
static void on_gone(cb_conn *c, void *req_user, void *user) {
    (void)c;
    srv *s = user;
    cb_srv_req *r = req_user;
    r->conn = NULL;
    if (r->at_intake) cb_intake_cancel(r->jb);
    if (r->live > 0) {
        s->m.client_gone++;
        cb_srv_cancel_all(s, r);
    }
}

/* Every second: a stream that sent nothing for the ping interval (waiting in the queue, its prompt
 * being computed: a 20k-token prompt takes a minute on two cores) gets its head, if none went yet, then
 * a keep-alive its clients ignore (an SSE comment; Anthropic's ping event), before an idle timeout
 * takes it for dead (Claude Code gives up after ~15 s of silence). A request that fails before its
 * first token then ends its stream with an error event instead of an error status. */
static void on_ping(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    srv *s = arg;
    int64_t now = cobatch_time_us(), every = (int64_t)s->p.sse_ping_interval_s * 1000000;
    for (cb_srv_req *r = s->reqs; r && every > 0; r = r->next) {
        if (!r->stream || !r->conn || r->at_intake || r->live == 0 || now - r->quiet_since_us < every) continue;
        if (!r->started) cb_srv_start_stream(s, r, &(struct cobatch_event){.n_prompt = r->n_prompt_hint});
        if (r->conn && !cb_srv_send_events(s, r, strdup(r->dialect->ping))) continue;
        s->m.sse_pings++;
    }
}

static const char *finish_name(enum cobatch_finish_reason f) { return f == COBATCH_FINISH_LENGTH ? "length" : "stop"; }

/* Output for a non-streaming answer; bounded by the request's max_tokens. */
static bool append(cb_srv_choice *c, const char *text, size_t n) { return cb_buf_append(&c->text, text, n); }

/* llama.cpp's output parser recurses per nesting level (an output forced 3,700 levels deep crashed
 * the loop): the output's brackets are counted as they come, and past --limit json-depth the
 * request ends with an error instead of a read. Brackets in strings count too: a bound that may
 * refuse an odd output, never one that lets a deep one through. */
static bool nests_within(cb_srv_choice *c, const char *t, size_t n) {
    for (size_t i = 0; i < n && !c->too_deep; i++) {
        if (t[i] == '[' || t[i] == '{')
            c->too_deep = ++c->depth > cb_bounds.json_depth;
        else if ((t[i] == ']' || t[i] == '}') && c->depth > 0)
            c->depth--;
    }
    return !c->too_deep;
}

static void fail_too_deep(srv *s, cb_srv_choice *c) {
    char why[160];
    snprintf(why, sizeof(why),
             "the output nests deeper than %d levels, past what its tool calls may be read at (--limit json-depth)",
             cb_bounds.json_depth);
    struct cobatch_event ev = {.reason = COBATCH_FINISH_ERROR, .error = why};
    cb_srv_fail(s, c->r, c->index, &ev);
}

/* A streamed output is read again each time it has grown by 1/CB_READ_SPAN of its length (every
 * piece under CB_READ_SPAN bytes): reading costs at most CB_READ_SPAN bytes parsed per byte
 * generated however long the output (llama.cpp's parsers read ~7 ns a byte here: ~8 us), and what a
 * client waits for is len / CB_READ_SPAN bytes (256 at 256 KB). The last read, at its end, is whole. */
#define CB_READ_SPAN 1024
static bool read_due(const cb_srv_choice *c) { return c->text.len - c->read_len >= c->text.len / CB_READ_SPAN; }

static void on_token(srv *s, cb_srv_choice *c, const struct cobatch_event *ev) {
    cb_srv_req *r = c->r;
    s->m.generation_tokens++;
    if (c->t_last_token_us) cb_srv_hist_observe(&s->m.itl, (double)(ev->t_us - c->t_last_token_us) / 1e6);
    c->t_last_token_us = ev->t_us;
    if (!r->conn) return;
    if (!cb_srv_take_prompt(s, c, ev) || (ev->logprobs && r->logprobs && !cb_srv_keep_rows(c, ev->logprobs, 1))) {
        cb_srv_lost_output(s, r);
        return;
    }
    if (!r->conn) return;
    if (r->parses) { /* the whole output is read again with each piece */
        if (!append(c, ev->text, ev->text_len)) {
            cb_srv_lost_output(s, r);
        } else if (r->reads_json && !nests_within(c, ev->text, ev->text_len)) {
            fail_too_deep(s, c);
        } else if (r->stream && ev->text_len && read_due(c)) {
            if (!r->started) cb_srv_start_stream(s, r, ev);
            c->read_len = c->text.len;
            if (!cb_srv_read_output(c, true))
                cb_srv_lost_output(s, r);
            else if (r->conn)
                cb_srv_send_calls(s, c, false);
        }
        return;
    }
    if (r->stream) {
        if (!r->started) cb_srv_start_stream(s, r, ev);
        if (ev->text_len && r->conn) cb_srv_send_chunk(s, c, ev->text, NULL); /* rows of held text wait for it */
        return;
    }
    if (!append(c, ev->text, ev->text_len)) cb_srv_lost_output(s, r);
}

/* Per engine request (a choice); the prompt is counted once per HTTP request, with its first choice. */
static void count_finish(srv *s, const struct cobatch_event *ev, bool first_choice) {
    const struct cobatch_timings *t = &ev->timings;
    switch (ev->reason) {
    case COBATCH_FINISH_STOP: s->m.finished_stop++; break;
    case COBATCH_FINISH_LENGTH: s->m.finished_length++; break;
    case COBATCH_FINISH_CANCELLED: s->m.finished_cancelled++; break;
    default: s->m.finished_error++; break;
    }
    if (first_choice) s->m.prompt_tokens += (uint64_t)ev->n_prompt;
    if (t->t_first_token_us) cb_srv_hist_observe(&s->m.ttft, (double)(t->t_first_token_us - t->t_submit_us) / 1e6);
    if (t->t_scheduled_us) cb_srv_hist_observe(&s->m.queue, (double)(t->t_scheduled_us - t->t_submit_us) / 1e6);
    cb_srv_hist_observe(&s->m.e2e, (double)(t->t_finish_us - t->t_submit_us) / 1e6);
}

/* An answer back from the worker: sent, and the request freed. */
static void on_answers(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    srv *s = arg;
    uint64_t v;
    ssize_t n = read(fd, &v, sizeof(v));
    (void)n;
    cb_intake_job *jb;
    while ((jb = cb_intake_take(s->answers)) != NULL) {
        cb_srv_req *r = jb->owner;
        r->at_intake = false;
        r->jb = NULL;
        if (r->conn) cb_srv_reply_json(s, r->conn, jb->status, jb->status == 200 ? jb->json : NULL, NULL);
        r->conn = NULL;
        req_free(r);
        cb_intake_job_free(jb);
    }
}

/* An embedding request ended: its answer (built on the answers worker), or its error. */
static void on_embeddings(srv *s, cb_srv_req *r, struct cobatch_event *ev) {
    r->ch[0].id = 0;
    r->live = 0;
    if (ev->reason != COBATCH_FINISH_STOP || !ev->embd) {
        if (!r->failed) cb_srv_fail(s, r, 0, ev);
    } else {
        r->embd = ev->embd; /* taken from the event */
        ev->embd = NULL;
        r->embd_inputs = ev->n_inputs;
        r->embd_dim = ev->n_embd;
        r->n_prompt = ev->n_prompt;
        if (r->conn && cb_srv_answer(s, r)) return;
    }
    req_free(r);
}

static void on_finished(srv *s, cb_srv_choice *c, struct cobatch_event *ev) {
    cb_srv_req *r = c->r;
    if (r->kind == CB_OPENAI_EMBEDDINGS) {
        on_embeddings(s, r, ev);
        return;
    }
    bool first = c->index % r->per_prompt == 0; /* the prompt counts once, with its first choice */
    count_finish(s, ev, first);
    c->id = 0;
    r->live--;
    bool ok = ev->reason == COBATCH_FINISH_STOP || ev->reason == COBATCH_FINISH_LENGTH;
    if (!ok && !r->failed) cb_srv_fail(s, r, c->index, ev);
    if (ok && !r->failed) {
        c->finish = finish_name(ev->reason);
        c->stop = ev->stop;
        if (first) {
            r->n_prompt += ev->n_prompt;
            r->n_cached += ev->n_cached;
        }
        if (c->index == 0 && ev->timings.t_first_token_us) {
            const struct cobatch_timings *t = &ev->timings;
            r->prompt_ms = (double)(t->t_first_token_us - t->t_submit_us) / 1e3; /* its wait too */
            r->predicted_ms = (double)(t->t_finish_us - t->t_first_token_us) / 1e3;
        }
        r->n_generated += ev->n_generated;
        r->n_reasoning += ev->n_reasoning;
        r->n_prediction += ev->n_prediction;
        r->n_pred_accepted += ev->n_prediction_accepted;
        if (r->conn && !cb_srv_take_prompt(s, c, ev)) {
            cb_srv_lost_output(s, r);
        } else if (r->conn && r->parses) { /* the output read whole (with the answer when not streamed) */
            if (!append(c, ev->text, ev->text_len)) {
                cb_srv_lost_output(s, r);
            } else if (r->reads_json && !nests_within(c, ev->text, ev->text_len)) {
                fail_too_deep(s, c);
            } else if (r->stream && !cb_srv_read_output(c, false)) {
                cb_srv_lost_output(s, r);
            } else if (r->stream) {
                if (c->out.n_calls && ev->reason == COBATCH_FINISH_STOP) c->finish = "tool_calls";
                if (!r->started) cb_srv_start_stream(s, r, ev);
                if (r->conn) cb_srv_send_calls(s, c, true);
                if (r->conn) cb_srv_send_chunk(s, c, "", c->finish);
            }
        } else if (r->conn && r->stream) {
            if (!r->started) cb_srv_start_stream(s, r, ev);
            if (r->conn) cb_srv_send_chunk(s, c, ev->text, c->finish);
        } else if (r->conn && !append(c, ev->text, ev->text_len)) {
            cb_srv_lost_output(s, r);
        }
    }
    if (r->live > 0) return;
    if (r->conn && !r->failed && cb_srv_answer(s, r)) return;
    req_free(r);
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
            cb_srv_choice *c = evs[i].user_data;
            if (evs[i].type == COBATCH_EVENT_TOKEN)
                on_token(s, c, &evs[i]);
            else
                on_finished(s, c, &evs[i]);
            cobatch_event_clear(&evs[i]);
        }
    }
}

/* ---------------------------------------------------------------- completions --------------- */

/* A parsed and tokenized embeddings request back from the intake worker: one engine request for all
 * its inputs (the engine batches them with other requests' as its passes allow). */
static void submit_embeddings(srv *s, cb_srv_req *r, cb_intake_job *j) {
    if (s->draining) {
        cb_srv_dreply_error(s, r->conn, r->dialect, 503, "service_unavailable", NULL,
                            "the server is shutting down; retry elsewhere");
        r->conn = NULL;
        return;
    }
    struct cobatch_embd_input *in = calloc((size_t)j->n_prompts, sizeof(*in));
    r->ch = calloc(1, sizeof(*r->ch));
    if (!in || !r->ch) {
        free(in);
        cb_srv_dreply_error(s, r->conn, r->dialect, 503, "service_unavailable", NULL, "out of memory; retry later");
        r->conn = NULL;
        return;
    }
    for (int i = 0; i < j->n_prompts; i++)
        in[i] = (struct cobatch_embd_input){.tokens = j->prompts[i].tokens, .n_tokens = j->prompts[i].n_tokens};
    r->n = 1;
    r->per_prompt = 1;
    r->ch[0] = (cb_srv_choice){.r = r, .index = 0};
    r->embd_base64 = j->embd.base64;
    struct cobatch_embd_params p = {.inputs = in, .n_inputs = j->n_prompts, .user_data = &r->ch[0]};
    struct cobatch_error err = {0};
    cobatch_req_id id = cobatch_embed(s->engine, &p, &err);
    free(in);
    if (id > 0) {
        r->ch[0].id = id;
        r->live = 1;
        return;
    }
    if (id == COBATCH_ERR_QUEUE_FULL) {
        s->m.rejected_queue_full++;
        cb_srv_dreply_error(s, r->conn, r->dialect, 429, "rate_limit_error", NULL, "%s", err.message);
    } else if (id == COBATCH_ERR_SHUTDOWN || id == COBATCH_ERR_NOMEM) {
        cb_srv_dreply_error(s, r->conn, r->dialect, 503, "service_unavailable", NULL, "%s", err.message);
    } else {
        cb_srv_dreply_error(s, r->conn, r->dialect, 400, "invalid_request_error", "input", "%s", err.message);
    }
    r->conn = NULL;
}

/* A parsed and tokenized request back from the intake worker: submit it. */
static void submit(srv *s, cb_srv_req *r, cb_intake_job *j) {
    if (s->draining) {
        cb_srv_dreply_error(s, r->conn, r->dialect, 503, "service_unavailable", NULL,
                            "the server is shutting down; retry elsewhere");
        return;
    }
    if (j->req.has_priority && s->p.sched_policy != COBATCH_SCHED_PRIORITY) {
        cb_srv_dreply_error(s, r->conn, r->dialect, 400, "invalid_request_error", "priority",
                            "'priority' needs priority scheduling (cobatch serve --scheduling-policy priority)");
        return;
    }
    struct cobatch_request_params p = j->req.params;
    p.prompt = NULL;               /* the tokens the worker made are what the engine would make */
    p.parsed_grammar = j->grammar; /* parsed by the worker: each choice takes a copy */
    p.grammar = NULL;
    p.messages = NULL;
    p.n_messages = 0;
    p.tools = NULL;
    p.json_schema = NULL;
    p.chat = r->chat = j->chat; /* chat: rendered by the worker, with its grammar and parser */
    j->chat = NULL;
    r->echo = j->echo;
    j->echo = NULL;
    r->calls_tools = cobatch_chat_calls_tools(r->chat);
    r->parses = cobatch_chat_parses(r->chat);
    r->thinks = cobatch_chat_thinks(r->chat);
    r->reads_json = r->calls_tools || (r->thinks && j->req.json_schema);
    r->omit_reasoning = j->req.omit_reasoning;
    r->hold_reasoning = j->req.hold_reasoning;
    r->stream = j->req.stream;
    r->include_usage = j->req.include_usage;
    r->per_prompt = j->req.n;
    r->logprobs = j->req.params.logprobs;
    r->top = j->req.top;
    r->stride = 1 + r->top;
    r->tokens_as_ids = j->req.tokens_as_ids;
    if (j->req.params.n_stop) { /* to name the one that ends the output */
        r->stops = calloc(j->req.params.n_stop, sizeof(char *));
        for (size_t i = 0; r->stops && i < j->req.params.n_stop; i++)
            if ((r->stops[i] = strdup(j->req.params.stop[i])))
                r->n_stops = (int)i + 1;
            else
                break;
        if (r->n_stops != (int)j->req.params.n_stop) {
            cb_srv_dreply_error(s, r->conn, r->dialect, 503, "service_unavailable", NULL, "out of memory; retry later");
            r->conn = NULL;
            return;
        }
    }
    r->share_prompt_rows = j->req.params.prompt_logprobs && !r->stream && r->per_prompt > 1;
    if (r->chat)
        cobatch_chat_tokens(r->chat, &r->n_prompt_hint);
    else if (j->n_prompts > 0)
        r->n_prompt_hint = j->prompts[0].n_tokens;
    r->prompts = j->prompts; /* the request keeps the prompts' echo texts */
    r->n_prompts = j->n_prompts;
    j->prompts = NULL;
    j->n_prompts = 0;
    int n = r->n_prompts * r->per_prompt;
    if (n > cobatch_max_queue(s->engine)) { /* it could never all wait at once: no use retrying */
        const char *param = r->per_prompt > 1 ? "n" : "prompt";
        cb_srv_dreply_error(s, r->conn, r->dialect, 400, "invalid_request_error", param,
                            "%d sequences (prompts x n) is more than the server queues at once (%d, --max-queue)", n,
                            cobatch_max_queue(s->engine));
        r->conn = NULL;
        return;
    }
    r->ch = calloc((size_t)n, sizeof(*r->ch));
    if (!r->ch) {
        cb_srv_dreply_error(s, r->conn, r->dialect, 503, "service_unavailable", NULL, "out of memory; retry later");
        return;
    }
    r->n = n;
    struct cobatch_error err = {0};
    cobatch_req_id id = 0;
    for (int i = 0; i < r->n; i++) { /* the choices of a prompt share its cells through the prefix cache */
        int k = i % r->per_prompt;
        r->ch[i] = (cb_srv_choice){.r = r, .index = i, .echo_due = j->req.echo};
        p.user_data = &r->ch[i];
        p.prompt_logprobs = j->req.params.prompt_logprobs && (k == 0 || !r->share_prompt_rows);
        p.prompt_tokens = r->chat ? NULL : r->prompts[i / r->per_prompt].tokens;
        p.n_prompt_tokens = r->chat ? 0 : r->prompts[i / r->per_prompt].n_tokens;
        if (j->req.params.sampling.seed != COBATCH_SEED_RANDOM) { /* a seeded request: n seeded samples */
            uint32_t seed = j->req.params.sampling.seed + (uint32_t)k;
            p.sampling.seed = seed == COBATCH_SEED_RANDOM ? 0 : seed;
        }
        id = cobatch_submit(s->engine, &p, &err);
        if (id <= 0) break;
        r->ch[i].id = id;
        r->live++;
    }
    if (id > 0) {
        r->quiet_since_us = cobatch_time_us();
        return;
    }
    if (r->live > 0) { /* some choices went in: they end cancelled, the answer is the error below */
        r->failed = true;
        cb_srv_cancel_all(s, r);
    }
    if (id == COBATCH_ERR_QUEUE_FULL) {
        s->m.rejected_queue_full++;
        cb_srv_dreply_error(s, r->conn, r->dialect, 429, "rate_limit_error", NULL, "%s", err.message);
    } else if (id == COBATCH_ERR_SHUTDOWN || id == COBATCH_ERR_NOMEM) {
        cb_srv_dreply_error(s, r->conn, r->dialect, 503, "service_unavailable", NULL, "%s", err.message);
    } else {
        cb_srv_dreply_error(s, r->conn, r->dialect, 400, "invalid_request_error", cb_openai_param(&j->req, err.param),
                            "%s", err.message);
    }
    r->conn = NULL;
}

static void on_intake(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    srv *s = arg;
    uint64_t v;
    ssize_t n = read(fd, &v, sizeof(v));
    (void)n;
    cb_intake_job *j;
    while ((j = cb_intake_take(s->in)) != NULL || (j = cb_intake_take(s->bulk)) != NULL) {
        cb_srv_req *r = j->owner;
        r->at_intake = false;
        r->jb = NULL;
        bool runs = j->kind == INTAKE_COMPLETION || j->kind == INTAKE_INFILL; /* to the engine, when parsed */
        if (r->conn && (j->status != 200 || (!runs && j->kind != INTAKE_EMBEDDINGS)))
            cb_srv_reply_json(s, r->conn, j->status, j->json, NULL);
        else if (r->conn && j->kind == INTAKE_EMBEDDINGS)
            submit_embeddings(s, r, j);
        else if (r->conn)
            submit(s, r, j);
        if (r->live == 0) req_free(r); /* answered already, or the client left */
        cb_intake_job_free(j);
    }
}

/* Hands the request's body to the intake worker. */
static void to_intake(srv *s, cb_conn *c, cb_http_req *hr, cb_intake_kind kind, cb_openai_kind api,
                      const cb_dialect *d) {
    if (s->draining && (kind == INTAKE_COMPLETION || kind == INTAKE_INFILL || kind == INTAKE_EMBEDDINGS)) {
        cb_srv_dreply_error(s, c, d, 503, "service_unavailable", NULL, "the server is shutting down; retry elsewhere");
        return;
    }
    cb_intake_job *j = calloc(1, sizeof(*j));
    cb_srv_req *r = j ? req_new(s, c, api, d) : NULL;
    if (!r) {
        free(j);
        cb_srv_dreply_error(s, c, d, 503, "service_unavailable", NULL, "out of memory");
        return;
    }
    r->job = j->kind = kind;
    j->api = api;
    j->dialect = d;
    j->body = cb_http_req_take_body(hr, &j->len);
    j->owner = r;
    if (!j->body || !cb_intake_submit(bulky(j->body, j->len) ? s->bulk : s->in, j)) {
        bool busy = j->body != NULL;
        cb_intake_job_free(j);
        r->conn = NULL;
        req_free(r);
        if (busy) s->m.rejected_busy++;
        cb_srv_dreply_error(s, c, d, 503, "service_unavailable", NULL, "%s",
                            busy ? "the server is busy; retry later" : "out of memory");
        return;
    }
    r->at_intake = true;
    r->jb = j;
    cb_conn_set_user(c, r);
}

/* ---------------------------------------------------------------- routing ------------------- */

static void on_request(cb_conn *c, cb_http_req *hr, void *user) {
    srv *s = user;
    s->m.http_requests++;
    const cb_srv_route *rt = cb_srv_admit(s, c, hr);
    if (!rt) return;
    switch (rt->id) {
    case R_HEALTH:
        if (s->leaving)
            cb_srv_reply_error(s, c, 503, "service_unavailable", NULL, "the server is shutting down");
        else
            cb_srv_reply_json(s, c, 200, "{\"status\":\"ok\"}", NULL);
        return;
    case R_METRICS: cb_srv_handle_metrics(s, c); return;
    case R_MODELS: cb_srv_handle_models(s, c); return;
    case R_MODEL_INFO: cb_srv_handle_model_info(s, c); return;
    case R_TOKENIZER_INFO: cb_srv_handle_tokenizer_info(s, c); return;
    case R_COMPLETIONS: to_intake(s, c, hr, INTAKE_COMPLETION, CB_OPENAI_COMPLETION, cb_srv_dialect_of(rt->id)); return;
    case R_CHAT: to_intake(s, c, hr, INTAKE_COMPLETION, CB_OPENAI_CHAT, cb_srv_dialect_of(rt->id)); return;
    case R_MESSAGES:
    case R_RESPONSES: to_intake(s, c, hr, INTAKE_COMPLETION, CB_OPENAI_CHAT, cb_srv_dialect_of(rt->id)); return;
    case R_NATIVE_COMPLETION:
        to_intake(s, c, hr, INTAKE_COMPLETION, CB_OPENAI_COMPLETION, cb_srv_dialect_of(rt->id));
        return;
    case R_INFILL: to_intake(s, c, hr, INTAKE_INFILL, CB_OPENAI_COMPLETION, cb_srv_dialect_of(rt->id)); return;
    case R_COUNT_TOKENS:
    case R_INPUT_TOKENS: to_intake(s, c, hr, INTAKE_COUNT, CB_OPENAI_CHAT, cb_srv_dialect_of(rt->id)); return;
    case R_TOKENIZE: to_intake(s, c, hr, INTAKE_TOKENIZE, CB_OPENAI_COMPLETION, cb_srv_dialect_of(rt->id)); return;
    case R_DETOKENIZE: to_intake(s, c, hr, INTAKE_DETOKENIZE, CB_OPENAI_COMPLETION, cb_srv_dialect_of(rt->id)); return;
    case R_EMBEDDINGS:
        if (!s->has_embeddings) /* as llama-server answers a server started without --embeddings */
            cb_srv_reply_error(s, c, 501, "not_supported_error", NULL,
                               "this server computes no embeddings (started with --no-embeddings)");
        else
            to_intake(s, c, hr, INTAKE_EMBEDDINGS, CB_OPENAI_EMBEDDINGS, cb_srv_dialect_of(rt->id));
        return;
    case R_PROPS: cb_srv_handle_props(s, c); return;
    case R_OLLAMA_VERSION: cb_srv_reply_json(s, c, 200, "{\"version\":\"" CB_OLLAMA_VERSION "\"}", NULL); return;
    case R_OLLAMA_TAGS:
    case R_OLLAMA_PS:
    case R_OLLAMA_SHOW: cb_srv_handle_ollama_model(s, c, rt->id); return;
    case R_OLLAMA_CHAT:
    case R_OLLAMA_GENERATE: to_intake(s, c, hr, INTAKE_COMPLETION, CB_OPENAI_CHAT, cb_srv_dialect_of(rt->id)); return;
    case R_OLLAMA_EMBED:
    case R_OLLAMA_EMBEDDINGS:
        if (!s->has_embeddings)
            cb_srv_dreply_error(s, c, cb_srv_dialect_of(rt->id), 501, "not_supported_error", NULL,
                                "this server computes no embeddings (started with --no-embeddings)");
        else
            to_intake(s, c, hr, INTAKE_EMBEDDINGS, CB_OPENAI_EMBEDDINGS, cb_srv_dialect_of(rt->id));
        return;
    case R_APPLY_TEMPLATE: to_intake(s, c, hr, INTAKE_TEMPLATE, CB_OPENAI_CHAT, cb_srv_dialect_of(rt->id)); return;
    case R_WEBUI: cb_srv_handle_webui(c); return;
    }
}

/* ---------------------------------------------------------------- lifecycle ----------------- */

/* The drain timed out (or a second signal came): what still runs is cancelled; each request ends
 * with its answer as its FINISHED event comes back. */
static void cut(srv *s) {
    if (s->cut) return;
    s->cut = true;
    s->cut_end_us = cobatch_time_us() + 10 * 1000000LL; /* an engine step is seconds at most */
    int n = 0;
    for (cb_srv_req *r = s->reqs; r; r = r->next)
        for (int i = 0; i < r->n; i++)
            if (r->ch[i].id > 0) n += cobatch_cancel(s->engine, r->ch[i].id) == COBATCH_OK;
    fprintf(stderr, "cobatch serve: %s, %d requests cut short\n",
            cobatch_time_us() >= s->drain_end_us ? "drain timeout" : "a further signal", n);
}

static void start_drain(srv *s);

/* While stopping, every 50 ms: leave once every request has ended and its answer has left (or
 * had 2 s to leave), or when the cut requests have had their time. */
static void on_tick(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    srv *s = arg;
    int64_t now = cobatch_time_us();
    if (!s->leaving) return; /* no signal yet */
    if (!s->draining) {      /* the grace */
        if (now >= s->grace_end_us) start_drain(s);
        return;
    }
    if (!s->cut && now >= s->drain_end_us) cut(s);
    bool idle = true; /* no request with a client or in the engine (a job at intake whose client was
                         answered is not waited for: the worker is joined at exit) */
    for (cb_srv_req *r = s->reqs; r && idle; r = r->next)
        idle = !r->conn && r->live == 0;
    cb_httpd_stats hs;
    cb_httpd_get_stats(s->httpd, &hs);
    if (!idle) s->flush_end_us = 0; /* e.g. a /tokenize that came in during the drain */
    if (idle && !s->flush_end_us) s->flush_end_us = now + 2 * 1000000LL;
    if ((idle && (hs.open == 0 || now >= s->flush_end_us)) || (s->cut && now >= s->cut_end_us))
        event_base_loopexit(s->base, NULL);
}

/* No more requests: queued ones and those still being parsed answer 503 (a router retries them
 * elsewhere), running ones may finish for drain_timeout_s. */
static void start_drain(srv *s) {
    fprintf(stderr, "cobatch serve: draining (%d requests open, up to %d s)\n", s->n_reqs, s->p.drain_timeout_s);
    s->draining = true;
    s->drain_end_us = cobatch_time_us() + (int64_t)s->p.drain_timeout_s * 1000000;
    cb_httpd_set_draining(s->httpd);
    cobatch_cancel_waiting(s->engine);              /* queued requests hear at once: 503, go elsewhere */
    for (cb_srv_req *r = s->reqs; r; r = r->next) { /* so do those still being parsed */
        if (!r->at_intake || !r->conn || r->jb->kind == INTAKE_CALL) continue; /* not an answer being built */
        cb_srv_dreply_error(s, r->conn, r->dialect, 503, "service_unavailable", NULL,
                            "the server is shutting down; retry elsewhere");
        r->conn = NULL;
    }
}

static void on_signal(evutil_socket_t sig, short what, void *arg) {
    (void)what;
    srv *s = arg;
    if (s->draining) { /* a second signal: no more waiting */
        cut(s);
        return;
    }
    if (s->leaving) { /* a second signal in the grace: the drain now */
        start_drain(s);
        return;
    }
    s->leaving = true;
    if (s->p.drain_grace_s > 0)
        fprintf(stderr, "cobatch serve: signal %d: /health answers 503, requests still taken for %d s\n", (int)sig,
                s->p.drain_grace_s);
    else
        fprintf(stderr, "cobatch serve: signal %d\n", (int)sig);
    s->grace_end_us = cobatch_time_us() + (int64_t)s->p.drain_grace_s * 1000000;
    if (s->p.drain_grace_s <= 0) start_drain(s);
    struct timeval tv = {0, 50000};
    event_add(s->ev_tick, &tv); /* pending since the start: a new period, nothing to allocate */
}

/* SIGTERM and SIGINT while the event loop is not there to hear them. libevent restores the handler
 * it found when its signal events are freed, so this one runs during the stop after the loop (the
 * engine and model being freed: a further signal must not turn a clean stop into a kill; the stop
 * is bounded, and SIGKILL remains) and in the moment before the loop's events are added (the
 * signal is kept and acted on once they are). */
static volatile sig_atomic_t signal_outside_loop;

static void on_signal_outside_loop(int sig) {
    if (!signal_outside_loop) signal_outside_loop = sig;
}

static void model_name(srv *s) {
    snprintf(s->model, sizeof(s->model), "%s", s->p.model_name ? s->p.model_name : "default");
    if (!s->p.model_name && s->p.model_path) { /* like vLLM: the model is named by its file */
        const char *b = strrchr(s->p.model_path, '/');
        snprintf(s->model, sizeof(s->model), "%s", b ? b + 1 : s->p.model_path);
        char *dot = strstr(s->model, ".gguf");
        if (dot && dot[5] == '\0') *dot = '\0';
    }
}

int cb_srv_run(cobatch_engine *engine, const cb_srv_params *params) {
    srv *s = calloc(1, sizeof(*s));
    if (!s) return -1;
    s->p = *params;
    if (s->p.drain_timeout_s <= 0) s->p.drain_timeout_s = 30;
    if (s->p.sse_ping_interval_s == 0) s->p.sse_ping_interval_s = 10;
    s->engine = engine;
    struct cobatch_embd_info embd;
    cobatch_embd_info(engine, &embd);
    s->has_embeddings = embd.n_embd > 0;
    cb_srv_metrics_init(&s->m);
    model_name(s);
    signal(SIGPIPE, SIG_IGN);
    if (cb_fault_alloc_available()) { /* a test build: cJSON's and libevent's allocations can fail too */
        cJSON_Hooks hooks = {.malloc_fn = cb_fa_malloc, .free_fn = free};
        cJSON_InitHooks(&hooks);
        event_set_mem_functions(cb_fa_malloc, cb_fa_realloc, free);
    }
    int rc = -1;
    char err[256] = "";
    cb_httpd_params hp = {.host = s->p.host,
                          .port = s->p.port,
                          .max_connections = s->p.max_connections,
                          .limits = {.max_head = s->p.max_head, .max_body = s->p.max_body},
                          .request_timeout_ms = s->p.request_timeout_s * 1000,
                          .idle_timeout_ms = s->p.idle_timeout_s * 1000,
                          .write_timeout_ms = s->p.write_timeout_s * 1000,
                          .max_stream_backlog = s->p.max_stream_backlog,
                          .sndbuf = s->p.sndbuf,
                          .on_request = on_request,
                          .on_gone = on_gone,
                          .on_head = cb_srv_on_head,
                          .on_error = cb_srv_on_http_error,
                          .user = s};
    s->guard = cb_guard_make(s->p.host, s->p.allowed_hosts);
    s->base = event_base_new();
    s->in = cb_intake_new(engine, &s->p.defaults, 64);
    s->answers = cb_intake_new(engine, &s->p.defaults, 64);
    s->bulk = cb_intake_new(engine, &s->p.defaults, CB_SRV_BULK_JOBS);
    s->httpd = s->base && s->in && s->answers && s->bulk ? cb_httpd_new(s->base, &hp, err, sizeof(err)) : NULL;
    if (!s->httpd) {
        fprintf(stderr, "cobatch serve: %s\n", err[0] ? err : "out of memory");
        goto out;
    }
    s->ev_engine = event_new(s->base, cobatch_event_fd(engine), EV_READ | EV_PERSIST, on_engine_events, s);
    s->ev_intake = event_new(s->base, cb_intake_fd(s->in), EV_READ | EV_PERSIST, on_intake, s);
    s->ev_bulk = event_new(s->base, cb_intake_fd(s->bulk), EV_READ | EV_PERSIST, on_intake, s);
    s->ev_answers = event_new(s->base, cb_intake_fd(s->answers), EV_READ | EV_PERSIST, on_answers, s);
    s->ev_term = evsignal_new(s->base, SIGTERM, on_signal, s);
    s->ev_int = evsignal_new(s->base, SIGINT, on_signal, s);
    /* the stopping clock, made and pending from the start (every 10 s, a no-op until a signal), so
     * that a signal needs no allocation to be acted on */
    s->ev_tick = event_new(s->base, -1, EV_PERSIST, on_tick, s);
    s->ev_ping = event_new(s->base, -1, EV_PERSIST, on_ping, s);
    if (!s->ev_engine || !s->ev_intake || !s->ev_bulk || !s->ev_answers || !s->ev_term || !s->ev_int || !s->ev_tick ||
        !s->ev_ping)
        goto out;
    struct timeval ping_tv = {1, 0};
    struct timeval idle_tv = {10, 0};
    struct sigaction sa = {.sa_handler = on_signal_outside_loop, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (event_add(s->ev_engine, NULL) || event_add(s->ev_intake, NULL) || event_add(s->ev_bulk, NULL) ||
        event_add(s->ev_answers, NULL) || event_add(s->ev_term, NULL) || event_add(s->ev_int, NULL) ||
        event_add(s->ev_tick, &idle_tv) || event_add(s->ev_ping, &ping_tv))
        goto out;
    int port = cb_httpd_port(s->httpd);
    fprintf(stderr, "cobatch serve: %s on http://%s:%d%s\n", s->model, s->p.host ? s->p.host : "127.0.0.1", port,
            s->p.no_webui ? "" : " (a chat page at /)");
    if (s->p.port_file) {
        FILE *f = fopen(s->p.port_file, "w");
        if (f) fprintf(f, "%d\n", port), fclose(f);
    }
    cb_fault_alloc_arm_from_env(); /* tests: allocations fail from now on (sanitizer build only) */
    if (signal_outside_loop) on_signal(signal_outside_loop, 0, s);
    signal_outside_loop = 0;
    event_base_dispatch(s->base);
    rc = 0;
    fprintf(stderr, "cobatch serve: stopped\n");
out:
    if (s->httpd) cb_httpd_free(s->httpd); /* clients still connected are told nothing more */
    if (s->in) cb_intake_free(s->in);
    if (s->bulk) cb_intake_free(s->bulk);
    if (s->answers) cb_intake_free(s->answers); /* before the requests its jobs read */
    while (s->reqs) /* left after a cut that outlasted its time: the engine cancels them as it stops */
        req_free(s->reqs);
    if (s->ev_engine) event_free(s->ev_engine);
    if (s->ev_intake) event_free(s->ev_intake);
    if (s->ev_bulk) event_free(s->ev_bulk);
    if (s->ev_answers) event_free(s->ev_answers);
    if (s->ev_term) event_free(s->ev_term);
    if (s->ev_int) event_free(s->ev_int);
    if (s->ev_tick) event_free(s->ev_tick);
    if (s->ev_ping) event_free(s->ev_ping);
    if (s->base) event_base_free(s->base);
    free(s);
    return rc;
}
