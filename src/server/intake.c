/* intake.c — the worker thread (see intake.h). */
#include "intake.h"
#include "../native/native.h"
#include "../openai/dialect.h"
#include "../util/utf8.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The longest shutdown waits for the job the intake worker has in hand. */
#define CB_INTAKE_JOIN_S 30

struct intake {
    cobatch_engine *engine;
    cb_openai_defaults defaults; /* for the fields a request leaves out */
    int max_jobs, out;           /* out: handed over, not yet taken back */
    pthread_t thread;
    bool started, stop;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    cb_intake_job *todo, *todo_tail, *done, *done_tail;
    int fd;
};

/* ---------------------------------------------------------------- jobs ---------------------- */

static char *error_json(const cb_intake_job *j, const cb_openai_error *e) {
    return cb_dialect_error_json(j->dialect, e);
}

static void set_error(cb_intake_job *j, int status, const char *param, const char *msg) {
    cb_openai_error e = {.status = status, .type = status >= 500 ? "server_error" : "invalid_request_error"};
    snprintf(e.param, sizeof(e.param), "%s", param ? param : "");
    size_t n = strlen(msg); /* cut to fit, as snprintf would */
    if (n >= sizeof(e.message)) n = sizeof(e.message) - 1;
    memcpy(e.message, msg, n);
    e.message[n] = 0;
    j->status = status;
    j->json = error_json(j, &e);
}

/* An engine error as the job's answer: 503 out of memory, else a 400 naming the request's field. */
static void engine_error(cb_intake_job *j, const struct cobatch_error *err) {
    bool oom = err->code == COBATCH_ERR_NOMEM;
    set_error(j, oom ? 503 : 400, oom ? NULL : cb_openai_param(&j->req, err->param),
              oom ? "out of memory" : err->message);
}

/* The text an echo gives back for prompt q: the request's, or its token ids detokenized. */
static char *echo_text(intake *q, const cb_openai_prompt *p) {
    if (p->text) return strdup(p->text);
    int32_t n = cobatch_detokenize(q->engine, p->tokens, p->n_tokens, NULL, 0);
    char *t = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!t) return NULL;
    cobatch_detokenize(q->engine, p->tokens, p->n_tokens, t, n);
    t[n] = '\0';
    return t;
}

void cb_intake_cancel(cb_intake_job *j) { j->cancelled = true; }

/* Whether the job's client has left: it ends as a 499 (nobody reads it). */
static bool left(cb_intake_job *j) {
    if (!j->cancelled) return false;
    set_error(j, 499, NULL, "the client left");
    return true;
}

static cJSON *parse_body(cb_intake_job *j);

/* The request a dialect's translation (chat, the OpenAI request it makes) asks for: parsed into
 * j->req, with what the OpenAI request cannot say set from the translation's echo. 0, or -1 with the
 * job's error set. Takes chat. */
static int parse_translated(intake *q, cb_intake_job *j, int rc, cJSON *chat, cb_openai_error *e) {
    if (rc == 0)
        rc = cb_openai_parse_json(j->dialect->completion ? CB_OPENAI_COMPLETION : CB_OPENAI_CHAT, &q->defaults, chat,
                                  &j->req, e);
    cJSON_Delete(chat);
    if (rc == 0 && j->dialect->adjust) j->dialect->adjust(j->echo, &j->req.params);
    if (rc != 0) {
        j->status = e->status;
        j->json = error_json(j, e);
    }
    return rc;
}

/* A Messages, Responses or llama-server body as the request it asks for (0), or the job's error set
 * (-1). */
static int parse_dialect(intake *q, cb_intake_job *j, bool count_only, cb_openai_error *e) {
    cJSON *root = parse_body(j), *chat = NULL;
    if (!root) return -1;
    int rc = j->dialect->to_chat(root, count_only, &chat, &j->echo, e);
    cJSON_Delete(root);
    return parse_translated(q, j, rc, chat, e);
}

/* llama-server's /infill: its parts assembled with the model's FIM tokens into the prompt of a
 * completions request. */
