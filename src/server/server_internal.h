/* server_internal.h — what the server's files share: the server's state (struct srv, the event loop's
 * alone), a request and its choices, its answers (reply.c), a request's output as its dialect shapes it
 * (output.c), the checks on a request's head (admit.c) and the endpoints that only read the engine
 * (endpoints.c). server.c has the completion requests' lifecycle, the routing and the drain. Files
 * call down this list, never up: server.c, then admit.c and output.c, then reply.c. */
#ifndef CB_SERVER_INTERNAL_H
#define CB_SERVER_INTERNAL_H

#include "server.h"
#include "guard.h"
#include "httpd.h"
#include "intake.h"
#include "metrics.h"
#include "routes.h"
#include "../openai/dialect.h"
#include "../util/buf.h"

#include <cjson/cJSON.h>
#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>

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

struct cb_srv_req;

/* One choice of a completion request (a prompt of its list, one of its n samples): an engine
 * request of its own. */
typedef struct {
    struct cb_srv_req *r;
    int index;          /* prompt x n + sample */
    cobatch_req_id id;  /* > 0 while the engine has it */
    cb_buf text;        /* the whole output, for non-streaming answers and tool calls */
    const char *finish; /* once it ended well: "stop" or "length" */
    int64_t t_last_token_us;
    bool echo_due;              /* echo: the prompt's text (and log-probabilities) go out before the output */
    struct cobatch_logprob *lp; /* (lp_cap rows of the request's stride) log-probabilities not yet answered */
    int32_t lp_n;
    size_t lp_cap;
    int32_t text_offset;   /* streamed completions: characters of the choice's text already sent */
    int32_t n_prompt_rows; /* echo: rows of lp that are the prompt's */
    /* a chat whose output is read (tool calls, reasoning): what it was read into so far, and of that
       what went out */
    struct cobatch_chat_output out;
    size_t sent_reasoning; /* streamed: bytes of out.reasoning sent */
    size_t sent_content;   /* streamed: bytes of out.content sent */
    size_t *sent_args;     /* (n_ids) streamed: bytes of each call's arguments sent */
    char (*ids)[32];       /* (n_ids) the calls' ids, made as they appear */
    size_t n_ids;
    size_t read_len; /* streamed: bytes of text the last partial read saw */
    int depth;       /* brackets the output has opened and not closed (its strings' too) */
    bool too_deep;   /* it once nested past --limit json-depth: its calls are never read */
    int stop;        /* once it ended well: the index of the request's stop string that ended it, or -1 */
} cb_srv_choice;

/* One completion request, from its HTTP request to its end. */
typedef struct cb_srv_req {
    srv *s;
    cb_conn *conn;            /* NULL once the client has gone (httpd's on_gone) or the answer is out */
    bool at_intake;           /* on a worker (the intake's, or the answers'): freed when the job comes back */
    struct cb_intake_job *jb; /* that job, while at_intake */
    cb_intake_kind job;       /* what the worker does with its body */
    cb_openai_kind kind;
    const cb_dialect *dialect; /* the API it speaks: its answer, events and errors are in that API's shapes */
    void *dst;                 /* its stream's state (the blocks or items so far) */
    struct cJSON *echo;        /* Responses: the request's fields each response object repeats */
    char **stops;              /* (n_stops) the stop strings, to name the one that ended the output */
    int n_stops;
    bool stream, include_usage, started; /* started: the stream's head and first chunk are out */
    int64_t quiet_since_us;              /* streamed and submitted: when its last bytes went (or its submit) */
    int n_prompt_hint;                   /* its prompt's tokens, for a stream started before any output */
    double prompt_ms, predicted_ms;      /* its first choice's: first step to first token, and on to its end */
    char cid[48];                        /* "cmpl-..." / "chatcmpl-..." */
    long created;
    cb_srv_choice *ch;         /* (n) */
    int n, live;               /* choices; those the engine still has (the request is freed at 0) */
    int per_prompt;            /* choices of each prompt (OpenAI's n) */
    bool logprobs;             /* choices answer their tokens' log-probabilities */
    int top, stride;           /* alternatives per token; entries per row (1 + top) */
    bool tokens_as_ids;        /* tokens named "token_id:N" */
    bool share_prompt_rows;    /* echo + logprobs, not streamed: the first choice of a prompt computes its rows, the
                                  others answer a copy (each would compute them whole, without the cache) */
    cobatch_chat *chat;        /* chat: taken from the intake job (its output parser) */
    bool calls_tools;          /* the chat's outputs are read for tool calls */
    bool parses;               /* they are read (for tool calls or reasoning), not passed on as text */
    bool reads_json;           /* what is read holds JSON (calls, a schema's answer): its nesting is bounded */
    bool thinks;               /* they are read for reasoning */
    bool omit_reasoning;       /* the answer leaves the reasoning out (include_reasoning false) */
    bool hold_reasoning;       /* a stream sends it whole once its block ends (stream_reasoning false) */
    cb_intake_prompt *prompts; /* (n_prompts) taken from the intake job: echo texts */
    int n_prompts;
    bool failed;                         /* a choice failed: the answer was an error, the rest are cancelled */
    int n_prompt, n_cached, n_generated; /* usage: the prompt once, the outputs summed */
    int n_reasoning;                     /* of the outputs' tokens, those of reasoning */
    int n_prediction, n_pred_accepted;   /* a prediction's tokens over the choices, and those that held as drafts */
    struct cb_srv_req *prev, *next;      /* the server's list of requests */

    /* embeddings (kind CB_OPENAI_EMBEDDINGS: one engine request, ch[0]): its vectors once it ended well */
    float *embd; /* (embd_inputs x embd_dim) taken from the FINISHED event */
    int embd_inputs, embd_dim;
    bool embd_base64;
} cb_srv_req;

