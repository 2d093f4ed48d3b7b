/* intake.h — the server's worker thread for what must not run on the event loop: parsing request
 * bodies, rendering chat templates, tokenizing prompts (a 1 MB prompt takes a fraction of a second,
 * during which the loop would deliver no token to anyone). The loop hands jobs over and gets them
 * back, done, through a queue whose eventfd wakes it. Bounded: at most max_jobs are out at once.
 * The worker runs at a lower scheduling priority than the engine's threads. */
#ifndef CB_INTAKE_H
#define CB_INTAKE_H

#include "../openai/embeddings.h"
#include "../openai/openai.h"

#include <cobatch.h>
#include <stdbool.h>
#include <stddef.h>

/* INTAKE_CALL: the job's call runs on the worker (the server builds big answers so, off the loop). */
/* INTAKE_COUNT: the prompt tokens a chat request would take (Anthropic's count_tokens). */
/* INTAKE_EMBEDDINGS: an embeddings body parsed (embd) and its inputs tokenized (prompts). */
typedef enum {
    INTAKE_COMPLETION,
    INTAKE_TOKENIZE,
    INTAKE_DETOKENIZE,
    INTAKE_CALL,
    INTAKE_COUNT,
    INTAKE_EMBEDDINGS,
    INTAKE_TEMPLATE, /* a chat's prompt as its template renders it (llama-server's /apply-template) */
    INTAKE_INFILL    /* llama-server's /infill: a completion whose prompt the model's FIM tokens assemble */
} cb_intake_kind;

/* One prompt of a completion request, as the engine will queue it. */
typedef struct {
    int32_t *tokens;
    int32_t n_tokens;
    char *text; /* with echo: the prompt's text (a token prompt's detokenized), else NULL */
} cb_intake_prompt;

struct cb_dialect;

typedef struct cb_intake_job {
    cb_intake_kind kind;
    cb_openai_kind api;               /* INTAKE_COMPLETION: which API the body is for */
    const struct cb_dialect *dialect; /* the API it speaks: a body not OpenAI's is translated to a chat one first */
    struct cJSON *echo; /* Responses: the request's fields each response object repeats (taken by the server) */
    char *body;         /* the request body (NUL-terminated), owned by the job */
    size_t len;
    void *owner;                           /* the loop's object for this job; not touched by the worker (but by call) */
    void (*call)(struct cb_intake_job *j); /* INTAKE_CALL: sets status and json */
    _Atomic bool cancelled;                /* its client left: the worker stops at its next step */
    /* results, set by the worker */
    int status;                /* 200, or the HTTP status of an error */
    char *json;                /* an error body, or the answer of a tokenizer endpoint (malloc'd) */
    cb_openai_request req;     /* INTAKE_COMPLETION with status 200: the parsed request */
    cb_intake_prompt *prompts; /* (n_prompts) INTAKE_COMPLETION with status 200: its prompts (chat: one, with no
                                  tokens: they are the chat's); INTAKE_EMBEDDINGS: its inputs' tokens */
    cobatch_chat *chat;        /* chat with status 200: the messages rendered, with the tools' grammar and parser */
    cobatch_grammar *grammar;  /* INTAKE_COMPLETION with status 200 and a grammar: parsed here, off the loop */
    int n_prompts;
    struct cb_intake_job *next;

    cb_openai_embd_request embd; /* INTAKE_EMBEDDINGS with status 200: the parsed request (its inputs taken) */
} cb_intake_job;

typedef struct intake intake;

/* Starts the worker. Returns NULL on failure. */
intake *cb_intake_new(cobatch_engine *engine, const cb_openai_defaults *defaults, int max_jobs);
/* Stops the worker and frees every job it still holds (done or not). */
void cb_intake_free(intake *q);
/* Readable when done jobs wait (read 8 bytes to reset it). */
int cb_intake_fd(const intake *q);
/* Hands a job over (the queue owns it until intake_take gives it back). Returns false, keeping
 * nothing, when max_jobs are out. */
bool cb_intake_submit(intake *q, cb_intake_job *j);
/* Its client has left: a completion job stops between its steps (parse, schema, each prompt's
 * tokens, the grammar) and comes back as a 499 with no body to send. Any thread. */
void cb_intake_cancel(cb_intake_job *j);
/* A done job, or NULL. The caller owns it: intake_job_free. */
cb_intake_job *cb_intake_take(intake *q);
/* Jobs handed over and not yet taken back. */
int cb_intake_pending(const intake *q);
void cb_intake_job_free(cb_intake_job *j);

#endif
