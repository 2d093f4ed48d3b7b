/* embeddings.c — OpenAI's embeddings request and response (embeddings.h). */
#include "embeddings.h"
#include "../util/buf.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the request --------------- */

static int oom(cb_openai_error *e) {
    cb_openai_bad(e, NULL, "out of memory; retry later");
    e->status = 503;
    e->type = "service_unavailable";
    return -1;
}

static const char SHAPE[] =
    "'input' must be a string, a list of strings, a list of token ids or a list of lists of token ids";

/* Whether x is a token id: a whole number in [0, INT32_MAX]. */
static bool token_id(const cJSON *x) {
    return cJSON_IsNumber(x) && isfinite(x->valuedouble) && x->valuedouble == floor(x->valuedouble) &&
           x->valuedouble >= 0 && x->valuedouble <= INT32_MAX;
}

/* Input i (named as input[i] when the request has a list) from x: a string or a list of token ids. */
static int one_input(const cJSON *x, bool listed, int i, cb_openai_prompt *out, cb_openai_error *e) {
    char at[32] = "the input";
    if (listed) snprintf(at, sizeof(at), "input[%d]", i);
    if (cJSON_IsString(x)) {
        if (!x->valuestring[0]) return cb_openai_bad(e, "input", "%s is empty", at);
        return (out->text = strdup(x->valuestring)) ? 0 : oom(e);
    }
    int n = cJSON_GetArraySize(x); /* one walk of the list below: cJSON_GetArrayItem is O(i) */
    if (n == 0) return cb_openai_bad(e, "input", "%s is empty", at);
    if (!(out->tokens = malloc(sizeof(int32_t) * (size_t)n))) return oom(e);
    const cJSON *t;
    cJSON_ArrayForEach(t, x) {
        if (!token_id(t)) return cb_openai_bad(e, "input", "%s: token ids are non-negative integers", at);
        out->tokens[out->n_tokens++] = (int32_t)t->valuedouble;
    }
    return 0;
}

/* `input`: a string, a list of token ids (one input each), or a list of strings or of lists of token
 * ids (an input each; all of one kind). */
static int parse_input(const cJSON *root, cb_openai_embd_request *r, cb_openai_error *e) {
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "input");
    if (!in || cJSON_IsNull(in)) return cb_openai_bad(e, "input", "'input' is required");
    bool one = cJSON_IsString(in) || (cJSON_IsArray(in) && cJSON_IsNumber(in->child));
    if (!one && !cJSON_IsArray(in)) return cb_openai_bad(e, "input", SHAPE);
    int n = one ? 1 : cJSON_GetArraySize(in);
    if (n == 0) return cb_openai_bad(e, "input", "'input' is empty");
    if (n > COBATCH_EMBD_MAX_INPUTS)
        return cb_openai_bad(e, "input", "'input' has %d inputs; a request may have at most %d", n,
                             COBATCH_EMBD_MAX_INPUTS);
    if (!(r->inputs = calloc((size_t)n, sizeof(*r->inputs)))) return oom(e);
    r->n_inputs = n;
    bool texts = one || cJSON_IsString(in->child);
    const cJSON *x = one ? in : in->child;
    for (int i = 0; i < n && x; i++, x = x->next) {
        if (!one && (texts ? !cJSON_IsString(x) : !cJSON_IsArray(x))) return cb_openai_bad(e, "input", SHAPE);
        if (one_input(x, !one, i, &r->inputs[i], e) != 0) return -1;
    }
    return 0;
}

static bool listed(const char *k) {
    static const char *const KEYS[] = {"input", "model", "encoding_format", "dimensions", "user"};
    for (size_t i = 0; i < sizeof(KEYS) / sizeof(KEYS[0]); i++)
        if (!strcmp(KEYS[i], k)) return true;
    return false;
}

/* `encoding_format`, `dimensions`, `model` and `user`. */
static int parse_options(const cJSON *root, int32_t n_embd, cb_openai_embd_request *r, cb_openai_error *e) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "encoding_format");
    if (f && !cJSON_IsNull(f)) {
        if (!cJSON_IsString(f) || (strcmp(f->valuestring, "float") && strcmp(f->valuestring, "base64")))
            return cb_openai_bad(e, "encoding_format", "'encoding_format' is \"float\" or \"base64\"");
        r->base64 = !strcmp(f->valuestring, "base64");
    }
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "dimensions");
    if (d && !cJSON_IsNull(d)) {
        if (!token_id(d) || d->valuedouble < 1)
            return cb_openai_bad(e, "dimensions", "'dimensions' must be a positive integer");
        if (d->valuedouble != n_embd)
            return cb_openai_bad(e, "dimensions",
                                 "'dimensions': this model's embeddings have %d dimensions and it was not trained for "
                                 "shorter ones (cut, they would be worse vectors); leave it out or give %d",
                                 (int)n_embd, (int)n_embd);
    }
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(root, "user");
    if (u && !cJSON_IsNull(u) && !cJSON_IsString(u)) return cb_openai_bad(e, "user", "'user' must be a string");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (m && !cJSON_IsNull(m)) {
        if (!cJSON_IsString(m)) return cb_openai_bad(e, "model", "'model' must be a string");
        if (!(r->model = strdup(m->valuestring))) return oom(e);
    }
    return 0;
}