static int parse_infill(intake *q, cb_intake_job *j, cb_openai_error *e) {
    cJSON *root = parse_body(j), *body = NULL;
    if (!root) return -1;
    struct cobatch_infill parts;
    int32_t n = 0, *toks = NULL;
    int rc = cb_native_infill_parts(root, &parts, e);
    if (rc == 0) {
        struct cobatch_error err = {0};
        toks = cobatch_infill_tokens(q->engine, &parts, &n, &err);
        cb_native_infill_free(&parts);
        if (!toks) {
            bool oom = err.code == COBATCH_ERR_NOMEM;
            rc = cb_openai_bad(e, oom ? NULL : err.param, "%s", oom ? "out of memory" : err.message);
            if (oom) e->status = 503;
        }
    }
    if (rc == 0) rc = cb_native_to_completion(root, toks, n, &body, &j->echo, e);
    free(toks);
    cJSON_Delete(root);
    return parse_translated(q, j, rc, body, e);
}

static void do_completion(intake *q, cb_intake_job *j) {
    cb_openai_error e;
    int rc;
    if (j->kind == INTAKE_INFILL) {
        if (parse_infill(q, j, &e) != 0) return;
        rc = 0;
    } else if (j->dialect->to_chat) { /* another API's shape */
        if (parse_dialect(q, j, false, &e) != 0) return;
        rc = 0;
    } else {
        rc = cb_openai_parse(j->api, &q->defaults, j->body, j->len, &j->req, &e);
    }
    if (rc == 0 && left(j)) return;
    /* a chat's schema goes to the engine with its messages (a template that thinks writes its reasoning
       before the schema holds); a completion's becomes its grammar here */
    if (rc == 0 && j->req.kind == CB_OPENAI_CHAT)
        j->req.params.json_schema = j->req.json_schema;
    else if (rc == 0)
        rc = cb_openai_resolve_schema(&j->req, cobatch_json_schema_grammar, &e);
    if (rc != 0) {
        j->status = e.status;
        j->json = error_json(j, &e);
        return;
    }
    char err2[256] = "";
    int n = j->req.kind == CB_OPENAI_CHAT ? 1 : j->req.n_prompts;
    j->prompts = calloc((size_t)n, sizeof(*j->prompts));
    if (!j->prompts) {
        set_error(j, 503, NULL, "out of memory");
        return;
    }
    j->n_prompts = n;
    for (int i = 0; i < n; i++) {
        if (left(j)) return;
        struct cobatch_request_params p = j->req.params;
        if (j->req.kind == CB_OPENAI_COMPLETION) {
            p.prompt = j->req.prompts[i].text;
            p.prompt_tokens = j->req.prompts[i].tokens;
            p.n_prompt_tokens = j->req.prompts[i].n_tokens;
        }
        struct cobatch_error err = {0};
        char msg[300];
        cb_intake_prompt *out = &j->prompts[i];
        if (j->req.kind == CB_OPENAI_CHAT) { /* rendered once, with its tools' grammar and parser */
            j->chat = cobatch_chat_new(q->engine, &p, &err);
            if (j->chat) continue;
            engine_error(j, &err);
            return;
        }
        if (j->req.suffix) { /* the model's fill-in-the-middle prompt, as /infill builds it */
            struct cobatch_infill parts = {.prefix = p.prompt, .suffix = j->req.suffix, .max_tokens = p.max_tokens};
            out->tokens = cobatch_infill_tokens(q->engine, &parts, &out->n_tokens, &err);
            if (!out->tokens && err.param && !strcmp(err.param, "model")) err.param = "suffix";
        } else {
            out->tokens = cobatch_prompt_tokens(q->engine, &p, &out->n_tokens, &err);
        }
        if (out->tokens && j->req.echo && !(out->text = echo_text(q, &j->req.prompts[i]))) err.code = COBATCH_ERR_NOMEM;
        bool oom = err.code == COBATCH_ERR_NOMEM;
        if (out->tokens && !oom) continue;
        const char *why = oom ? "out of memory" : err.message;
        if (n > 1)
            snprintf(msg, sizeof(msg), "prompt %d: %s", i, why);
        else
            snprintf(msg, sizeof(msg), "%s", why);
        set_error(j, oom ? 503 : 400, oom ? NULL : cb_openai_param(&j->req, err.param), msg);
        return;
    }
    if (left(j)) return;
    if (j->req.params.grammar &&
        !(j->grammar = cobatch_grammar_new(q->engine, j->req.params.grammar, err2, sizeof(err2)))) {
        set_error(j, 400, j->req.json_schema ? "response_format" : "grammar", err2);
        return;
    }
    j->status = 200;
}

