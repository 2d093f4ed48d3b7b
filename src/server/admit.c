/* admit.c — a request's head checked before its body is read: its route, the Host, Origin and
 * Content-Type guard, the method, the API key; every refusal in the shape of its path's API. */
#include "server_internal.h"
#include "../anthropic/anthropic.h"
#include "../native/native.h"
#include "../ollama/ollama.h"
#include "../responses/responses.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The dialect a route speaks. */
const cb_dialect *cb_srv_dialect_of(cb_srv_route_id id) {
    switch (id) {
    case R_MESSAGES:
    case R_COUNT_TOKENS: return &cb_anthropic_dialect;
    case R_RESPONSES:
    case R_INPUT_TOKENS: return &cb_responses_dialect;
    case R_NATIVE_COMPLETION:
    case R_INFILL: return &cb_native_dialect;
    case R_OLLAMA_CHAT: return &cb_ollama_chat_dialect;
    case R_OLLAMA_GENERATE: return &cb_ollama_generate_dialect;
    case R_OLLAMA_EMBED: return &cb_ollama_embed_dialect;
    case R_OLLAMA_EMBEDDINGS: return &cb_ollama_embeddings_dialect;
    case R_OLLAMA_VERSION:
    case R_OLLAMA_TAGS:
    case R_OLLAMA_PS:
    case R_OLLAMA_SHOW: return &cb_ollama_embed_dialect; /* Ollama's error shape */
    case R_COMPLETIONS: return &cb_openai_completion_dialect;
    default: return &cb_openai_dialect;
    }
}

/* The dialect a path belongs to, for errors raised before a route is known. */
static const cb_dialect *dialect_of_path(const char *path) {
    if (!strncmp(path, "/v1/messages", 12)) return &cb_anthropic_dialect;
    if (!strncmp(path, "/v1/responses", 13)) return &cb_responses_dialect;
    if (!strcmp(path, "/completion") || !strcmp(path, "/infill")) return &cb_native_dialect;
    if (!strncmp(path, "/api/", 5)) return &cb_ollama_embed_dialect; /* Ollama's error shape */
    return &cb_openai_dialect;
}

/* The wrong method for rt, with the methods it takes in Allow (RFC 9110). */
static void reply_405(srv *s, cb_conn *c, const cb_srv_route *rt) {
    cb_openai_error e = {.status = 405, .type = "invalid_request_error"};
    snprintf(e.message, sizeof(e.message), "use %s for %s", rt->post ? "POST" : "GET", rt->path);
    char *j = cb_dialect_error_json(cb_srv_dialect_of(rt->id), &e);
    cb_srv_reply_json(s, c, 405, j, rt->post ? "Allow: POST\r\n" : "Allow: GET, HEAD\r\n");
    free(j);
}

/* The Host and Origin checks (and with post, the body's type) of guard.h; false once answered. */
static bool guarded(srv *s, cb_conn *c, cb_http_req *hr, const cb_dialect *d, bool post) {
    cb_guard_req g = {.post = post,
                      .host = cb_http_header_get(hr, "Host"),
                      .origin = cb_http_header_get(hr, "Origin"),
                      .sec_fetch_site = cb_http_header_get(hr, "Sec-Fetch-Site"),
                      .content_type = cb_http_header_get(hr, "Content-Type")};
    const char *why = NULL;
    int status = cb_guard_check(&s->guard, &g, &why);
    if (status == 0) return true;
    cb_srv_dreply_error(s, c, d, status, status == 403 ? "permission_error" : "invalid_request_error", NULL, "%s", why);
    return false;
}

/* The request's route, or NULL once it has been answered (403, 404, 405, 415, 401): from its head
 * alone. Its errors are in the dialect of the path (an Anthropic client's unknown /v1/messages/...
 * too). A GET route takes HEAD as well (httpd sends the head alone). */
const cb_srv_route *cb_srv_admit(srv *s, cb_conn *c, cb_http_req *hr) {
    char path[256];
    cb_http_req_path(hr, path, sizeof(path));
    const cb_dialect *d = dialect_of_path(path);
    if (!guarded(s, c, hr, d, false)) return NULL; /* a name rebound to this host learns nothing, not even a 404 */
    const cb_srv_route *rt = cb_srv_route_find(hr->target);
    if (rt && rt->id == R_WEBUI && s->p.no_webui) rt = NULL; /* --no-webui: as if there were no page */
    if (!rt) {
        cb_srv_dreply_error(s, c, d, 404, "invalid_request_error", NULL, "no route for %.200s", path);
        return NULL;
    }
    bool get = !strcmp(hr->method, "GET") || !strcmp(hr->method, "HEAD");
    if (rt->post ? strcmp(hr->method, "POST") != 0 : !get) {
        reply_405(s, c, rt);
        return NULL;
    }
    if (rt->post && !guarded(s, c, hr, cb_srv_dialect_of(rt->id), true)) return NULL;
    bool key = rt->auth || (rt->id == R_METRICS && !s->p.public_metrics);
    if (key && !cb_srv_authorized(s->p.api_key, cb_http_header_get(hr, "Authorization")) &&
        !cb_srv_key_given(s->p.api_key, cb_http_header_get(hr, "x-api-key"))) {
        cb_srv_dreply_error(s, c, cb_srv_dialect_of(rt->id), 401, "authentication_error", NULL,
                            "a valid API key is required (Authorization: Bearer KEY, or x-api-key: KEY)");
        return NULL;
    }
    return rt;
}

/* The HTTP reader refused a request: answered in the shape its path's API speaks. */
void cb_srv_on_http_error(cb_conn *c, cb_http_req *hr, int status, const char *reason, void *user) {
    srv *s = user;
    char path[256];
    cb_http_req_path(hr, path, sizeof(path));
    cb_srv_dreply_error(s, c, dialect_of_path(path), status,
                        status == 503 ? "service_unavailable" : "invalid_request_error", NULL, "%s", reason);
}

/* A client waiting for 100 Continue is answered before it sends a body the server would refuse. */
bool cb_srv_on_head(cb_conn *c, cb_http_req *hr, void *user) {
    srv *s = user;
    if (cb_srv_admit(s, c, hr)) return true;
    s->m.http_requests++;
    return false;
}
