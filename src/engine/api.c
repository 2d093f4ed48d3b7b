/* api.c — the thread-safe public calls of cobatch.h that are not elsewhere: submit, cancel, the
 * engine's facts and the test hooks. They validate and tokenize on the caller's thread and talk to
 * the engine thread only through the mailbox and the event queue (events.c); a request is built in
 * request.c, its chat in chat.c, the engine in init.c. */
#include "request.h"
#include "testing.h"
#include "../util/util.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- submit / cancel ------------ */

cobatch_req_id cobatch_submit(cobatch_engine *e, const struct cobatch_request_params *p, struct cobatch_error *err) {
    struct cobatch_error mine;
    if (!err) err = &mine;
    if (!e || !p) return cb_engine_refuse(err, COBATCH_ERR_INVALID, NULL, "no engine or parameters");
    int rc = cb_engine_check_request(e, p, err);
    if (rc != COBATCH_OK) return rc;
    if (p->messages && !p->chat) { /* rendered here, for this request alone */
        cobatch_chat *c = cobatch_chat_new(e, p, err);
        if (!c) return err->code;
        struct cobatch_request_params q = *p;
        q.messages = NULL;
        q.n_messages = 0;
        q.tools = NULL;
        q.json_schema = NULL;
        q.chat = c;
        cobatch_req_id id = cobatch_submit(e, &q, err);
        cobatch_chat_free(c);
        return id;
    }
    cb_request *r = cb_engine_request_new(e, p, err);
    return r ? cb_engine_enqueue(e, r, err) : err->code;
}

void cobatch_drop_cached_prefixes(cobatch_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->drop_cache = true;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->mu);
}

int cobatch_cancel(cobatch_engine *e, cobatch_req_id id) {
    int rc = COBATCH_ERR_NOT_FOUND;
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->n_live; i++) {
        if (e->live[i].id == id) { /* live: its request is not freed before this entry goes */
            atomic_store(e->live[i].cancel, true);
            e->n_cancels++;
            pthread_cond_signal(&e->cond);
            rc = COBATCH_OK;
            break;
        }
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

void cobatch_cancel_waiting(cobatch_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->cancel_waiting = true;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->mu);
}

/* ---------------------------------------------------------------- facts ---------------------- */

void cobatch_engine_stats(cobatch_engine *e, struct cobatch_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    out->waiting = e->n_queued;
    pthread_mutex_unlock(&e->mu);
    pthread_mutex_lock(&e->ev_mu); /* now, not at the last step: the poller may have taken them since */
    out->events_queued = e->events.len;
    pthread_mutex_unlock(&e->ev_mu);
}

int32_t cobatch_n_vocab(const cobatch_engine *e) { return e->model.n_vocab; }
void cobatch_vocab_info(const cobatch_engine *e, struct cobatch_vocab_info *out) {
    cb_model_vocab_info(&e->model, out);
}
int32_t cobatch_n_ctx_seq(const cobatch_engine *e) { return e->n_ctx_seq; }
size_t cobatch_max_prompt_bytes(const cobatch_engine *e) { return (size_t)e->n_ctx_seq * (size_t)e->model.max_piece; }
const char *cobatch_model_name(const cobatch_engine *e) { return e->model.name; }
void cobatch_weights_info(const cobatch_engine *e, struct cobatch_weights_info *out) {
    out->buffer_types = e->model.weight_bufts;
    out->repack = cb_repack_mode_name(e->model.repack_mode);
    out->amx = e->model.repack.amx;
    out->why = e->model.repack.why;
}
void cobatch_kv_info(const cobatch_engine *e, struct cobatch_kv_info *out) {
    memset(out, 0, sizeof(*out));
    out->split = e->main.kv.split;
    out->seqs = e->params.max_num_seqs;
    out->seq_cells = e->main.kv.per_seq_cap;
    out->cache_streams = e->main.kv.split ? e->main.kv.n_seq - e->params.max_num_seqs : 0;
    out->lane_cells = cb_lane_on(&e->lane) ? e->lane.pool.kv.capacity : 0;
    out->kv_bytes = (int64_t)(e->model.kv_cell_bytes * ((double)e->model.n_ctx + out->lane_cells));
    out->host_cache_bytes = e->host.cap;
    out->n_ctx_train = e->model.n_ctx_train;
    out->ctx_limit = cobatch_params_ctx_limit(&e->params, e->model.n_ctx_train);
    out->flash_attn = e->params.flash_attn != 0;
    out->type_k = e->params.cache_type_k;
    out->type_v = e->params.cache_type_v;
    out->attention = e->attn_why;
}
int32_t cobatch_max_queue(const cobatch_engine *e) { return e->params.max_queue; }