/* {"content" | "prompt": text, "add_special" | "add_special_tokens": bool, "parse_special": bool}
 *   -> {"tokens", "count", "max_model_len"} */
/* The body as JSON, or NULL with the job's error set (400 not JSON or a NUL in a string; 503 out
 * of memory). */
static cJSON *parse_body(cb_intake_job *j) {
    cb_openai_error e = {0};
    cJSON *root = cb_openai_body_parse(j->body, j->len, &e);
    if (!root) {
        j->status = e.status;
        j->json = error_json(j, &e);
    }
    return root;
}

/* Messages count_tokens: the chat rendered as it would be run -> {"input_tokens"}. */
static void do_count(intake *q, cb_intake_job *j) {
    cb_openai_error e;
    if (parse_dialect(q, j, true, &e) != 0 || left(j)) return;
    struct cobatch_error err = {0};
    cobatch_chat *chat = cobatch_chat_new(q->engine, &j->req.params, &err);
    if (!chat) {
        engine_error(j, &err);
        return;
    }
    int32_t n = 0;
    cobatch_chat_tokens(chat, &n);
    cobatch_chat_free(chat);
    j->json = j->dialect->count_json((int)n);
    j->status = j->json ? 200 : 500;
}

/* POST /v1/embeddings: the body parsed, each text input tokenized as the engine would (token ids are
 * checked at submit); an input the engine refuses is a 400 naming `input` (and which one). */
static void do_embeddings(intake *q, cb_intake_job *j) {
    struct cobatch_embd_info info;
    cobatch_embd_info(q->engine, &info);
    cJSON *root = parse_body(j), *body = NULL;
    if (!root) return;
    cb_openai_error e;
    int rc = j->dialect->to_chat ? j->dialect->to_chat(root, false, &body, &j->echo, &e) : 0; /* another API's shape */
    if (rc == 0) rc = cb_openai_embd_parse_json(body ? body : root, info.n_embd, &j->embd, &e);
    cJSON_Delete(body);
    cJSON_Delete(root);
    if (rc != 0) {
        j->status = e.status;
        j->json = error_json(j, &e);
        return;
    }
    int n = j->embd.n_inputs;
    if (!(j->prompts = calloc((size_t)n, sizeof(*j->prompts)))) {
        set_error(j, 503, NULL, "out of memory");
        return;
    }
    j->n_prompts = n;
    for (int i = 0; i < n; i++) {
        if (left(j)) return;
        cb_openai_prompt *in = &j->embd.inputs[i];
        cb_intake_prompt *out = &j->prompts[i];
        if (!in->text) { /* token ids: taken over as they are */
            out->tokens = in->tokens;
            out->n_tokens = in->n_tokens;
            in->tokens = NULL;
            continue;
        }
        struct cobatch_error err = {0};
        if ((out->tokens = cobatch_embd_tokens(q->engine, in->text, &out->n_tokens, &err))) continue;
        bool oom = err.code == COBATCH_ERR_NOMEM;
        char msg[300];
        const char *why = oom ? "out of memory" : err.message;
        if (n > 1)
            snprintf(msg, sizeof(msg), "input %d: %s", i, why);
        else
            snprintf(msg, sizeof(msg), "%s", why);
        set_error(j, oom ? 503 : 400, oom ? NULL : "input", msg);
        return;
    }
    j->status = 200;
}

/* The longest text /tokenize takes: bounded as prompts are (the tokenizer is quadratic in
 * special-token texts, and the worker is one), at least four 1024-token windows' worth for clients
 * that tokenize a document to cut it in windows. */
