/* ollama.h — Ollama's API as dialects that translate: /api/chat and /api/generate into a chat
 * request (NDJSON streams, Ollama's answer shapes, options mapped to our fields and the rest refused by
 * name), /api/embed and /api/embeddings into an embeddings request; and the answers of the endpoints
 * that describe the model (/api/version, /api/tags, /api/show, /api/ps). */
#ifndef CB_OLLAMA_H
#define CB_OLLAMA_H

#include "../openai/dialect.h"

#include <cjson/cJSON.h>
#include <stdint.h>

extern const cb_dialect cb_ollama_chat_dialect;       /* POST /api/chat */
extern const cb_dialect cb_ollama_generate_dialect;   /* POST /api/generate */
extern const cb_dialect cb_ollama_embed_dialect;      /* POST /api/embed */
extern const cb_dialect cb_ollama_embeddings_dialect; /* POST /api/embeddings (the older one: one prompt) */

/* The version this server answers /api/version with: that of Ollama whose API it speaks. */
#define CB_OLLAMA_VERSION "0.12.0"

/* What the model endpoints say of the model. */
typedef struct {
    const char *name;   /* served name ("NAME:latest" in the lists) */
    const char *path;   /* the GGUF file */
    long long size;     /* its bytes */
    const char *family; /* general.architecture ("llama") */
    const char *params; /* "135M" */
    const char *quant;  /* "Q4_1" */
    const char *chat_template;
    int ctx; /* the context a request may use */
    bool embeddings, tools, thinking;
    long long modified; /* the file's mtime, seconds */
} cb_ollama_model;

/* GET /api/tags and /api/ps (ps: the model is always loaded). */
char *cb_ollama_tags_json(const cb_ollama_model *m, bool ps);
/* POST /api/show: the model, whatever name the body gives (one model is served). */
char *cb_ollama_show_json(const cb_ollama_model *m);

#endif
