/* dialect.h — what the API dialects that translate into a chat request share (src/anthropic,
 * src/responses): refusals that name the field, checks on the JSON they read, and the framing of
 * their named server-sent events. Pure: cJSON and text in. */
#ifndef CB_OPENAI_DIALECT_H
#define CB_OPENAI_DIALECT_H

#include "openai.h"

#include <cjson/cJSON.h>
#include <stdbool.h>

/* e as a 400 naming param (the message printf-style); returns -1. */
int cb_dialect_bad(cb_openai_error *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* e as a 503 (out of memory); returns -1. */
int cb_dialect_nomem(cb_openai_error *e);
/* Whether x is the string s. */
bool cb_dialect_is(const cJSON *x, const char *s);
/* Every key of obj is one of keys (NULL-terminated): 0; or -1 with a 400 "<where>'<key>' is not
 * supported" naming param (NULL: the key itself). */
int cb_dialect_only(const cJSON *obj, const char *const *keys, const char *param, const char *where,
                    cb_openai_error *e);
/* Appends the event "event: <type>\ndata: <json>\n\n" to *out (malloc'd, NULL at first); false when
 * out of memory (*out is then unchanged). */
bool cb_dialect_sse(char **out, const char *type, const char *json);

#endif
