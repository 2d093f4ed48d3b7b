/* infill.c — a code-infill request's prompt (cobatch_infill_tokens): its parts tokenized as plain
 * text, then assembled by core/fim.c as llama-server's /infill assembles them. */
#include "engine_internal.h"
#include "../core/fim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The budget the prefix and suffix share: llama-server's default --batch-size, so that the same
 * request takes the same part of a long file as it does there. */
#define CB_FIM_BATCH 2048

static void fim_refuse(struct cobatch_error *err, int code, const char *param, const char *msg) {
    if (!err) return;
    err->code = code;
    err->param = param;
    snprintf(err->message, sizeof(err->message), "%s", msg);
}

/* text as tokens (plain text; NULL: none) into *t; false when memory runs out. */
static bool plain(const cb_model *m, const char *text, cb_tokens *t, int32_t **owned) {
    *t = (cb_tokens){NULL, 0};
    if (!text || !*text) return true;
    int32_t n = 0;
    int32_t *v = cb_model_tokenize(m, text, strlen(text), false, false, &n);
    if (!v) return false;
    *owned = v;
    *t = (cb_tokens){v, n};
    return true;
}

int32_t *cobatch_infill_tokens(const cobatch_engine *e, const struct cobatch_infill *in, int32_t *n,
                               struct cobatch_error *err) {
    cb_fim_vocab v = {.spm = false};
    cb_model_fim_vocab(&e->model, &v.pre, &v.suf, &v.mid, &v.rep, &v.sep, &v.bos, &v.add_bos);
    if (!cb_fim_can(&v)) {
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "the model %.120s has no fill-in-the-middle tokens (FIM prefix, suffix, middle): infill needs a "
                 "code model trained with them",
                 e->model.name);
        fim_refuse(err, COBATCH_ERR_INVALID, "model", msg);
        return NULL;
    }
    size_t k = in->n_extra;
    cb_tokens *files = calloc(k + 1, sizeof(*files)), *texts = calloc(k + 1, sizeof(*texts));
    int32_t **owned = calloc(2 * k + 7, sizeof(*owned)); /* every array tokenized here, to free */
    bool ok = files && texts && owned;
    size_t o = 0;
    cb_fim_request r = {.files = files,
                        .texts = texts,
                        .n_extra = (int32_t)k,
                        .n_batch = CB_FIM_BATCH,
                        .n_predict = in->max_tokens,
                        .n_ctx = e->n_ctx_seq};
    ok = ok && plain(&e->model, in->prefix, &r.prefix, &owned[o++]) &&
         plain(&e->model, in->suffix, &r.suffix, &owned[o++]) && plain(&e->model, in->prompt, &r.prompt, &owned[o++]) &&
         plain(&e->model, "myproject\n", &r.repo, &owned[o++]) &&
         plain(&e->model, "\n\n--- snippet ---\n\n", &r.snippet, &owned[o++]) &&
         plain(&e->model, "filename\n", &r.cur_file, &owned[o++]);
    for (size_t i = 0; ok && i < k; i++) {
        const char *name = in->extra_names && in->extra_names[i] ? in->extra_names[i] : "tmp";
        size_t len = strlen(name);
        char *line = malloc(len + 2);
        ok = line != NULL;
        if (ok) {
            memcpy(line, name, len);
            memcpy(line + len, "\n", 2);
            ok = plain(&e->model, line, &files[i], &owned[o++]) &&
                 plain(&e->model, in->extra_texts[i], &texts[i], &owned[o++]);
        }
        free(line);
    }
    int32_t *t = ok ? cb_fim_assemble(&v, &r, n) : NULL;
    for (size_t i = 0; owned && i < o; i++)
        free(owned[i]);
    free(owned);
    free(files);
    free(texts);
    if (!t) fim_refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory");
    return t;
}
