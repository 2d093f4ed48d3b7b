/* routes.h — which endpoint a request is for and whether it may use it: pure, so that the fuzzer
 * drives the server's request handling without sockets or a model. */
#ifndef CB_ROUTES_H
#define CB_ROUTES_H

#include <stdbool.h>

typedef enum {
    R_HEALTH,
    R_METRICS,
    R_MODELS,
    R_MODEL_INFO,
    R_COMPLETIONS,
    R_CHAT,
    R_TOKENIZE,
    R_DETOKENIZE,
    R_TOKENIZER_INFO,
    R_MESSAGES,
    R_COUNT_TOKENS,
    R_RESPONSES,
    R_INPUT_TOKENS,
    R_EMBEDDINGS,
    R_PROPS,             /* llama-server's GET /props: the model, its context, the template */
    R_APPLY_TEMPLATE,    /* llama-server's POST /apply-template: a chat's rendered prompt */
    R_NATIVE_COMPLETION, /* llama-server's POST /completion */
    R_INFILL,            /* llama-server's POST /infill (code completion) */
    R_OLLAMA_VERSION,    /* Ollama's API: GET /api/version, /api/tags, /api/ps, POST /api/show, */
    R_OLLAMA_TAGS,       /* /api/chat, /api/generate, /api/embed, /api/embeddings */
    R_OLLAMA_PS,
    R_OLLAMA_SHOW,
    R_OLLAMA_CHAT,
    R_OLLAMA_GENERATE,
    R_OLLAMA_EMBED,
    R_OLLAMA_EMBEDDINGS,
    R_WEBUI /* the chat page: public, as /health (the API calls it makes need the key) */
} cb_srv_route_id;

typedef struct {
    const char *path;
    bool post; /* POST (else GET) */
    bool auth; /* needs the API key when one is set */
    cb_srv_route_id id;
} cb_srv_route;

/* The route of target's path (the query is ignored), or NULL. */
const cb_srv_route *cb_srv_route_find(const char *target);

/* Whether an Authorization header value carries the key: "Bearer" (any case), blanks, the key.
 * Compared in time that depends on the given value's length only, never on where it differs. A NULL
 * key lets everything through. */
bool cb_srv_authorized(const char *api_key, const char *authorization);
/* The same for a header that holds the key alone (Anthropic's x-api-key); NULL given: false. */
bool cb_srv_key_given(const char *api_key, const char *value);

#endif
