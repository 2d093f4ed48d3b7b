/* output.c — a request's output as its dialect shapes it: its stream started, its pieces, calls and
 * reasoning streamed as they are read, its failure, and its whole answer (on the answers worker). No
 * path here asks which dialect it serves. */
#include "server_internal.h"
#include "../util/buf.h"

#include <cjson/cJSON.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* An answer bigger than this gives the memory its building took back to the system. */
#define CB_SRV_TRIM_BYTES (8u << 20)

void cb_srv_cancel_all(srv *s, cb_srv_req *r) {
    for (int i = 0; i < r->n; i++)
        if (r->ch[i].id > 0) cobatch_cancel(s->engine, r->ch[i].id);
}

/* A stream that cannot go on (the client reads too slowly, or memory ran out): the request is
 * cancelled and the connection reset, so the client sees a failure, not a short answer. */
void cb_srv_drop_stream(srv *s, cb_srv_req *r, bool slow) {
    if (slow) s->m.slow_clients++;
    cb_srv_cancel_all(s, r);
    cb_conn_abort(r->conn);
    r->conn = NULL;
}

/* Stream events already framed by the request's dialect (SSE events, NDJSON lines); takes text. */
bool cb_srv_send_events(srv *s, cb_srv_req *r, char *text) {
    r->quiet_since_us = cobatch_time_us();
    bool ok = r->conn && text && (!*text || cb_conn_stream_write(r->conn, text, strlen(text)));
    if (!ok && r->conn) cb_srv_drop_stream(s, r, text != NULL);
    free(text);
    return ok;
}

static cb_dialect_head head(const srv *s, const cb_srv_req *r) {
    return (cb_dialect_head){.id = r->cid,
                             .created = r->created,
                             .model = s->model,
                             .echo = r->echo,
                             .n = r->n,
                             .include_usage = r->include_usage,
                             .calls_tools = r->calls_tools,
                             .base64 = r->embd_base64};
}

void cb_srv_start_stream(srv *s, cb_srv_req *r, const struct cobatch_event *ev) {
    r->started = true;
    cb_conn_stream_start(r->conn, 200, r->dialect->stream_type, "Cache-Control: no-cache\r\n");
    /* its state, then its first events (the usage so far: the prompt, its cached part) */
    cb_dialect_head h = head(s, r);
    if (!(r->dst = calloc(1, r->dialect->stream_size)))
        cb_srv_drop_stream(s, r, false);
    else
        cb_srv_send_events(s, r, r->dialect->stream_start(r->dst, &h, ev->n_prompt, ev->n_cached));
}

static int32_t token_piece(void *user, int32_t token, char *buf, int32_t cap) {
    return cobatch_token_piece(((srv *)user)->engine, token, buf, cap);
}

/* Keeps n rows of log-probabilities for the choice's answer. Bounded: a choice has a row per prompt
 * and generated token at most. */
bool cb_srv_keep_rows(cb_srv_choice *c, const struct cobatch_logprob *rows, int32_t n) {
    int32_t w = c->r->stride;
    if (!cb_grow((void **)&c->lp, &c->lp_cap, (size_t)c->lp_n + (size_t)n, sizeof(*c->lp) * (size_t)w, 16))
        return false;
    memcpy(c->lp + (size_t)c->lp_n * (size_t)w, rows, sizeof(*rows) * (size_t)n * (size_t)w);
    c->lp_n += n;
    return true;
}

/* The choice's kept rows as the answer's (or a chunk's) log-probabilities; NULL without logprobs. */
static const cb_openai_logprobs *rows_of(srv *s, cb_srv_choice *c, cb_openai_logprobs *lp) {
    if (!c->r->logprobs) return NULL;
    *lp = (cb_openai_logprobs){.rows = c->lp,
                               .n_rows = c->lp_n,
                               .stride = c->r->stride,
                               .top = c->r->top,
                               .text_offset = c->text_offset,
                               .as_ids = c->r->tokens_as_ids,
                               .piece = token_piece,
                               .user = s};
    return lp;
}

/* A stream chunk of the choice with text and the rows kept since the last one (then forgotten). */
void cb_srv_send_chunk(srv *s, cb_srv_choice *c, const char *text, const char *finish) {
    cb_srv_req *r = c->r;
    cb_openai_logprobs lp;
    const cb_openai_logprobs *l = rows_of(s, c, &lp);
    if (l && l->n_rows == 0) l = NULL; /* "logprobs": null in a chunk with no token of its own */
    char *events = r->dialect->stream_text(r->dst, c->index, text, finish, l);
    if (l) c->text_offset = cb_openai_text_end(l);
    c->lp_n = 0;
    cb_srv_send_events(s, r, events);
}