static size_t tokenize_bytes(const cobatch_engine *e) {
    size_t one = cobatch_max_prompt_bytes(e), per_token = one / (size_t)cobatch_n_ctx_seq(e);
    return one > 4096 * per_token ? one : 4096 * per_token;
}

static void do_tokenize(intake *q, cb_intake_job *j) {
    cJSON *root = parse_body(j);
    if (!root) return;
    cJSON *c = root ? cJSON_GetObjectItemCaseSensitive(root, "content") : NULL;
    if (!c && root) c = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    cJSON *add = root ? cJSON_GetObjectItemCaseSensitive(root, "add_special_tokens") : NULL;
    if (!add && root) add = cJSON_GetObjectItemCaseSensitive(root, "add_special");
    cJSON *pieces = root ? cJSON_GetObjectItemCaseSensitive(root, "with_pieces") : NULL;
    cJSON *special = root ? cJSON_GetObjectItemCaseSensitive(root, "parse_special") : NULL;
    if (!cJSON_IsObject(root)) {
        set_error(j, 400, NULL, "the body is not a JSON object");
    } else if (!cJSON_IsString(c)) {
        set_error(j, 400, "content", "give the text as a string in 'content'");
    } else if (add && !cJSON_IsBool(add)) {
        set_error(j, 400, "add_special_tokens", "'add_special_tokens' must be a boolean");
    } else if (special && !cJSON_IsBool(special)) {
        set_error(j, 400, "parse_special", "'parse_special' must be a boolean");
    } else if (pieces && !cJSON_IsFalse(pieces) && !cJSON_IsNull(pieces)) {
        set_error(j, 400, "with_pieces", "'with_pieces' is not supported");
    } else if (strlen(c->valuestring) > tokenize_bytes(q->engine)) {
        char msg[160];
        snprintf(msg, sizeof(msg), "the text is longer than %zu bytes; tokenize it in parts",
                 tokenize_bytes(q->engine));
        set_error(j, 400, "content", msg);
    } else {
        size_t len = strlen(c->valuestring);
        int32_t cap = len < (size_t)INT32_MAX / 2 ? (int32_t)len + 16 : -1;
        int32_t *toks = cap > 0 ? malloc(sizeof(int32_t) * (size_t)cap) : NULL;
        int32_t n = toks ? cobatch_tokenize_ext(q->engine, c->valuestring, !add || cJSON_IsTrue(add),
                                                !special || cJSON_IsTrue(special), toks, cap)
                         : -1;
        cJSON *out = n >= 0 && n <= cap ? cJSON_CreateObject() : NULL;
        cJSON *arr = out ? cJSON_AddArrayToObject(out, "tokens") : NULL;
        for (int32_t i = 0; arr && i < n; i++)
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(toks[i]));
        if (out) {
            cJSON_AddNumberToObject(out, "count", n);
            cJSON_AddNumberToObject(out, "max_model_len", cobatch_n_ctx_seq(q->engine));
            j->json = cJSON_PrintUnformatted(out);
        }
        cJSON_Delete(out);
        free(toks);
        if (j->json)
            j->status = 200;
        else
            set_error(j, 500, NULL, "cannot tokenize (out of memory)");
    }
    cJSON_Delete(root);
}

/* The text of tokens (special tokens as their text), malloc'd and valid UTF-8, or NULL (out of
 * memory, or ids outside the vocabulary: *bad). */
static char *text_of(intake *q, const int32_t *toks, int32_t n, bool *bad) {
    int32_t need = cobatch_detokenize(q->engine, toks, n, NULL, 0);
    *bad = need < 0;
    char *text = need >= 0 ? malloc((size_t)need + 1) : NULL;
    int32_t k = text ? cobatch_detokenize(q->engine, toks, n, text, need + 1) : -1;
    char *clean = k >= 0 ? malloc((size_t)k * 3 + 1) : NULL; /* a token's part of a character: U+FFFD */
    if (clean) cb_utf8_sanitize(text, (size_t)k, clean);
    free(text);
    return clean;
}