void cobatch_model_desc(const cobatch_engine *e, struct cobatch_model_desc *out) {
    cb_model_describe(&e->model, out);
    const char *tmpl = e->model.tmpls ? cb_common_template_source(e->model.tmpls) : NULL;
    out->tools = tmpl && strstr(tmpl, "tools") != NULL; /* a Jinja template that reads its tools */
    out->thinking = e->model.tmpls && cb_common_template_thinking(e->model.tmpls)->thinks;
}

int32_t cobatch_tokenize(const cobatch_engine *e, const char *text, int32_t *out, int32_t max) {
    return cobatch_tokenize_ext(e, text, true, true, out, max);
}

int32_t cobatch_tokenize_ext(const cobatch_engine *e, const char *text, bool add_special, bool parse_special,
                             int32_t *out, int32_t max) {
    int32_t n = cb_model_tokenize_into(&e->model, text, strlen(text), add_special, parse_special, out, max);
    return n == INT32_MIN ? -1 : n < 0 ? -n : n;
}

/* A cobatch_grammar is the llama.cpp grammar sampler itself, never run: requests clone it. */
cobatch_grammar *cobatch_grammar_new(const cobatch_engine *e, const char *gbnf, char *err, size_t errlen) {
    char why[240] = "no grammar given";
    cb_grammar_limits lim = cb_engine_grammar_limits(e);
    struct llama_sampler *g = gbnf ? cb_grammar_new(&e->model, gbnf, &lim, why, sizeof(why)) : NULL;
    if (!g) cb_set_err(err, errlen, "grammar: %s", why);
    return (cobatch_grammar *)g;
}

void cobatch_grammar_free(cobatch_grammar *g) { cb_sampler_free((struct llama_sampler *)g); }

char *cobatch_json_schema_grammar(const char *schema, char *err, size_t errlen) {
    return cb_common_schema_to_grammar(schema, err, errlen);
}

int32_t cobatch_token_piece(const cobatch_engine *e, int32_t token, char *out, int32_t max) {
    if (token < 0 || token >= e->model.n_vocab) return -1;
    int32_t k = cb_model_token_text(&e->model, token, out, max);
    return k < 0 ? -k : k;
}

int32_t cobatch_detokenize(const cobatch_engine *e, const int32_t *tokens, int32_t n, char *out, int32_t max) {
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= e->model.n_vocab) return -1;
    int32_t k = cb_model_detokenize(&e->model, tokens, n, out, max);
    return k < 0 ? -k : k;
}

/* ---------------------------------------------------------------- test hooks (testing.h) ----- */

_Static_assert((int)COBATCH_TEST_GENERATE == (int)CB_KIND_GENERATE && (int)COBATCH_TEST_EMBED == (int)CB_KIND_EMBED,
               "a fault's kind is a kind of work");

void cobatch_test_fault(cobatch_engine *e, int kind, int rc, int count, int64_t abort_after_nodes) {
    if (kind < 0 || kind >= CB_N_KINDS) return;
    pthread_mutex_lock(&e->mu);
    e->fault[kind] = (cb_engine_fault){.decode_rc = rc, .decode_count = count, .abort_after_nodes = abort_after_nodes};
    e->fault_set[kind] = true;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->mu);
}

int64_t cobatch_test_nodes_seen(cobatch_engine *e) {
    pthread_mutex_lock(&e->mu);
    int64_t n = e->nodes_seen;
    pthread_mutex_unlock(&e->mu);
    return n;
}

void cobatch_test_set_event_backlog(cobatch_engine *e, int n) {
    pthread_mutex_lock(&e->ev_mu);
    e->event_backlog = n > 0 ? n : CB_EVENT_BACKLOG;
    pthread_mutex_unlock(&e->ev_mu);
}
