/* native.h — llama-server's native API (POST /completion and /infill: its field names, its answer
 * and stream shapes) as a dialect that translates into an OpenAI completions request, for the clients
 * written against it: editors' code completion (llama.vim, llama.vscode, Continue, Tabby). */
#ifndef CB_NATIVE_H
#define CB_NATIVE_H

#include "../openai/dialect.h"

#include <cobatch.h>
#include <cjson/cJSON.h>

/* POST /completion (and, with its prompt already made, /infill). */
extern const cb_dialect cb_native_dialect;

/* An /infill body's parts (input_prefix, input_suffix, input_extra, prompt): pointers into root, the
 * extra chunks' arrays malloc'd (cb_native_infill_free). 0, or -1 with e (400 naming the field). */
int cb_native_infill_parts(const cJSON *root, struct cobatch_infill *parts, cb_openai_error *e);
void cb_native_infill_free(struct cobatch_infill *parts);

/* An /infill body as the completions request it asks for, its prompt the tokens given (the parts
 * assembled): the chat-less translation of cb_native_dialect with prompt replaced. */
int cb_native_to_completion(const cJSON *root, const int32_t *prompt, int32_t n_prompt, cJSON **out, cJSON **echo,
                            cb_openai_error *e);

#endif
