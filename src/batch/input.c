/* input.c — JSONL request lines in, validated items out. */
#include "input.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "../util/utf8.h"
#include "../util/util.h"

/* A line's envelope, checked before its body: custom_id, method, url. Returns the error code to
 * report ("" when the envelope is fine) and fills msg. */
static const char *check_envelope(cJSON *root, cb_openai_kind *kind, char *msg, size_t len) {
    cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "method");
    cJSON *u = cJSON_GetObjectItemCaseSensitive(root, "url");
    if (!cJSON_IsString(m) || strcmp(m->valuestring, "POST") != 0) {
        cb_set_err(msg, len, "'method' must be \"POST\"");
        return "invalid_method";
    }
    if (cJSON_IsString(u) && !strcmp(u->valuestring, "/v1/completions")) {
        *kind = CB_OPENAI_COMPLETION;
    } else if (cJSON_IsString(u) && !strcmp(u->valuestring, "/v1/chat/completions")) {
        *kind = CB_OPENAI_CHAT;
    } else {
        cb_set_err(msg, len, "'url' must be \"/v1/completions\" or \"/v1/chat/completions\"%s%s%s",
                   cJSON_IsString(u) ? " (got \"" : "", cJSON_IsString(u) ? u->valuestring : "",
                   cJSON_IsString(u) ? "\")" : "");
        return "invalid_url";
    }
    if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(root, "body"))) {
        cb_set_err(msg, len, "'body' must be a JSON object");
        return "invalid_request";
    }
    return "";
}

static int push(cb_batch_input *in, cb_batch_item *it) {
    if (!cb_grow((void **)&in->items, &in->cap, in->n + 1, sizeof(*in->items), 256)) return -1;
    in->items[in->n++] = it;
    return 0;
}

/* Makes the item of a line whose envelope is fine; returns -1 only when out of memory. */
static int accept(cb_batch_input *in, cb_batch_out *o, cJSON *root, const char *cid, cb_openai_kind kind,
                  int32_t line) {
    cb_batch_item *it = calloc(1, sizeof(*it));
    if (!it) return -1;
    cb_openai_error e;
    int rc = cb_openai_parse_json(kind, in->defaults, cJSON_GetObjectItemCaseSensitive(root, "body"), &it->req, &e);
    if (rc == 0 && kind == CB_OPENAI_CHAT) /* a chat's schema goes with its messages, as the server's */
        it->req.params.json_schema = it->req.json_schema;
    else if (rc == 0)
        rc = cb_openai_resolve_schema(&it->req, cobatch_json_schema_grammar, &e);
    /* one choice per line: the output format has one body per line, without log-probabilities */
    const char *unsupported = rc != 0                   ? NULL
                              : it->req.n > 1           ? "'n' above 1"
                              : it->req.n_prompts > 1   ? "a list of prompts"
                              : it->req.echo            ? "'echo'"
                              : it->req.params.logprobs ? "'logprobs'"
                                                        : NULL;
    if (unsupported)
        rc = -1, snprintf(e.message, sizeof(e.message), "%s is not supported here (cobatch serve has it)", unsupported);
    if (rc != 0) {
        cb_batch_out_error(o, line, cid, "invalid_request", "body: %s", e.message);
        in->refused++;
        cb_openai_request_free(&it->req);
        free(it);
        return 0;
    }
    it->line = line;
    it->kind = kind;
    it->custom_id = strdup(cid);
    if (!it->custom_id || push(in, it) != 0) {
        cb_batch_item_release(it);
        free(it->custom_id);
        free(it);
        return -1;
    }
    return 0;
}

/* The custom_id of a line that cannot be read whole (a NUL, bytes that are not UTF-8, not JSON,
 * text after the object), so that its error line still names it: the first "custom_id": "..." of
 * the text, decoded; NULL when there is none that reads as a clean string. Caller frees. */
static char *salvage_custom_id(const char *s, size_t len) {
    static const char key[] = "\"custom_id\"";
    const char *end = s + len, *p = s;
    for (; (size_t)(end - p) >= sizeof(key) - 1; p++)
        if (!memcmp(p, key, sizeof(key) - 1)) break;
    if ((size_t)(end - p) < sizeof(key) - 1) return NULL;
    p += sizeof(key) - 1;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if (p >= end || *p++ != ':') return NULL;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if (p >= end || *p != '"') return NULL;
    const char *q = p + 1;
    while (q < end && *q != '"')
        q += *q == '\\' && q + 1 < end ? 2 : 1;
    if (q >= end) return NULL;
    size_t n = (size_t)(q - p) + 1;
    if (cb_openai_has_nul(p, n) || cb_utf8_valid_prefix(p, n, NULL) != n) return NULL;
    cJSON *v = cJSON_ParseWithLength(p, n);
    char *id = cJSON_IsString(v) && v->valuestring[0] ? strdup(v->valuestring) : NULL;
    cJSON_Delete(v);
    return id;
}

