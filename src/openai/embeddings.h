/* embeddings.h — OpenAI's embeddings request and response (POST /v1/embeddings): a body into inputs
 * for cobatch_embed, the vectors into the response (floats, or base64 as the SDKs ask by default).
 * Pure: no engine, no sockets. */
#ifndef CB_OPENAI_EMBEDDINGS_H
#define CB_OPENAI_EMBEDDINGS_H

#include "openai.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A parsed embeddings request. Owns its inputs. */
typedef struct {
    cb_openai_prompt *inputs; /* (n_inputs) a text, or token ids, each */
    int n_inputs;
    bool base64; /* encoding_format "base64": each vector's float32 bytes, little-endian, in base64 */
    char *model; /* as the client named it, or NULL */
} cb_openai_embd_request;

/* Parses an embeddings body of len bytes for a model whose vectors have n_embd floats: `input` (a
 * string, a list of strings, a list of token ids, or a list of lists of token ids; 1 to
 * COBATCH_EMBD_MAX_INPUTS inputs, none empty), `model` (any name), `encoding_format` ("float", the
 * default, or "base64"), `dimensions` (only n_embd, which asks for nothing: cutting the vectors of a
 * model not trained for it would give worse ones, not shorter good ones), `user` (a hint); a field
 * sent as null asks for nothing; any other field is refused by name. Returns 0 and fills r, or -1 and
 * fills e (400 naming the field; 503 when memory ran out); r is valid until
 * cb_openai_embd_request_free either way. A body whose strings hold a NUL is refused. */
int cb_openai_embd_parse(const char *body, size_t len, int32_t n_embd, cb_openai_embd_request *r, cb_openai_error *e);
/* The same for a body already parsed; root is only read. */
struct cJSON;
int cb_openai_embd_parse_json(const struct cJSON *root, int32_t n_embd, cb_openai_embd_request *r, cb_openai_error *e);
void cb_openai_embd_request_free(cb_openai_embd_request *r);

/* The response to n_inputs vectors of n_embd floats (input i's at v + i * n_embd):
 * {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...] or "base64"}],
 *  "model": model, "usage": {"prompt_tokens": n, "total_tokens": n}}. Floats are written with the
 * digits that read back as the same float32. malloc'd; NULL when out of memory. */
char *cb_openai_embd_response_json(const char *model, const float *v, int n_inputs, int32_t n_embd, bool base64,
                                   int prompt_tokens);

/* base64 (RFC 4648, padded) of n bytes into out, which holds 4 * ((n + 2) / 3) + 1 bytes; returns the
 * length written (a NUL follows). */
size_t cb_openai_base64(const unsigned char *p, size_t n, char *out);

#endif
