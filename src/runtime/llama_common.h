/* llama_common.h — the C face of llama.cpp's `common` library (C++), the only C++ in cobatch:
 * what a request's structured output needs from it. Nothing here throws; every function may be
 * called from any thread. */
#ifndef CB_LLAMA_COMMON_H
#define CB_LLAMA_COMMON_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A GBNF grammar (root rule "root") for the JSON values valid against schema, a JSON schema given
 * as JSON text, made by common's converter. Returns a malloc'd string, or NULL with the reason in
 * err (not JSON, a schema the converter cannot express, out of memory). */
char *cb_common_schema_to_grammar(const char *schema, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
