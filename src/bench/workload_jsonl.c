/* workload_jsonl.c — a benchmark workload from a JSONL file (see workload.h). */
#include "../util/buf.h"
#include "../util/util.h"
#include "workload.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LINE (16 << 20) /* one request's JSON: 16 MiB is far past any context */

/* Parses one line into it; returns NULL or the reason it is bad. */
static const char *parse_line(const char *line, cb_tokenize_fn fn, void *ctx, cb_work_item *it, bool *has_arrival) {
    cJSON *j = cJSON_Parse(line);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return "not a JSON object";
    }
    const char *bad = NULL;
    cJSON *prompt = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    cJSON *toks = cJSON_GetObjectItemCaseSensitive(j, "prompt_tokens");
    cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "max_tokens");
    cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "arrival_s");
    cJSON *pri = cJSON_GetObjectItemCaseSensitive(j, "priority");
    it->n_out = 128;
    if (mt) {
        if (!cJSON_IsNumber(mt) || mt->valuedouble < 1 || mt->valuedouble > 1 << 20)
            bad = "max_tokens must be >= 1";
        else
            it->n_out = (int32_t)mt->valuedouble;
    }
    if (!bad && arr) {
        if (!cJSON_IsNumber(arr) || !(arr->valuedouble >= 0 && arr->valuedouble < 1e12))
            bad = "arrival_s must be a number >= 0";
        else
            it->arrival_s = arr->valuedouble, *has_arrival = true;
    }
    if (!bad && pri) {
        if (!cJSON_IsNumber(pri) || !(pri->valuedouble >= -1e6 && pri->valuedouble <= 1e6))
            bad = "priority must be a number from -1000000 to 1000000";
        else
            it->priority = (int32_t)pri->valuedouble;
    }
    if (!bad && (prompt != NULL) == (toks != NULL)) bad = "give exactly one of prompt and prompt_tokens";
    if (!bad && prompt) {
        if (!cJSON_IsString(prompt) || !prompt->valuestring[0])
            bad = "prompt must be a non-empty string";
        else if (!(it->tokens = fn(ctx, prompt->valuestring, &it->n_in)))
            bad = "cannot tokenize the prompt";
    }
    if (!bad && toks) {
        int n = cJSON_GetArraySize(toks);
        if (!cJSON_IsArray(toks) || n < 1)
            bad = "prompt_tokens must be a non-empty array";
        else if (!(it->tokens = malloc(sizeof(int32_t) * (size_t)n)))
            bad = "out of memory";
        int k = 0;
        cJSON *t;
        if (!bad) {
            cJSON_ArrayForEach(t, toks) { /* one walk: cJSON_GetArrayItem(toks, k) is O(k) */
                if (!cJSON_IsNumber(t) || !(t->valuedouble >= 0 && t->valuedouble <= INT32_MAX)) {
                    bad = "prompt_tokens must hold token ids";
                    break;
                }
                it->tokens[k++] = (int32_t)t->valuedouble;
            }
        }
        it->n_in = n;
    }
    cJSON_Delete(j);
    return bad;
}

int cb_workload_load_jsonl(const char *path, cb_tokenize_fn fn, void *ctx, cb_workload *w, bool *has_arrivals,
                           char *err, size_t errlen) {
    memset(w, 0, sizeof(*w));
    *has_arrivals = false;
    FILE *f = fopen(path, "r");
    if (!f) {
        cb_set_err(err, errlen, "cannot read %s", path);
        return -1;
    }
    int rc = cb_workload_read_jsonl(f, path, fn, ctx, w, has_arrivals, err, errlen);
    fclose(f);
    return rc;
}

int cb_workload_read_jsonl(FILE *f, const char *path, cb_tokenize_fn fn, void *ctx, cb_workload *w, bool *has_arrivals,
                           char *err, size_t errlen) {
    memset(w, 0, sizeof(*w));
    *has_arrivals = false;
    const char *base = strrchr(path, '/');
    snprintf(w->name, sizeof(w->name), "%s", base ? base + 1 : path);
    char *line = NULL;
    size_t line_cap = 0;
    size_t cap = 0;
    int lineno = 0, rc = 0;
    ssize_t got;
    while ((got = getline(&line, &line_cap, f)) >= 0) {
        lineno++;
        size_t len = (size_t)got;
        if (memchr(line, '\0', len)) {
            cb_set_err(err, errlen, "%s:%d: a NUL byte in the line", path, lineno);
            rc = -1;
            break;
        }
        if ((size_t)got > MAX_LINE) {
            cb_set_err(err, errlen, "%s:%d: line longer than %d bytes", path, lineno, MAX_LINE);
            rc = -1;
            break;
        }
        if (strspn(line, " \t\r\n") == len) continue;
        if (!cb_grow((void **)&w->items, &cap, (size_t)w->n + 1, sizeof(*w->items), 64)) {
            cb_set_err(err, errlen, "out of memory");
            rc = -1;
            break;
        }
        cb_work_item *it = &w->items[w->n];
        memset(it, 0, sizeof(*it));
        it->session = -1;
        const char *bad = parse_line(line, fn, ctx, it, has_arrivals);
        if (bad) {
            free(it->tokens);
            cb_set_err(err, errlen, "%s:%d: %s", path, lineno, bad);
            rc = -1;
            break;
        }
        w->n++;
    }
    if (rc == 0 && ferror(f)) cb_set_err(err, errlen, "%s: read error", path), rc = -1;
    free(line);
    if (rc == 0 && w->n == 0) cb_set_err(err, errlen, "%s: no requests", path), rc = -1;
    if (rc != 0) cb_workload_free(w);
    return rc;
}
