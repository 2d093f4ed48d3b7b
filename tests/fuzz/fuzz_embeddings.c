/* libFuzzer: the embeddings request parser, and the response writer on the vectors a parse gave (their
 * token ids as floats): what the engine gets is consistent, and every response is JSON that reads back
 * to the same float32 values. */
#include "../../src/openai/embeddings.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int32_t dim = 1 + data[0] % 8;
    cb_openai_embd_request r;
    cb_openai_error e;
    int rc = cb_openai_embd_parse((const char *)data + 1, size - 1, dim, &r, &e);
    if (rc != 0) {
        if (e.status != 400 && e.status != 503) abort();
        cb_openai_embd_request_free(&r);
        return 0;
    }
    if (r.n_inputs < 1 || r.n_inputs > COBATCH_EMBD_MAX_INPUTS) abort();
    float *v = calloc((size_t)r.n_inputs * (size_t)dim, sizeof(float));
    for (int i = 0; v && i < r.n_inputs; i++) {
        const cb_openai_prompt *in = &r.inputs[i];
        if (!in->text == !in->tokens || (in->text && !in->text[0]) || (in->tokens && in->n_tokens < 1)) abort();
        for (int32_t k = 0; in->tokens && k < in->n_tokens; k++) {
            if (in->tokens[k] < 0) abort();
            v[(size_t)i * (size_t)dim + (size_t)(k % dim)] = (float)in->tokens[k] / 7.0f;
        }
    }
    char *j = v ? cb_openai_embd_response_json(r.model ? r.model : "m", v, r.n_inputs, dim, r.base64, 3) : NULL;
    if (j) {
        cJSON *root = cJSON_Parse(j);
        cJSON *data_ = root ? cJSON_GetObjectItem(root, "data") : NULL;
        if (!root || cJSON_GetArraySize(data_) != r.n_inputs) abort();
        cJSON *first = cJSON_GetObjectItem(cJSON_GetArrayItem(data_, 0), "embedding");
        if (!r.base64 && (cJSON_GetArraySize(first) != dim || (float)cJSON_GetArrayItem(first, 0)->valuedouble != v[0]))
            abort();
        cJSON *model = cJSON_GetObjectItem(root, "model");
        if (!cJSON_IsString(model) || strcmp(model->valuestring, r.model ? r.model : "m")) abort();
        cJSON_Delete(root);
    }
    free(j);
    free(v);
    cb_openai_embd_request_free(&r);
    return 0;
}