/* llama-server's /apply-template: a chat request (its messages, tools, template variables) ->
 * {"prompt"}: the text of the tokens it would run (its template's rendering, its marks and specials
 * as they read). */
static void do_template(intake *q, cb_intake_job *j) {
    cb_openai_error e;
    if (cb_openai_parse(CB_OPENAI_CHAT, &q->defaults, j->body, j->len, &j->req, &e) != 0) {
        j->status = e.status;
        j->json = error_json(j, &e);
        return;
    }
    struct cobatch_error err = {0};
    cobatch_chat *chat = cobatch_chat_new(q->engine, &j->req.params, &err);
    if (!chat) {
        engine_error(j, &err);
        return;
    }
    int32_t n = 0;
    const int32_t *toks = cobatch_chat_tokens(chat, &n);
    bool bad = false;
    char *prompt = text_of(q, toks, n, &bad);
    cobatch_chat_free(chat);
    cJSON *out = prompt ? cJSON_CreateObject() : NULL;
    if (out && cJSON_AddStringToObject(out, "prompt", prompt)) j->json = cJSON_PrintUnformatted(out);
    cJSON_Delete(out);
    free(prompt);
    if (j->json)
        j->status = 200;
    else
        set_error(j, 503, NULL, "out of memory");
}

/* {"tokens": [ids]} -> {"content", "prompt"}; every id an integer of the vocabulary. */
static void do_detokenize(intake *q, cb_intake_job *j) {
    cJSON *root = parse_body(j);
    if (!root) return;
    cJSON *t = root ? cJSON_GetObjectItemCaseSensitive(root, "tokens") : NULL;
    int n = cJSON_IsArray(t) ? cJSON_GetArraySize(t) : -1;
    int32_t *toks = n >= 0 ? malloc(sizeof(int32_t) * (size_t)(n + 1)) : NULL;
    bool ok = toks != NULL;
    int i = 0;
    cJSON *x;
    if (ok) {
        cJSON_ArrayForEach(x, t) { /* linear: cJSON_GetArrayItem(t, i) in a loop would be quadratic */
            if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble != floor(x->valuedouble) ||
                x->valuedouble < 0 || x->valuedouble > INT32_MAX) {
                ok = false;
                break;
            }
            toks[i++] = (int32_t)x->valuedouble;
        }
    }
    cJSON_Delete(root);
    bool bad = !ok;
    char *clean = ok ? text_of(q, toks, n, &bad) : NULL;
    free(toks);
    if (bad) {
        set_error(j, 400, "tokens", "give 'tokens' as an array of token ids of the model's vocabulary");
    } else if (!clean) {
        set_error(j, 500, NULL, "cannot detokenize (out of memory)");
    } else {
        cJSON *out = cJSON_CreateObject();
        cJSON_AddStringToObject(out, "content", clean);
        cJSON_AddStringToObject(out, "prompt", clean);
        free(clean);
        j->json = cJSON_PrintUnformatted(out);
        cJSON_Delete(out);
        if (j->json)
            j->status = 200;
        else
            set_error(j, 500, NULL, "out of memory");
    }
}

void cb_intake_job_free(cb_intake_job *j) {
    if (!j) return;
    free(j->body);
    free(j->json);
    for (int i = 0; i < j->n_prompts; i++) {
        free(j->prompts[i].tokens);
        free(j->prompts[i].text);
    }
    free(j->prompts);
    cobatch_grammar_free(j->grammar);
    cobatch_chat_free(j->chat);
    cJSON_Delete(j->echo);
    cb_openai_request_free(&j->req);
    cb_openai_embd_request_free(&j->embd);
    free(j);
}

/* ---------------------------------------------------------------- the thread ---------------- */