/* output.c: a request's output, read and sent in its dialect's shapes. */
/* Every choice the engine still has is cancelled. */
void cb_srv_cancel_all(srv *s, cb_srv_req *r);
/* A stream that cannot go on (slow: the client reads too slowly; else memory ran out): cancelled and
 * its connection reset, so the client sees a failure, not a short answer. */
void cb_srv_drop_stream(srv *s, cb_srv_req *r, bool slow);
/* Sends text (taken: the dialect's framed events; NULL: out of memory, the stream is dropped). */
bool cb_srv_send_events(srv *s, cb_srv_req *r, char *text);
/* The stream's head, its dialect's state and first events (ev: the prompt's tokens so far). */
void cb_srv_start_stream(srv *s, cb_srv_req *r, const struct cobatch_event *ev);
/* Keeps n rows of log-probabilities for the choice's answer; false when out of memory. */
bool cb_srv_keep_rows(cb_srv_choice *c, const struct cobatch_logprob *rows, int32_t n);
/* Streams the choice's text (finish: its end, else NULL) with the rows kept since the last time. */
void cb_srv_send_chunk(srv *s, cb_srv_choice *c, const char *text, const char *finish);
/* Reads the choice's output so far (partial) or whole; false when out of memory. */
bool cb_srv_read_output(cb_srv_choice *c, bool partial);
/* Streams what the last read found that has not gone out (end: it was the last read). */
void cb_srv_send_calls(srv *s, cb_srv_choice *c, bool end);
/* The output could not be kept (out of memory): the request ends as a failure. */
void cb_srv_lost_output(srv *s, cb_srv_req *r);
/* An event's echo of the prompt before its own token; false when the output was lost. */
bool cb_srv_take_prompt(srv *s, cb_srv_choice *c, const struct cobatch_event *ev);
/* The answer once every choice ended well; true when it went to the answers worker. */
bool cb_srv_answer(srv *s, cb_srv_req *r);
/* Choice index failed (ev): the request answers the error, its other choices are cancelled. */
void cb_srv_fail(srv *s, cb_srv_req *r, int index, const struct cobatch_event *ev);

/* admit.c: a request's head checked, in the shape its path's API speaks. */
/* The dialect a route speaks. */
const cb_dialect *cb_srv_dialect_of(cb_srv_route_id id);
/* The request's route, or NULL once it has been answered (403, 404, 405, 415, 401). */
const cb_srv_route *cb_srv_admit(srv *s, cb_conn *c, cb_http_req *hr);
/* httpd's callbacks: a request it refused; a head whose client waits for 100 Continue. */
void cb_srv_on_http_error(cb_conn *c, cb_http_req *hr, int status, const char *reason, void *user);
bool cb_srv_on_head(cb_conn *c, cb_http_req *hr, void *user);

/* reply.c: an answer of JSON (NULL: out of memory, a 500), counted by its status; a 429 or 503 says
 * Retry-After. */
void cb_srv_reply_json(srv *s, cb_conn *c, int status, const char *json, const char *extra);
/* An error in OpenAI's shape (cb_srv_reply_error), or in dialect d's. */
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
