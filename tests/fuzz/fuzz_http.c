/* libFuzzer: the server's request handling without sockets or a model: raw bytes, cut into reads
 * of varying sizes, through the HTTP reader (pipelined requests one after another), then the route,
 * the API key check and, for the completion endpoints, the OpenAI parser. */
#include "../../src/server/http.h"
#include "../../src/openai/openai.h"
#include "../../src/server/routes.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void handle(cb_http_req *r) {
    if (!r->method || !r->target || r->body_len > r->lim.max_body || r->body[r->body_len] != '\0') abort();
    if (r->n_headers > r->lim.max_headers) abort();
    const cb_srv_route *rt = cb_srv_route_find(r->target);
    (void)cb_srv_authorized("key", cb_http_header_get(r, "Authorization"));
    if (!rt || (rt->id != R_COMPLETIONS && rt->id != R_CHAT)) return;
    cb_openai_request o;
    cb_openai_error e;
    cb_openai_parse(rt->id == R_CHAT ? CB_OPENAI_CHAT : CB_OPENAI_COMPLETION, NULL, r->body, r->body_len, &o, &e);
    cb_openai_request_free(&o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned step = data[0] % 16 + 1; /* bytes per read: the reader must not care how they come */
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    cb_http_limits lim = {.max_head = 4096, .max_headers = 32, .max_body = 65536};
    cb_http_req r;
    cb_http_req_init(&r, &lim);
    int requests = 0;
    while (n > 0 && requests < 16) {
        size_t take = n < step ? n : step, used = 0;
        cb_http_result rc = cb_http_feed(&r, p, take, &used);
        if (used > take) abort();
        p += used;
        n -= used;
        if (rc == CB_HTTP_ERROR) {
            if (r.status < 400 || r.status > 505 || !r.reason) abort();
            break;
        }
        if (rc == CB_HTTP_DONE) {
            handle(&r);
            cb_http_req_reset(&r);
            requests++;
        } else if (used != take) {
            abort(); /* NEED_MORE takes everything it was given */
        }
    }
    cb_http_req_free(&r);
    return 0;
}