static void *worker(void *arg) {
    intake *q = arg;
    /* below the engine's threads: on a machine with few cores a big prompt's tokenizing must not
     * take the cores the running streams' steps need (best effort: nice of this thread only) */
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->stop && !q->todo)
            pthread_cond_wait(&q->cond, &q->mu);
        if (q->stop) break;
        cb_intake_job *j = q->todo;
        q->todo = j->next;
        if (!q->todo) q->todo_tail = NULL;
        pthread_mutex_unlock(&q->mu);
        j->next = NULL;
        if (j->kind == INTAKE_CALL)
            j->call(j);
        else if (j->kind == INTAKE_COMPLETION || j->kind == INTAKE_INFILL)
            do_completion(q, j);
        else if (j->kind == INTAKE_TOKENIZE)
            do_tokenize(q, j);
        else if (j->kind == INTAKE_COUNT)
            do_count(q, j);
        else if (j->kind == INTAKE_EMBEDDINGS)
            do_embeddings(q, j);
        else if (j->kind == INTAKE_TEMPLATE)
            do_template(q, j);
        else
            do_detokenize(q, j);
        if (j->status != 200 && !j->json) j->status = 500; /* the error body could not be made: a bare 500 */
        pthread_mutex_lock(&q->mu);
        if (q->done_tail)
            q->done_tail->next = j;
        else
            q->done = j;
        q->done_tail = j;
        uint64_t one = 1;
        ssize_t w = write(q->fd, &one, sizeof(one));
        (void)w;
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

intake *cb_intake_new(cobatch_engine *engine, const cb_openai_defaults *defaults, int max_jobs) {
    intake *q = calloc(1, sizeof(*q));
    if (!q) return NULL;
    q->engine = engine;
    q->defaults = defaults ? *defaults : cb_openai_default_defaults();
    q->max_jobs = max_jobs > 0 ? max_jobs : 64;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cond, NULL);
    q->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (q->fd < 0 || pthread_create(&q->thread, NULL, worker, q) != 0) {
        cb_intake_free(q);
        return NULL;
    }
    q->started = true;
    return q;
}

void cb_intake_free(intake *q) {
    if (!q) return;
    if (q->started) {
        pthread_mutex_lock(&q->mu);
        q->stop = true;
        pthread_cond_signal(&q->cond);
        pthread_mutex_unlock(&q->mu);
        /* the job in hand ends first (its work is bounded: grammars, templates, tokens); should one
         * still run past the bound, the process ends without it rather than wait forever (a signal
         * could not stop a join) or free what it reads */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += CB_INTAKE_JOIN_S;
        if (pthread_timedjoin_np(q->thread, NULL, &until) != 0) {
            fprintf(stderr, "cobatch: the intake worker is still busy after %d s at shutdown; exiting without it\n",
                    CB_INTAKE_JOIN_S);
            _exit(1);
        }
    }
    for (cb_intake_job *j = q->todo, *n; j; j = n) {
        n = j->next;
        cb_intake_job_free(j);
    }
    for (cb_intake_job *j = q->done, *n; j; j = n) {
        n = j->next;
        cb_intake_job_free(j);
    }
    if (q->fd >= 0) close(q->fd);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cond);
    free(q);
}

int cb_intake_fd(const intake *q) { return q->fd; }

bool cb_intake_submit(intake *q, cb_intake_job *j) {
    pthread_mutex_lock(&q->mu);
    bool ok = q->out < q->max_jobs;
    if (ok) {
        q->out++;
        j->next = NULL;
        if (q->todo_tail)
            q->todo_tail->next = j;
        else
            q->todo = j;
        q->todo_tail = j;
        pthread_cond_signal(&q->cond);
    }
    pthread_mutex_unlock(&q->mu);
    return ok;
}

cb_intake_job *cb_intake_take(intake *q) {
    pthread_mutex_lock(&q->mu);
    cb_intake_job *j = q->done;
    if (j) {
        q->done = j->next;
        if (!q->done) q->done_tail = NULL;
        q->out--;
        j->next = NULL;
    }
    pthread_mutex_unlock(&q->mu);
    return j;
}

int cb_intake_pending(const intake *q) {
    pthread_mutex_lock((pthread_mutex_t *)&q->mu);
    int n = q->out;
    pthread_mutex_unlock((pthread_mutex_t *)&q->mu);
    return n;
}
