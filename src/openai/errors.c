/* errors.c — the refusal every OpenAI-shaped parser writes: a 400 naming the field at fault. */
#include "openai.h"

#include <stdarg.h>
#include <stdio.h>

int cb_openai_bad(cb_openai_error *e, const char *param, const char *fmt, ...) {
    *e = (cb_openai_error){.status = 400, .type = "invalid_request_error"};
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    return -1;
}
