#include "request.h"

#include <stdlib.h>
#include <string.h>

cb_request *cb_request_new(int64_t id, const int32_t *prompt, int32_t n_prompt, int32_t max_tokens) {
    if (n_prompt < 1 || max_tokens < 1 || (int64_t)n_prompt + max_tokens > INT32_MAX) return NULL;
    cb_request *r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    r->cap = n_prompt + max_tokens;
    r->tokens = malloc(sizeof(int32_t) * (size_t)r->cap);
    if (!r->tokens) {
        free(r);
        return NULL;
    }
    if (prompt) memcpy(r->tokens, prompt, sizeof(int32_t) * (size_t)n_prompt);
    r->id = id;
    r->n_prompt = n_prompt;
    r->max_tokens = max_tokens;
    r->seq_id = -1;
    r->state = CB_WAITING;
    return r;
}

void cb_request_free(cb_request *r) {
    if (!r) return;
    free(r->swap.data);
    free(r->tokens);
    free(r);
}

bool cb_request_append(cb_request *r, int32_t token) {
    if (r->n_generated >= r->max_tokens) return false;
    r->tokens[r->n_prompt + r->n_generated++] = token;
    return true;
}