/* An id for a tool call: "call_" and 24 letters and digits. */
static void call_id(char out[32]) {
    static const char abc[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    unsigned char b[24];
    if (getrandom(b, sizeof(b), GRND_NONBLOCK) != (ssize_t)sizeof(b)) { /* no entropy yet: clock and counter */
        static _Atomic uint64_t ctr;                                    /* the loop and the answers worker */
        uint64_t x = (uint64_t)cobatch_time_us() ^ (++ctr * 0x9E3779B97F4A7C15ull);
        for (size_t i = 0; i < sizeof(b); i++, x = x * 6364136223846793005ull + 1442695040888963407ull)
            b[i] = (unsigned char)(x >> 56);
    }
    memcpy(out, "call_", 5);
    for (size_t i = 0; i < sizeof(b); i++)
        out[5 + i] = abc[b[i] % (sizeof(abc) - 1)];
    out[29] = '\0';
}

/* Reads the choice's output so far (partial) or whole into c->out, giving new calls ids. Returns
 * false when out of memory. An output the parser cannot read whole stays text, with no calls. */
bool cb_srv_read_output(cb_srv_choice *c, bool partial) {
    char err[160];
    struct cobatch_chat_output o;
    if (cobatch_chat_parse(c->r->chat, cb_buf_str(&c->text), c->text.len, partial, &o, err, sizeof(err)) != 0) {
        if (strstr(err, "out of memory")) return false;
        if (partial) return true; /* read again with more text */
        memset(&o, 0, sizeof(o));
        if (!(o.content = strndup(cb_buf_str(&c->text), c->text.len))) return false;
    }
    if (o.n_calls > c->n_ids) {
        char(*ids)[32] = realloc(c->ids, sizeof(*ids) * o.n_calls);
        size_t *sent = ids ? realloc(c->sent_args, sizeof(*sent) * o.n_calls) : NULL;
        if (ids) c->ids = ids;
        if (!sent) {
            cobatch_chat_output_clear(&o);
            return false;
        }
        c->sent_args = sent;
        for (; c->n_ids < o.n_calls; c->n_ids++) {
            call_id(c->ids[c->n_ids]);
            c->sent_args[c->n_ids] = SIZE_MAX; /* not announced */
        }
    }
    cobatch_chat_output_clear(&c->out);
    c->out = o;
    return true;
}

/* A stream: a call's arguments grew after the next block or item began (the output was read differently
 * with more text): its block is closed, so the request ends with an error, not a wrong input. */
static void fail_late(srv *s, cb_srv_choice *c) {
    struct cobatch_event ev = {.reason = COBATCH_FINISH_ERROR,
                               .error = "a tool call's arguments changed after its block was closed"};
    cb_srv_fail(s, c->r, c->index, &ev);
}

/* Streams call k's new part: its first chunk (id, name) and the arguments not yet sent. */
static void send_call(srv *s, cb_srv_choice *c, size_t k) {
    cb_srv_req *r = c->r;
    const struct cobatch_tool_call *t = &c->out.calls[k];
    size_t al = strlen(t->arguments), sent = c->sent_args[k];
    if (sent != SIZE_MAX && al <= sent) return;
    bool first = sent == SIZE_MAX;
    const char *id = first ? c->ids[k] : NULL, *name = first ? t->name : NULL,
               *args = t->arguments + (first ? 0 : sent);
    c->sent_args[k] = al;
    bool late = false;
    cb_srv_send_events(s, r, r->dialect->stream_call(r->dst, c->index, (int)k, id, name, args, &late));
    if (late) fail_late(s, c);
}

/* Streams the reasoning read since the last time (held back whole until its block ends with
 * stream_reasoning false: until content or calls follow, or the output ends). */
static void send_reasoning(srv *s, cb_srv_choice *c, bool end) {
    cb_srv_req *r = c->r;
    const char *t = c->out.reasoning ? c->out.reasoning : "";
    size_t n = strlen(t);
    if (r->omit_reasoning || n <= c->sent_reasoning || !r->conn) return;
    if (r->hold_reasoning && !end && !(c->out.content && c->out.content[0]) && !c->out.n_calls) return;
    cb_srv_send_events(s, r, r->dialect->stream_reasoning(r->dst, c->index, t + c->sent_reasoning));
    c->sent_reasoning = n;
}

/* Streams what the choice's output read into since the last time: new reasoning, the new arguments
 * of calls already announced (text read after a call in the same read would otherwise close its
 * block or item before they went out), then new content, then the new calls. end: it is the last
 * read. */
void cb_srv_send_calls(srv *s, cb_srv_choice *c, bool end) {
    cb_srv_req *r = c->r;
    send_reasoning(s, c, end);
    for (size_t k = 0; k < c->out.n_calls && r->conn; k++)
        if (c->sent_args[k] != SIZE_MAX) send_call(s, c, k);
    const char *content = c->out.content ? c->out.content : "";
    size_t cl = strlen(content);
    if (cl > c->sent_content && r->conn) {
        cb_srv_send_chunk(s, c, content + c->sent_content, NULL);
        c->sent_content = cl;
    }
    for (size_t k = 0; k < c->out.n_calls && r->conn; k++)
        if (c->sent_args[k] == SIZE_MAX) send_call(s, c, k);
}

/* The answer could not be kept whole (out of memory): it ends as a failure. */
void cb_srv_lost_output(srv *s, cb_srv_req *r) {
    cb_srv_cancel_all(s, r);
    r->failed = true;
    if (r->stream)
        cb_srv_drop_stream(s, r, false);
    else
        cb_srv_dreply_error(s, r->conn, r->dialect, 500, "server_error", NULL, "out of memory collecting the output");
    r->conn = NULL;
}

/* What an event brings before its own token: with echo, the prompt's text and its rows (the first
 * event of a choice carries them). Returns false when the output was lost. */
bool cb_srv_take_prompt(srv *s, cb_srv_choice *c, const struct cobatch_event *ev) {
    cb_srv_req *r = c->r;
    if (!c->echo_due) return true;
    c->echo_due = false;
    if (ev->prompt_logprobs && r->logprobs) {
        if (!cb_srv_keep_rows(c, ev->prompt_logprobs, ev->n_prompt)) return false;
        c->n_prompt_rows = ev->n_prompt;
    }
    const char *t = r->prompts[c->index / r->per_prompt].text;
    if (!r->stream) return cb_buf_append(&c->text, t, strlen(t));
    if (!r->started) cb_srv_start_stream(s, r, ev);
    if (r->conn) cb_srv_send_chunk(s, c, t, NULL);
    return true;
}

/* A request the server cut short (drain) or the engine failed: why, and the status it answers. */
static int failure(const srv *s, const struct cobatch_event *ev, const char **type, const char **why) {
    if (ev->reason == COBATCH_FINISH_CANCELLED) {
        *type = "service_unavailable";
        *why = ev->timings.t_scheduled_us == 0 ? "the server is shutting down; retry elsewhere"
               : s->cut                        ? "the server shut down before the request finished"
                                               : "the request was cancelled";
        return 503;
    }
    *why = ev->error && *ev->error ? ev->error : "generation failed";
    *type = ev->invalid ? "invalid_request_error" : "server_error";
    return ev->invalid ? 400 : 500;
}

/* Choice i's answer (its text and calls as read), with the request's usage; ids: (n_calls) or NULL;
 * lp: where its log-probabilities are described. */
static cb_dialect_answer answer_of(srv *s, cb_srv_req *r, int i, const char *const *ids, cb_openai_logprobs *lp) {
    cb_srv_choice *c = &r->ch[i];
    return (cb_dialect_answer){.index = i,
                               .lp = rows_of(s, c, lp),
                               .text = r->parses ? (c->out.content ? c->out.content : "") : cb_buf_str(&c->text),
                               .reasoning = r->omit_reasoning ? NULL : c->out.reasoning,
                               .n_reasoning = r->thinks ? r->n_reasoning : -1,
                               .calls = c->out.calls,
                               .n_calls = c->out.n_calls,
                               .call_ids = ids,
                               .finish = c->finish,
                               .stop = c->stop,
                               .stop_sequence = c->stop >= 0 && c->stop < r->n_stops ? r->stops[c->stop] : NULL,
                               .n_prompt = r->n_prompt,
                               .n_cached = r->n_cached,
                               .n_generated = r->n_generated,
                               .n_prediction = r->n_prediction > 0 ? r->n_prediction : -1,
                               .n_pred_accepted = r->n_pred_accepted,
                               .prompt_ms = r->prompt_ms,
                               .predicted_ms = r->predicted_ms};
}

/* echo + logprobs, not streamed: the choices of a prompt after its first answer a copy of the prompt's
 * rows the first computed, before their own. false when out of memory. */
static bool share_prompt_rows(cb_srv_req *r) {
    for (int i = 0; r->share_prompt_rows && i < r->n; i++) {
        cb_srv_choice *c = &r->ch[i], *first = &r->ch[i - i % r->per_prompt];
        if (c == first) continue;
        struct cobatch_logprob *own = c->lp;
        int32_t n_own = c->lp_n;
        c->lp = NULL;
        c->lp_n = c->lp_cap = 0;
        bool ok =
            cb_srv_keep_rows(c, first->lp, first->n_prompt_rows) && (n_own == 0 || cb_srv_keep_rows(c, own, n_own));
        free(own);
        if (!ok) return false;
    }
    return true;
}

/* The whole response of a request whose choices all ended well, not streamed: the final read of
 * tool-calling outputs and the JSON text. NULL when out of memory. On the answers worker (an answer
 * can be tens of megabytes: 8 prompts x n 16 with echo and top-20 logprobs is 72 MB, seconds of
 * work), so it reads only the request, never its connection. */
static char *whole_answer(srv *s, cb_srv_req *r) {
    cb_dialect_head h = head(s, r);
    if (r->kind == CB_OPENAI_EMBEDDINGS)
        return r->dialect->embd_json(&h, r->embd, r->embd_inputs, r->embd_dim, r->n_prompt);
    for (int i = 0; i < r->n && r->parses; i++) { /* the outputs read whole */
        cb_srv_choice *c = &r->ch[i];
        if (!cb_srv_read_output(c, false)) return NULL;
        if (c->out.n_calls && !strcmp(c->finish, "stop")) c->finish = "tool_calls";
    }
    if (!share_prompt_rows(r)) return NULL;
    cb_dialect_answer *as = calloc((size_t)r->n, sizeof(*as));
    cb_openai_logprobs *lps = calloc((size_t)r->n, sizeof(*lps));
    const char ***ids = calloc((size_t)r->n, sizeof(*ids));
    bool ok = as && lps && ids;
    for (int i = 0; ok && i < r->n; i++) { /* each choice's call ids as an array of strings */
        cb_srv_choice *c = &r->ch[i];
        ids[i] = c->n_ids ? malloc(sizeof(char *) * c->n_ids) : NULL;
        for (size_t k = 0; ids[i] && k < c->n_ids; k++)
            ids[i][k] = c->ids[k];
        ok = !c->n_ids || ids[i];
        as[i] = answer_of(s, r, i, ids[i], &lps[i]);
    }
    char *j = ok ? r->dialect->answer_json(&h, as, r->n) : NULL;
    for (int i = 0; ids && i < r->n; i++)
        free(ids[i]);
    free(ids);
    free(as);
    free(lps);
    return j;
}

/* The answers worker's job: the whole answer, or nothing when its client has left. */
static void build_answer(cb_intake_job *jb) {
    cb_srv_req *r = jb->owner;
    if (jb->cancelled) {
        jb->status = 499;
        jb->json = strdup("");
        return;
    }
    jb->json = whole_answer(r->s, r);
    jb->status = jb->json ? 200 : 500;
    if (jb->json && strlen(jb->json) > CB_SRV_TRIM_BYTES)
        malloc_trim(0); /* the big answer's tree went back to this thread's arena: to the system */
}

/* The answer once every choice ended well: the last chunks, or the whole response. Returns true
 * when the request went to the answers worker (it is freed when it comes back). */
bool cb_srv_answer(srv *s, cb_srv_req *r) {
    if (r->stream) { /* the calls went out as they were read; their ids are not needed again */
        cb_openai_logprobs lp;
        cb_dialect_answer a = answer_of(s, r, 0, NULL, &lp);
        if (cb_srv_send_events(s, r, r->dialect->stream_end(r->dst, &a))) cb_conn_stream_end(r->conn);
        return false;
    }
    cb_intake_job *jb = calloc(1, sizeof(*jb));
    if (jb) {
        *jb = (cb_intake_job){.kind = INTAKE_CALL, .owner = r, .call = build_answer};
        if (cb_intake_submit(s->answers, jb)) {
            r->at_intake = true;
            r->jb = jb;
            return true;
        }
        free(jb);
    }
    char *j = whole_answer(s, r); /* the worker has its fill: here, then */
    cb_srv_reply_json(s, r->conn, 200, j, NULL);
    free(j);
    return false;
}

/* A choice failed (drain, a failed decode): the whole request answers the error, the other choices
 * are cancelled. */
void cb_srv_fail(srv *s, cb_srv_req *r, int index, const struct cobatch_event *ev) {
    r->failed = true;
    cb_srv_cancel_all(s, r);
    if (!r->conn) return;
    const char *type, *why;
    int status = failure(s, ev, &type, &why);
    if (r->stream && r->started) { /* an error event ends it */
        if (cb_srv_send_events(s, r, r->dialect->stream_error(r->dst, index, status, type, why)))
            cb_conn_stream_end(r->conn);
    } else {
        cb_srv_dreply_error(s, r->conn, r->dialect, status, type, NULL, "%s", why);
    }
    r->conn = NULL;
}
