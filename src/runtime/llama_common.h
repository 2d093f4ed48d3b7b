/* llama_common.h — the C face of llama.cpp's `common` library (C++), the only C++ in cobatch:
 * what a request's structured output needs from it. Nothing here throws; every function may be
 * called from any thread. */
#ifndef CB_LLAMA_COMMON_H
#define CB_LLAMA_COMMON_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct llama_model;
typedef struct cb_chat_templates cb_chat_templates;

/* The chat template a model's messages are rendered with: override (Jinja text; NULL for the
 * model's own, tokenizer.chat_template) through common's Jinja engine, as vLLM and llama-server
 * --jinja render it. Returns NULL when the model has none and no override is given (err ""), or
 * when the template does not parse (the reason in err). Free with cb_common_templates_free. */
cb_chat_templates *cb_common_templates_new(const struct llama_model *model, const char *override, char *err,
                                           size_t errlen);
void cb_common_templates_free(cb_chat_templates *t);
/* The template's text. */
const char *cb_common_template_source(const cb_chat_templates *t);
/* Messages rendered with the template and the assistant's generation prompt after them. Returns a
 * malloc'd string, or NULL with the reason in err (the template raised an error, out of memory).
 * Thread-safe: the templates are only read. */
char *cb_common_render(const cb_chat_templates *t, const char *const *roles, const char *const *contents, size_t n,
                       char *err, size_t errlen);

/* A GBNF grammar (root rule "root") for the JSON values valid against schema, a JSON schema given
 * as JSON text, made by common's converter. Returns a malloc'd string, or NULL with the reason in
 * err (not JSON, a schema the converter cannot express, out of memory). */
char *cb_common_schema_to_grammar(const char *schema, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
