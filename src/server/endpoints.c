/* endpoints.c — the endpoints that only read the engine (see server_internal.h): models, the
 * tokenizer, Ollama's model listings, /props, the chat page, /metrics. */
#include "server_internal.h"
#include "../ollama/ollama.h"
#include "../util/buf.h"
#include "webui.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

void cb_srv_handle_models(srv *s, cb_conn *c) {
    cJSON *root = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(root, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON_AddStringToObject(m, "id", s->model);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "cobatch");
    cJSON_AddNumberToObject(m, "max_model_len", cobatch_n_ctx_seq(s->engine));
    cJSON_AddItemToArray(data, m);
    cb_srv_reply_cjson(s, c, root);
}

/* What a router asks a worker when it registers it (sglang-router's /model_info): the model's
 * name, so that its /v1/models lists it. No tokenizer path: the router sends text. */
void cb_srv_handle_model_info(srv *s, cb_conn *c) {
    struct cobatch_vocab_info v;
    cobatch_vocab_info(s->engine, &v);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "model_path", s->model);
    cJSON_AddStringToObject(root, "served_model_name", s->model);
    cJSON_AddNullToObject(root, "tokenizer_path");
    cJSON_AddBoolToObject(root, "is_generation", true);
    cJSON_AddBoolToObject(root, "supports_vision", false);
    cJSON_AddNumberToObject(root, "max_context_length", cobatch_n_ctx_seq(s->engine));
    cJSON_AddNumberToObject(root, "vocab_size", v.n_vocab);
    struct cobatch_weights_info w;
    cobatch_weights_info(s->engine, &w);
    cJSON *wo = cJSON_AddObjectToObject(root, "weights"), *types = cJSON_AddArrayToObject(wo, "buffer_types");
    for (const char *p = w.buffer_types; types && *p;) { /* "CPU_REPACK,CPU_Mapped" as a list */
        size_t n = strcspn(p, ",");
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)n, p);
        cJSON_AddItemToArray(types, cJSON_CreateString(name));
        p += n + (p[n] == ',');
    }
    cJSON_AddStringToObject(wo, "repack", w.repack);
    cJSON_AddBoolToObject(wo, "amx", w.amx);
    cJSON_AddStringToObject(wo, "reason", w.why);
    cb_srv_reply_cjson(s, c, root);
}

/* What lm-evaluation-harness's server-side tokenizer (and vLLM's /tokenizer_info) reads. */
/* "name": its text and "name_id": its id, both null when the vocabulary has no such token. */
static void add_token(cJSON *root, const char *name, int32_t id, const char *text) {
    char key[32];
    snprintf(key, sizeof(key), "%s_id", name);
    if (id < 0) {
        cJSON_AddNullToObject(root, name);
        cJSON_AddNullToObject(root, key);
        return;
    }
    cJSON_AddStringToObject(root, name, text);
    cJSON_AddNumberToObject(root, key, id);
}

void cb_srv_handle_tokenizer_info(srv *s, cb_conn *c) {
    struct cobatch_vocab_info v;
    cobatch_vocab_info(s->engine, &v);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "tokenizer_class", "llama.cpp GGUF");
    cJSON_AddNumberToObject(root, "vocab_size", v.n_vocab);
    cJSON_AddNumberToObject(root, "model_max_length", cobatch_n_ctx_seq(s->engine));
    add_token(root, "bos_token", v.bos, v.bos_text);
    add_token(root, "eos_token", v.eos, v.eos_text);
    cJSON_AddBoolToObject(root, "add_bos_token", v.add_bos);
    if (v.chat_template)
        cJSON_AddStringToObject(root, "chat_template", v.chat_template);
    else
        cJSON_AddNullToObject(root, "chat_template");
    cb_srv_reply_cjson(s, c, root);
}

/* Ollama's model endpoints: the one model, whatever name a request gives (/api/show's body names it:
 * the same answer for any name, as every endpoint here serves the one model). */
void cb_srv_handle_ollama_model(srv *s, cb_conn *c, cb_srv_route_id id) {
    struct cobatch_model_desc d;
    struct cobatch_vocab_info v;
    struct cobatch_embd_info embd;
    struct stat st;
    cobatch_model_desc(s->engine, &d);
    cobatch_vocab_info(s->engine, &v);
    cobatch_embd_info(s->engine, &embd);
    bool file = s->p.model_path && stat(s->p.model_path, &st) == 0;
    cb_ollama_model m = {.name = s->model,
                         .path = s->p.model_path,
                         .size = file ? (long long)st.st_size : d.bytes,
                         .family = d.arch,
                         .params = d.size_label,
                         .quant = d.quant,
                         .chat_template = v.chat_template,
                         .ctx = cobatch_n_ctx_seq(s->engine),
                         .embeddings = embd.n_embd > 0,
                         .tools = d.tools,
                         .thinking = d.thinking,
                         .modified = file ? (long long)st.st_mtime : (long long)time(NULL)};
    char *j = id == R_OLLAMA_SHOW ? cb_ollama_show_json(&m) : cb_ollama_tags_json(&m, id == R_OLLAMA_PS);
    cb_srv_reply_json(s, c, 200, j, NULL);
    free(j);
}

