/* routes.c — the endpoint table and the API key check (see routes.h). */
#include "routes.h"

#include <string.h>
#include <strings.h>

static const cb_srv_route ROUTES[] = {
    {"/health", false, false, R_HEALTH},
    {"/metrics", false, false, R_METRICS},
    {"/v1/models", false, true, R_MODELS},
    {"/v1/completions", true, true, R_COMPLETIONS},
    {"/v1/chat/completions", true, true, R_CHAT},
    {"/tokenize", true, true, R_TOKENIZE},
    {"/detokenize", true, true, R_DETOKENIZE},
    {"/tokenizer_info", false, true, R_TOKENIZER_INFO},
    {"/model_info", false, true, R_MODEL_INFO},
    {"/server_info", false, true, R_MODEL_INFO},
    {"/v1/messages", true, true, R_MESSAGES},
    {"/v1/messages/count_tokens", true, true, R_COUNT_TOKENS},
    {"/v1/responses", true, true, R_RESPONSES},
    {"/v1/responses/input_tokens", true, true, R_INPUT_TOKENS},
    {"/", false, false, R_WEBUI},
    {"/index.html", false, false, R_WEBUI},
    {"/v1/embeddings", true, true, R_EMBEDDINGS},
    /* the paths clients' configurations assume (a base URL without /v1, llama-server's own) */
    {"/v1/health", false, false, R_HEALTH},
    {"/chat/completions", true, true, R_CHAT},
    {"/completions", true, true, R_COMPLETIONS},
    {"/embeddings", true, true, R_EMBEDDINGS},
    {"/models", false, true, R_MODELS},
    {"/props", false, true, R_PROPS},
    {"/apply-template", true, true, R_APPLY_TEMPLATE},
    {"/completion", true, true, R_NATIVE_COMPLETION},
    {"/infill", true, true, R_INFILL},
    {"/api/version", false, false, R_OLLAMA_VERSION},
    {"/api/tags", false, true, R_OLLAMA_TAGS},
    {"/api/ps", false, true, R_OLLAMA_PS},
    {"/api/show", true, true, R_OLLAMA_SHOW},
    {"/api/chat", true, true, R_OLLAMA_CHAT},
    {"/api/generate", true, true, R_OLLAMA_GENERATE},
    {"/api/embed", true, true, R_OLLAMA_EMBED},
    {"/api/embeddings", true, true, R_OLLAMA_EMBEDDINGS},
};

const cb_srv_route *cb_srv_route_find(const char *target) {
    size_t plen = strcspn(target, "?");
    for (size_t i = 0; i < sizeof(ROUTES) / sizeof(ROUTES[0]); i++)
        if (strlen(ROUTES[i].path) == plen && !strncmp(target, ROUTES[i].path, plen)) return &ROUTES[i];
    return NULL;
}

/* Every byte of the given value is looked at whatever the key: the time tells nothing of where a
 * guess went wrong. */
static bool same_secret(const char *given, const char *key) {
    size_t ng = strlen(given), nk = strlen(key);
    unsigned char d = ng != nk;
    for (size_t i = 0; i < ng; i++)
        d |= (unsigned char)given[i] ^ (unsigned char)(i < nk ? key[i] : 0);
    return d == 0;
}

bool cb_srv_authorized(const char *api_key, const char *h) {
    if (!api_key) return true;
    if (!h || strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t')) return false;
    h += 6;
    while (*h == ' ' || *h == '\t')
        h++;
    return same_secret(h, api_key);
}

bool cb_srv_key_given(const char *api_key, const char *value) {
    if (!api_key) return true;
    return value && same_secret(value, api_key);
}