int cb_openai_embd_parse_json(const cJSON *root, int32_t n_embd, cb_openai_embd_request *r, cb_openai_error *e) {
    memset(r, 0, sizeof(*r));
    memset(e, 0, sizeof(*e));
    if (!cJSON_IsObject(root)) return cb_openai_bad(e, NULL, "the body must be a JSON object");
    for (const cJSON *x = root->child; x; x = x->next) /* nothing a client asks for is silently ignored */
        if (x->string && !cJSON_IsNull(x) && !listed(x->string))
            return cb_openai_bad(e, x->string, "'%.40s' is not supported by this server", x->string);
    if (parse_input(root, r, e) != 0) return -1;
    return parse_options(root, n_embd, r, e);
}

int cb_openai_embd_parse(const char *body, size_t len, int32_t n_embd, cb_openai_embd_request *r, cb_openai_error *e) {
    memset(r, 0, sizeof(*r));
    memset(e, 0, sizeof(*e));
    cJSON *root = cb_openai_body_parse(body, len, e);
    if (!root) return -1;
    int rc = cb_openai_embd_parse_json(root, n_embd, r, e);
    cJSON_Delete(root);
    return rc;
}

void cb_openai_embd_request_free(cb_openai_embd_request *r) {
    for (int i = 0; r->inputs && i < r->n_inputs; i++) {
        free(r->inputs[i].text);
        free(r->inputs[i].tokens);
    }
    free(r->inputs);
    free(r->model);
    memset(r, 0, sizeof(*r));
}

/* ---------------------------------------------------------------- the response -------------- */

size_t cb_openai_base64(const unsigned char *p, size_t n, char *out) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        out[k++] = A[v >> 18 & 63];
        out[k++] = A[v >> 12 & 63];
        out[k++] = i + 1 < n ? A[v >> 6 & 63] : '=';
        out[k++] = i + 2 < n ? A[v & 63] : '=';
    }
    out[k] = '\0';
    return k;
}

/* A JSON string of s (quotes, backslashes and control characters escaped). */
static void put_string(cb_buf *b, const char *s) {
    cb_buf_append(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            cb_buf_printf(b, "\\%c", c);
        else if (c < 0x20)
            cb_buf_printf(b, "\\u%04x", c);
        else
            cb_buf_append(b, s, 1);
    }
    cb_buf_append(b, "\"", 1);
}

/* One vector: a list of numbers (%.9g reads back as the same float32), or its bytes in base64. */
static void put_vector(cb_buf *b, const float *v, int32_t n, bool base64, unsigned char *bytes, char *b64) {
    if (base64) {
        for (int32_t i = 0; i < n; i++) { /* little-endian whatever the host, as the SDKs decode it */
            uint32_t u;
            memcpy(&u, &v[i], 4);
            for (int k = 0; k < 4; k++)
                bytes[4 * i + k] = (unsigned char)(u >> (8 * k));
        }
        size_t len = cb_openai_base64(bytes, 4 * (size_t)n, b64);
        cb_buf_append(b, "\"", 1);
        cb_buf_append(b, b64, len);
        cb_buf_append(b, "\"", 1);
        return;
    }
    cb_buf_append(b, "[", 1);
    for (int32_t i = 0; i < n; i++) {
        char num[32];
        int k = snprintf(num, sizeof(num), i ? ",%.9g" : "%.9g", (double)v[i]);
        cb_buf_append(b, num, (size_t)k);
    }
    cb_buf_append(b, "]", 1);
}

char *cb_openai_embd_response_json(const char *model, const float *v, int n_inputs, int32_t n_embd, bool base64,
                                   int prompt_tokens) {
    unsigned char *bytes = base64 ? malloc(4 * (size_t)n_embd) : NULL;
    char *b64 = base64 ? malloc(4 * ((4 * (size_t)n_embd + 2) / 3) + 1) : NULL;
    cb_buf b = {0};
    if (base64 && (!bytes || !b64)) b.failed = true;
    cb_buf_append(&b, "{\"object\":\"list\",\"data\":[", 25);
    for (int i = 0; i < n_inputs && !b.failed; i++) {
        cb_buf_printf(&b, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", i ? "," : "", i);
        put_vector(&b, v + (size_t)i * (size_t)n_embd, n_embd, base64, bytes, b64);
        cb_buf_append(&b, "}", 1);
    }
    cb_buf_append(&b, "],\"model\":", 10);
    put_string(&b, model);
    cb_buf_printf(&b, ",\"usage\":{\"prompt_tokens\":%d,\"total_tokens\":%d}}", prompt_tokens, prompt_tokens);
    free(bytes);
    free(b64);
    if (b.failed) {
        cb_buf_free(&b);
        return NULL;
    }
    return cb_buf_take(&b, NULL);
}
