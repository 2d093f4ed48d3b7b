/* libFuzzer: the OpenAI request parser (completions and chat), and the allocation-free JSON check
 * that tells a parse that ran out of memory from bad JSON. First byte: which API. */
#include "../../src/openai/openai.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    cb_openai_kind kind = data[0] & 1 ? CB_OPENAI_CHAT : CB_OPENAI_COMPLETION;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    cb_openai_request r;
    cb_openai_error e;
    int rc = cb_openai_parse(kind, NULL, body, len, &r, &e);
    if (rc == 0) { /* what the engine gets is consistent */
        const struct cobatch_request_params *p = &r.params;
        int given = (p->prompt != NULL) + (p->prompt_tokens != NULL) + (p->messages != NULL);
        if (given != 1 || p->max_tokens < 0 || (p->max_tokens == 0 && !r.echo) || p->n_stop > CB_OPENAI_MAX_STOP)
            abort();
        if (kind == CB_OPENAI_COMPLETION && (r.n_prompts < 1 || r.n_prompts * r.n > CB_OPENAI_MAX_CHOICES)) abort();
        for (int i = 0; i < r.n_prompts; i++)
            if (!r.prompts[i].text == !r.prompts[i].tokens || (r.prompts[i].text && !r.prompts[i].text[0])) abort();
        if (p->top_logprobs < 0 || p->top_logprobs > COBATCH_MAX_LOGPROBS || (p->prompt_logprobs && !p->logprobs))
            abort();
        if (r.json_schema && r.grammar) abort();
        for (size_t i = 0; i < p->n_messages; i++)
            if (!p->messages[i].role || !p->messages[i].content) abort();
        for (size_t i = 0; i < p->n_stop; i++)
            if (!p->stop[i]) abort();
        if (p->prompt && !p->prompt[0]) abort();
    } else if (e.status != 400 && e.status != 503) {
        abort();
    }
    cb_openai_request_free(&r);
    /* the syntax check agrees with cJSON: well-formed text that cJSON refuses would be answered
     * "out of memory" instead of 400 */
    if (cb_openai_json_well_formed(body, len) && !cb_openai_has_nul(body, len)) {
        cJSON *root = cJSON_ParseWithLength(body, len);
        if (!root) abort();
        cJSON_Delete(root);
    }
    return 0;
}