/* llama-server's GET /props, what clients of it read: the context a request may use, the slots (the
 * requests run at once), the model, its template and special tokens, the defaults a request gets. */
void cb_srv_handle_props(srv *s, cb_conn *c) {
    struct cobatch_vocab_info v;
    struct cobatch_kv_info kv;
    cobatch_vocab_info(s->engine, &v);
    cobatch_kv_info(s->engine, &kv);
    const struct cobatch_sampling *d = &s->p.defaults.sampling;
    cJSON *root = cJSON_CreateObject(), *g = cJSON_AddObjectToObject(root, "default_generation_settings");
    cJSON *params = g ? cJSON_AddObjectToObject(g, "params") : NULL, *mod = cJSON_AddObjectToObject(root, "modalities");
    cJSON_AddNumberToObject(g, "n_ctx", cobatch_n_ctx_seq(s->engine));
    cJSON_AddNumberToObject(params, "n_predict", s->p.defaults.max_tokens > 0 ? s->p.defaults.max_tokens : -1);
    cJSON_AddNumberToObject(params, "temperature", d->temperature);
    cJSON_AddNumberToObject(params, "top_k", d->top_k);
    cJSON_AddNumberToObject(params, "top_p", d->top_p);
    cJSON_AddNumberToObject(params, "min_p", d->min_p);
    cJSON_AddNumberToObject(params, "repeat_penalty", d->repetition_penalty);
    cJSON_AddNumberToObject(params, "presence_penalty", d->presence_penalty);
    cJSON_AddNumberToObject(params, "frequency_penalty", d->frequency_penalty);
    cJSON_AddNumberToObject(root, "total_slots", kv.seqs);
    cJSON_AddStringToObject(root, "model_alias", s->model);
    cJSON_AddStringToObject(root, "model_path", s->p.model_path ? s->p.model_path : s->model);
    if (v.chat_template)
        cJSON_AddStringToObject(root, "chat_template", v.chat_template);
    else
        cJSON_AddNullToObject(root, "chat_template");
    cJSON_AddStringToObject(root, "bos_token", v.bos_text);
    cJSON_AddStringToObject(root, "eos_token", v.eos_text);
    cJSON_AddBoolToObject(mod, "vision", false);
    cJSON_AddBoolToObject(mod, "audio", false);
    cJSON_AddStringToObject(root, "build_info", "cobatch");
    cJSON_AddBoolToObject(root, "is_sleeping", false);
    cb_srv_reply_cjson(s, c, root);
}

/* The chat page. Its policy lets it reach this server's API and nothing else (no scripts, styles or
 * fonts from elsewhere, no form posts, no framing by another site). */
void cb_srv_handle_webui(cb_conn *c) {
    static const char headers[] =
        "Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'\r\n"
        "X-Content-Type-Options: nosniff\r\nCache-Control: no-cache\r\nReferrer-Policy: no-referrer\r\n";
    cb_conn_reply(c, 200, "text/html; charset=utf-8", headers, (const char *)cb_webui_html, cb_webui_html_len);
}

void cb_srv_handle_metrics(srv *s, cb_conn *c) {
    struct cobatch_stats st;
    cb_httpd_stats hs;
    cobatch_engine_stats(s->engine, &st);
    cb_httpd_get_stats(s->httpd, &hs);
    cb_srv_gauges g = {.connections = hs.open,
                       .accepted = hs.accepted,
                       .refused_connections = hs.refused_full + hs.refused_fd,
                       .request_timeouts = hs.timeouts,
                       .bad_requests = hs.bad_requests,
                       .resets = hs.resets,
                       .buffered_bytes = hs.buffered,
                       .intake_pending = cb_intake_pending(s->in) + cb_intake_pending(s->bulk),
                       .requests_open = s->n_reqs,
                       .draining = s->leaving};
    struct cobatch_weights_info w;
    cobatch_weights_info(s->engine, &w);
    char *text = cb_srv_metrics_render(&s->m, &g, &st, &w, s->model);
    if (!text) {
        cb_srv_reply_error(s, c, 500, "server_error", NULL, "out of memory");
        return;
    }
    cb_conn_reply(c, 200, "text/plain; version=0.0.4", NULL, text, strlen(text));
    free(text);
}