/* One non-blank line. Returns -1 only when out of memory. */
static int parse_line(cb_batch_input *in, cb_batch_out *o, const cb_idset *done, cb_idset *seen, int32_t line,
                      const char *s, size_t len) {
    bool nul = cb_openai_has_nul(s, len);
    const char *broken = nul                                         ? "a string contains a NUL character (\\u0000)"
                         : cb_utf8_valid_prefix(s, len, NULL) != len ? "the line is not valid UTF-8"
                                                                     : NULL;
    cb_openai_error e = {0};
    cJSON *root = broken ? NULL : cb_openai_json_parse(s, len, &e); /* cJSON would cut a string at a NUL */
    if (!broken && !root && e.status >= 500) return -1;             /* out of memory: a rerun reads the line again */
    if (broken || !cJSON_IsObject(root)) {
        char *cid = salvage_custom_id(s, len);
        cJSON_Delete(root);
        in->refused++;
        cb_batch_out_error(o, line, cid, nul ? "invalid_request" : "invalid_json", "%s",
                           broken ? broken
                           : root ? "a line must be a JSON object"
                                  : "not valid JSON");
        free(cid);
        return 0;
    }
    char msg[256];
    const char *code = "";
    int rc = 0;
    cb_openai_kind kind = CB_OPENAI_COMPLETION;
    cJSON *cid = cJSON_GetObjectItemCaseSensitive(root, "custom_id");
    if (!cid || cJSON_IsNull(cid)) {
        code = "missing_custom_id";
        cb_set_err(msg, sizeof(msg), "'custom_id' is required");
    } else if (!cJSON_IsString(cid) || !cid->valuestring[0]) {
        code = "invalid_custom_id";
        cb_set_err(msg, sizeof(msg), "'custom_id' must be a non-empty string");
        cid = NULL;
    } else {
        int added = cb_idset_add(seen, cid->valuestring);
        if (added < 0) rc = -1;
        if (added == 0) {
            code = "duplicate_custom_id";
            cb_set_err(msg, sizeof(msg), "custom_id \"%.200s\" is already used by an earlier line", cid->valuestring);
        } else if (cb_idset_has(done, cid->valuestring)) {
            in->skipped++;
            code = NULL;
        } else {
            code = check_envelope(root, &kind, msg, sizeof(msg));
        }
    }
    if (rc == 0 && code && code[0]) {
        in->refused++;
        cb_batch_out_error(o, line, cid ? cid->valuestring : NULL, code, "%s", msg);
    } else if (rc == 0 && code) {
        rc = accept(in, o, root, cid->valuestring, kind, line);
    }
    cJSON_Delete(root);
    return rc;
}

/* The top-level custom_id of a line, malloc'd, or NULL (not JSON, no string id). */
static char *line_custom_id(const char *s, size_t len) {
    cJSON *root = cb_openai_has_nul(s, len) ? NULL : cJSON_ParseWithLength(s, len);
    const cJSON *cid = cJSON_GetObjectItemCaseSensitive(root, "custom_id");
    char *id = cJSON_IsString(cid) && cid->valuestring[0] ? strdup(cid->valuestring) : NULL;
    cJSON_Delete(root);
    return id;
}

int cb_batch_input_duplicates(FILE *f, char *err, size_t errlen) {
    cb_idset seen;
    cb_idset_init(&seen);
    char *buf = NULL;
    size_t cap = 0;
    bool too_long, complete;
    long n;
    int rc = 0;
    for (int32_t line = 1;
         rc == 0 && (n = cb_batch_read_line(f, &buf, &cap, CB_BATCH_LINE_MAX, &too_long, &complete)) >= 0; line++) {
        if (too_long) continue;
        char *id = line_custom_id(buf, (size_t)n);
        int added = id ? cb_idset_add(&seen, id) : 1;
        if (added < 0) {
            cb_set_err(err, errlen, "out of memory at line %d", line);
            rc = -1;
        } else if (added == 0) {
            cb_set_err(err, errlen,
                       "line %d: custom_id \"%.200s\" is used by an earlier line; each must be unique (the job runs "
                       "nothing until it is: its answers could not be told apart)",
                       line, id);
            rc = 1;
        }
        free(id);
    }
    if (rc == 0 && ferror(f)) {
        cb_set_err(err, errlen, "read error");
        rc = -1;
    }
    free(buf);
    cb_idset_free(&seen);
    if (rc != -1 && fseek(f, 0, SEEK_SET) != 0) {
        cb_set_err(err, errlen, "cannot read the input again from its start");
        rc = -1;
    }
    return rc;
}

static bool blank(const char *s) {
    for (; *s; s++)
        if (!isspace((unsigned char)*s)) return false;
    return true;
}

int cb_batch_input_read(FILE *f, const cb_idset *done, const cb_openai_defaults *defaults, cb_batch_out *o,
                        cb_batch_input *in, char *err, size_t errlen) {
    memset(in, 0, sizeof(*in));
    in->defaults = defaults;
    cb_idset seen;
    cb_idset_init(&seen);
    char *buf = NULL;
    size_t cap = 0;
    bool too_long, complete;
    long n;
    int rc = 0;
    for (int32_t line = 1; (n = cb_batch_read_line(f, &buf, &cap, CB_BATCH_LINE_MAX, &too_long, &complete)) >= 0;
         line++) {
        if (too_long) {
            in->lines++;
            in->refused++;
            cb_batch_out_error(o, line, NULL, "line_too_long", "longer than %u bytes", CB_BATCH_LINE_MAX);
            continue;
        }
        if (blank(buf)) continue;
        in->lines++;
        if (parse_line(in, o, done, &seen, line, buf, (size_t)n) != 0) {
            cb_set_err(err, errlen, "out of memory at line %d", line);
            rc = -1;
            break;
        }
        if (o->failed) {
            cb_set_err(err, errlen, "cannot write the error file");
            rc = -1;
            break;
        }
    }
    if (rc == 0 && ferror(f)) {
        cb_set_err(err, errlen, "read error");
        rc = -1;
    }
    free(buf);
    cb_idset_free(&seen);
    return rc;
}

void cb_batch_item_release(cb_batch_item *it) {
    cb_openai_request_free(&it->req);
    free(it->tokens);
    it->tokens = NULL;
}

void cb_batch_input_free(cb_batch_input *in) {
    for (size_t i = 0; i < in->n; i++) {
        cb_batch_item_release(in->items[i]);
        free(in->items[i]->custom_id);
        cb_buf_free(&in->items[i]->text);
        free(in->items[i]);
    }
    free(in->items);
    memset(in, 0, sizeof(*in));
}
