/* native.c — llama-server's POST /completion and /infill (see native.h): the fields its clients send,
 * each honoured or refused by name; its answer, stream and error shapes. */
#include "native.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the request --------------- */

/* Fields taken as they are into the completions request (llama-server's names are OpenAI's). */
static const char *const SAME[] = {
    "temperature", "top_k",  "top_p", "min_p", "presence_penalty", "frequency_penalty", "ignore_eos",
    "grammar",     "stream", "model", NULL};

/* Knobs accepted at the value that asks for nothing (llama-server's defaults; each would change the
 * output otherwise, and this server has none of them). */
static const struct {
    const char *key;
    double off;
} NEUTRAL[] = {{"typical_p", 1},      {"mirostat", 0},     {"dynatemp_range", 0}, {"xtc_probability", 0},
               {"dry_multiplier", 0}, {"top_n_sigma", -1}, {"min_keep", 0},       {"n_probs", 0},
               {"n_cmpl", 1},         {"id_slot", -1}};

/* Knobs of samplers that do nothing at their neutral values above, and of a context shift (never
 * made here: a prompt past the context is refused): any value is the same request. */
static const char *const INERT[] = {"dynatemp_exponent",  "xtc_threshold",         "dry_base",     "dry_allowed_length",
                                    "dry_penalty_last_n", "dry_sequence_breakers", "n_keep",       "n_discard",
                                    "mirostat_tau",       "mirostat_eta",          "cache_prompt", NULL};

/* llama-server's sampler names in the order this server's chain applies them (sampling.c): a list
 * must keep that order; one left out is off. */
static const char *const CHAIN[] = {"penalties", "dry", "top_n_sigma", "top_k",  "typ_p", "top_p",
                                    "min_p",     "xtc", "temperature", "infill", NULL};

static bool is_number(const cJSON *x, double v) { return cJSON_IsNumber(x) && x->valuedouble == v; }

/* o[k] = v, whatever o[k] was. */
static bool set_number(cJSON *o, const char *k, double v) {
    cJSON_DeleteItemFromObjectCaseSensitive(o, k);
    return cJSON_AddNumberToObject(o, k, v) != NULL;
}

/* samplers: which of the chain run (the others' parameters made neutral), and infill's flag in
 * *infill. 0, or -1 with e. */
static int samplers(const cJSON *list, cJSON *out, bool *infill, cb_openai_error *e) {
    bool on[10] = {false};
    int at = 0;
    const cJSON *x;
    if (!cJSON_IsArray(list)) return cb_openai_bad(e, "samplers", "'samplers' must be an array of sampler names");
    cJSON_ArrayForEach(x, list) {
        int k = 0;
        while (CHAIN[k] && !(cJSON_IsString(x) && !strcmp(x->valuestring, CHAIN[k])))
            k++;
        if (!CHAIN[k])
            return cb_openai_bad(e, "samplers", "'samplers': %s is not one this server runs (%s)",
                                 cJSON_IsString(x) ? x->valuestring : "a non-string",
                                 "penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature, infill");
        if (k < at || on[k])
            return cb_openai_bad(e, "samplers",
                                 "'samplers': this server applies them in the order penalties, "
                                 "top_k, top_p, min_p, temperature, infill (each once)");
        on[k] = true;
        at = k;
    }
    /* left out: off */
    bool ok = (on[0] || (set_number(out, "repetition_penalty", 1) && set_number(out, "presence_penalty", 0) &&
                         set_number(out, "frequency_penalty", 0))) &&
              (on[3] || set_number(out, "top_k", 0)) && (on[5] || set_number(out, "top_p", 1)) &&
              (on[6] || set_number(out, "min_p", 0)) && (on[8] || set_number(out, "temperature", 1));
    *infill = on[9];
    return ok ? 0 : cb_dialect_nomem(e);
}

/* logit_bias: [[id, bias | false], ...] or {"id": bias}; token texts are refused (name them by id). */
static int logit_bias(const cJSON *x, cJSON *out, cb_openai_error *e) {
    if (cJSON_IsObject(x)) return cb_json_add(out, "logit_bias", cJSON_Duplicate(x, true)) ? 0 : cb_dialect_nomem(e);
    if (!cJSON_IsArray(x)) return cb_openai_bad(e, "logit_bias", "'logit_bias' must be [[token id, bias], ...]");
    cJSON *o = cJSON_AddObjectToObject(out, "logit_bias");
    if (!o) return cb_dialect_nomem(e);
    const cJSON *p;
    cJSON_ArrayForEach(p, x) {
        const cJSON *id = cJSON_GetArrayItem(p, 0), *b = cJSON_GetArrayItem(p, 1);
        if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) != 2 || !cb_dialect_whole(id, 0, INT32_MAX) ||
            !(cJSON_IsNumber(b) || cJSON_IsFalse(b)))
            return cb_openai_bad(e, "logit_bias",
                                 "'logit_bias' pairs are [token id, bias or false] (token texts: name them by id)");
        char k[16];
        snprintf(k, sizeof(k), "%d", (int)id->valuedouble);
        if (cb_json_get(o, k)) cJSON_DeleteItemFromObjectCaseSensitive(o, k); /* a token named twice: the last */
        if (!cJSON_AddNumberToObject(o, k, cJSON_IsFalse(b) ? -100 : b->valuedouble)) return cb_dialect_nomem(e);
    }
    return 0;
}

/* n_predict (or its aliases): -1 until the end of generation or the context; 0 computes the prompt
 * only (a warm cache: answered with no content). *zero: it was 0. */
static int n_predict(const cJSON *in, cJSON *out, bool *zero, cb_openai_error *e) {
    const char *keys[] = {"n_predict", "max_tokens", "max_completion_tokens"};
    const cJSON *x = NULL;
    const char *which = NULL;
    for (int k = 0; k < 3; k++)
        if (cb_json_given(cb_json_get(in, keys[k]))) {
            if (x) return cb_openai_bad(e, keys[k], "give one of n_predict, max_tokens and max_completion_tokens");
            x = cb_json_get(in, keys[k]);
            which = keys[k];
        }
    *zero = false;
    if (!x) return cJSON_AddNumberToObject(out, "max_tokens", 1 << 24) ? 0 : cb_dialect_nomem(e);
    if (!cb_dialect_whole(x, -1, 1 << 24))
        return cb_openai_bad(e, which, "'%s' must be -1 (no limit) or a count", which);
    *zero = x->valuedouble == 0;
    bool ok = cJSON_AddNumberToObject(out, "max_tokens", x->valuedouble < 0 ? 1 << 24 : x->valuedouble) &&
              (!*zero || cJSON_AddBoolToObject(out, "echo", true));
    return ok ? 0 : cb_dialect_nomem(e);
}

/* The knobs that take one value here, the inert ones, and the ones this dialect reads itself. */
static int knobs(const cJSON *in, bool infill, cb_openai_error *e) {
    static const char *const OWN[] = {"prompt",
                                      "n_predict",
                                      "max_tokens",
                                      "max_completion_tokens",
                                      "seed",
                                      "stop",
                                      "logit_bias",
                                      "repeat_penalty",
                                      "repeat_last_n",
                                      "json_schema",
                                      "samplers",
                                      "t_max_predict_ms",
                                      "t_max_prompt_ms",
                                      "n_indent",
                                      "response_fields",
                                      "return_tokens",
                                      "timings_per_token",
                                      "post_sampling_probs",
                                      "return_progress",
                                      "lora",
                                      NULL},
                             *const FIM[] = {"input_prefix", "input_suffix", "input_extra", NULL};
    for (const cJSON *x = in->child; x; x = x->next) {
        bool known = false;
        for (int k = 0; SAME[k] && !known; k++)
            known = !strcmp(x->string, SAME[k]);
        for (int k = 0; OWN[k] && !known; k++)
            known = !strcmp(x->string, OWN[k]);
        for (int k = 0; infill && FIM[k] && !known; k++)
            known = !strcmp(x->string, FIM[k]);
        for (int k = 0; INERT[k] && !known; k++)
            known = !strcmp(x->string, INERT[k]);
        for (size_t k = 0; k < sizeof(NEUTRAL) / sizeof(NEUTRAL[0]) && !known; k++)
            if (!strcmp(x->string, NEUTRAL[k].key)) {
                if (cb_json_given(x) && !is_number(x, NEUTRAL[k].off))
                    return cb_openai_bad(e, x->string,
                                         "'%s' is not supported by this server (only %g, which asks for "
                                         "nothing)",
                                         x->string, NEUTRAL[k].off);
                known = true;
            }
        if (!known) return cb_openai_bad(e, x->string, "'%s' is not supported by this server", x->string);
    }
    static const char *const OFF[] = {"return_tokens", "timings_per_token", "post_sampling_probs", "return_progress",
                                      NULL};
    for (int k = 0; OFF[k]; k++)
        if (cb_json_given(cb_json_get(in, OFF[k])) && !cJSON_IsFalse(cb_json_get(in, OFF[k])))
            return cb_openai_bad(e, OFF[k], "'%s' is not supported by this server (only false)", OFF[k]);
    const cJSON *lora = cb_json_get(in, "lora");
    if (cb_json_given(lora) && !(cJSON_IsArray(lora) && cJSON_GetArraySize(lora) == 0))
        return cb_openai_bad(e, "lora", "'lora': this server serves no LoRA adapter");
    const cJSON *last = cb_json_get(in, "repeat_last_n");
    if (cb_json_given(last) && !is_number(last, 64))
        return cb_openai_bad(e, "repeat_last_n", "'repeat_last_n': penalties look back 64 tokens here (only 64)");
    return 0;
}

/* The settings a request ran with (llama-server's generation_settings, for its answer). */
static cJSON *settings(const cJSON *chat, bool infill_sampler) {
    cJSON *s = cJSON_CreateObject();
    static const char *const KEYS[] = {"temperature", "top_k", "top_p", "min_p", "seed", "stop", NULL};
    for (int k = 0; s && KEYS[k]; k++)
        if (cb_json_get(chat, KEYS[k])) cb_json_add(s, KEYS[k], cJSON_Duplicate(cb_json_get(chat, KEYS[k]), true));
    const cJSON *mt = cb_json_get(chat, "max_tokens");
    if (s) cJSON_AddNumberToObject(s, "n_predict", mt && mt->valuedouble < (1 << 24) ? mt->valuedouble : -1);
    if (s && cb_json_get(chat, "repetition_penalty"))
        cb_json_add(s, "repeat_penalty", cJSON_Duplicate(cb_json_get(chat, "repetition_penalty"), true));
    if (s) cJSON_AddBoolToObject(s, "infill_sampler", infill_sampler);
    return s;
}

/* root (/completion, or /infill with its prompt's tokens made) as a completions request. */
static int translate(const cJSON *in, const int32_t *tokens, int32_t n_tokens, bool infill, cJSON *out, cJSON *echo,
                     cb_openai_error *e) {
    if (!cJSON_IsObject(in)) return cb_openai_bad(e, "", "the body must be a JSON object");
    if (knobs(in, infill, e)) return -1;
    const cJSON *x;
    for (int k = 0; SAME[k]; k++)
        if (cb_json_given(x = cb_json_get(in, SAME[k])) && !cb_json_add(out, SAME[k], cJSON_Duplicate(x, true)))
            return cb_dialect_nomem(e);
    if (infill) {
        cJSON *ids = cJSON_CreateIntArray(tokens, n_tokens);
        if (!cb_json_add(out, "prompt", ids)) return cb_dialect_nomem(e);
    } else {
        x = cb_json_get(in, "prompt");
        bool ids = cJSON_IsArray(x) && cJSON_GetArraySize(x) > 0;
        for (const cJSON *t = ids ? x->child : NULL; t; t = t->next)
            ids = ids && cb_dialect_whole(t, 0, INT32_MAX);
        if (!cJSON_IsString(x) && !ids)
            return cb_openai_bad(e, "prompt",
                                 "'prompt' must be a string or an array of token ids (one prompt a "
                                 "request here)");
        if (!cb_json_add(out, "prompt", cJSON_Duplicate(x, true))) return cb_dialect_nomem(e);
    }
    bool zero = false, sampler_infill = false;
    if (n_predict(in, out, &zero, e)) return -1;
    if (zero && cJSON_IsTrue(cb_json_get(in, "stream")))
        return cb_openai_bad(e, "n_predict", "n_predict 0 computes the prompt only: send it without stream");
    if (cb_json_given(x = cb_json_get(in, "seed")) && !(cb_dialect_whole(x, -1, 4294967295.0)))
        return cb_openai_bad(e, "seed", "'seed' must be -1 (a fresh one) or an integer");
    if (cb_json_given(x) && x->valuedouble >= 0 && !cb_json_add(out, "seed", cJSON_Duplicate(x, true)))
        return cb_dialect_nomem(e);
    if (cb_json_given(x = cb_json_get(in, "stop")) && !cb_json_add(out, "stop", cJSON_Duplicate(x, true)))
        return cb_dialect_nomem(e);
    if (cb_json_given(x = cb_json_get(in, "repeat_penalty")) &&
        !cb_json_add(out, "repetition_penalty", cJSON_Duplicate(x, true)))
        return cb_dialect_nomem(e);
    if (cb_json_given(x = cb_json_get(in, "logit_bias")) && logit_bias(x, out, e)) return -1;
    if (cb_json_given(x = cb_json_get(in, "json_schema"))) {
        cJSON *rf = cJSON_AddObjectToObject(out, "response_format"),
              *js = rf ? cJSON_AddObjectToObject(rf, "json_schema") : NULL;
        if (!js || !cJSON_AddStringToObject(rf, "type", "json_schema") ||
            !cJSON_AddStringToObject(js, "name", "output") || !cb_json_add(js, "schema", cJSON_Duplicate(x, true)))
            return cb_dialect_nomem(e);
    }
    if (cb_json_given(x = cb_json_get(in, "samplers")) && samplers(x, out, &sampler_infill, e)) return -1;
    /* what the answer needs: the fields it keeps, the settings it ran with, whether it is to say nothing */
    const cJSON *fields = cb_json_get(in, "response_fields");
    if (cb_json_given(fields) && !cJSON_IsArray(fields))
        return cb_openai_bad(e, "response_fields", "'response_fields' must be an array of field names");
    bool ok = (!cb_json_given(fields) || cb_json_add(echo, "response_fields", cJSON_Duplicate(fields, true))) &&
              cb_json_add(echo, "generation_settings", settings(out, sampler_infill)) &&
              cJSON_AddBoolToObject(echo, "prompt_only", zero) &&
              cJSON_AddBoolToObject(echo, "infill_sampler", sampler_infill);
    return ok ? 0 : cb_dialect_nomem(e);
}

/* Numbers of the request the answer path does not read (checked here; their values read by
 * cb_native_adjust). */
static int limits(const cJSON *in, cJSON *echo, cb_openai_error *e) {
    const cJSON *indent = cb_json_get(in, "n_indent"), *t = cb_json_get(in, "t_max_predict_ms"),
                *tp = cb_json_get(in, "t_max_prompt_ms");
    if (cb_json_given(indent) && !cb_dialect_whole(indent, 0, 1 << 20))
        return cb_openai_bad(e, "n_indent", "'n_indent' must be a count of blanks, 0 or more");
    if (cb_json_given(t) && !cb_dialect_whole(t, -1, INT32_MAX))
        return cb_openai_bad(e, "t_max_predict_ms", "'t_max_predict_ms' must be a number of milliseconds");
    if (cb_json_given(tp) && !cb_dialect_whole(tp, -1, INT32_MAX))
        return cb_openai_bad(e, "t_max_prompt_ms", "'t_max_prompt_ms' must be a number of milliseconds");
    bool ok =
        cJSON_AddNumberToObject(echo, "n_indent", cb_json_given(indent) ? indent->valuedouble : 0) &&
        cJSON_AddNumberToObject(echo, "t_max_predict_ms", cb_json_given(t) && t->valuedouble > 0 ? t->valuedouble : 0);
    return ok ? 0 : cb_dialect_nomem(e);
}

static int to_completion(const cJSON *root, const int32_t *tokens, int32_t n, bool infill, cJSON **out, cJSON **echo,
                         cb_openai_error *e) {
    *out = cJSON_CreateObject();
    *echo = cJSON_CreateObject();
    if (!*out || !*echo) {
        cJSON_Delete(*out);
        cJSON_Delete(*echo);
        *out = *echo = NULL;
        return cb_dialect_nomem(e);
    }
    if (translate(root, tokens, n, infill, *out, *echo, e) == 0 && limits(root, *echo, e) == 0) return 0;
    cJSON_Delete(*out);
    cJSON_Delete(*echo);
    *out = *echo = NULL;
    return -1;
}

static int to_chat(const cJSON *root, bool count_only, cJSON **out, cJSON **echo, cb_openai_error *e) {
    (void)count_only;
    return to_completion(root, NULL, 0, false, out, echo, e);
}

int cb_native_to_completion(const cJSON *root, const int32_t *prompt, int32_t n_prompt, cJSON **out, cJSON **echo,
                            cb_openai_error *e) {
    return to_completion(root, prompt, n_prompt, true, out, echo, e);
}

int cb_native_infill_parts(const cJSON *root, struct cobatch_infill *parts, cb_openai_error *e) {
    memset(parts, 0, sizeof(*parts));
    const cJSON *pre = cb_json_get(root, "input_prefix"), *suf = cb_json_get(root, "input_suffix"),
                *prompt = cb_json_get(root, "prompt");
    const cJSON *extra = cb_json_get(root, "input_extra"), *c;
    if (!cJSON_IsObject(root)) return cb_openai_bad(e, "", "the body must be a JSON object");
    if ((cb_json_given(pre) && !cJSON_IsString(pre)) || (cb_json_given(suf) && !cJSON_IsString(suf)))
        return cb_openai_bad(e, cb_json_given(pre) && !cJSON_IsString(pre) ? "input_prefix" : "input_suffix",
                             "'input_prefix' and 'input_suffix' must be strings");
    if (cb_json_given(prompt) && !cJSON_IsString(prompt))
        return cb_openai_bad(e, "prompt", "'prompt' of an infill must be a string (the line being typed)");
    if (cb_json_given(extra) && !cJSON_IsArray(extra))
        return cb_openai_bad(e, "input_extra", "'input_extra' must be an array of {\"filename\", \"text\"}");
    size_t n = cb_json_given(extra) ? (size_t)cJSON_GetArraySize(extra) : 0;
    const char **names = calloc(n + 1, sizeof(char *)), **texts = calloc(n + 1, sizeof(char *));
    if (!names || !texts) {
        free(names);
        free(texts);
        return cb_dialect_nomem(e);
    }
    size_t i = 0;
    const cJSON *list = cb_json_given(extra) ? extra : NULL;
    cJSON_ArrayForEach(c, list) {
        const cJSON *t = cb_json_get(c, "text"), *f = cb_json_get(c, "filename");
        if (!cJSON_IsObject(c) || !cJSON_IsString(t) || (cb_json_given(f) && !cJSON_IsString(f))) {
            free(names);
            free(texts);
            return cb_openai_bad(e, "input_extra", "input_extra[%zu] must be {\"filename\": string, \"text\": string}",
                                 i);
        }
        names[i] = cb_json_given(f) ? f->valuestring : NULL;
        texts[i++] = t->valuestring;
    }
    *parts = (struct cobatch_infill){.prefix = cb_json_given(pre) ? pre->valuestring : "",
                                     .suffix = cb_json_given(suf) ? suf->valuestring : "",
                                     .prompt = cb_json_given(prompt) ? prompt->valuestring : "",
                                     .extra_names = names,
                                     .extra_texts = texts,
                                     .n_extra = n};
    const cJSON *np = cb_json_get(root, "n_predict");
    parts->max_tokens =
        cJSON_IsNumber(np) && np->valuedouble > 0 && np->valuedouble < INT32_MAX ? (int32_t)np->valuedouble : 0;
    return 0;
}

void cb_native_infill_free(struct cobatch_infill *parts) {
    free((void *)parts->extra_names);
    free((void *)parts->extra_texts);
    memset(parts, 0, sizeof(*parts));
}

/* ---------------------------------------------------------------- the answer ---------------- */

static void adjust(const cJSON *echo, struct cobatch_request_params *p) {
    p->sampling.infill = cJSON_IsTrue(cb_json_get(echo, "infill_sampler"));
    const cJSON *indent = cb_json_get(echo, "n_indent"), *t = cb_json_get(echo, "t_max_predict_ms");
    p->min_indent = cJSON_IsNumber(indent) ? (int32_t)indent->valuedouble : 0;
    p->max_predict_ms = cJSON_IsNumber(t) ? (int32_t)t->valuedouble : 0;
}

/* llama-server's stop_type: eos, word (a stop string) or limit (n_predict, the context, n_indent,
 * t_max_predict_ms). */
static const char *stop_type(const cb_dialect_answer *a) {
    if (a->finish && !strcmp(a->finish, "length")) return "limit";
    return a->stop >= 0 ? "word" : "eos";
}

static cJSON *timings(const cb_dialect_answer *a) {
    cJSON *t = cJSON_CreateObject();
    int prompt_n = a->n_prompt - a->n_cached;
    if (t && cJSON_AddNumberToObject(t, "cache_n", a->n_cached) && cJSON_AddNumberToObject(t, "prompt_n", prompt_n) &&
        cJSON_AddNumberToObject(t, "prompt_ms", a->prompt_ms) &&
        cJSON_AddNumberToObject(t, "prompt_per_token_ms", prompt_n > 0 ? a->prompt_ms / prompt_n : 0) &&
        cJSON_AddNumberToObject(t, "prompt_per_second", a->prompt_ms > 0 ? 1e3 * prompt_n / a->prompt_ms : 0) &&
        cJSON_AddNumberToObject(t, "predicted_n", a->n_generated) &&
        cJSON_AddNumberToObject(t, "predicted_ms", a->predicted_ms) &&
        cJSON_AddNumberToObject(t, "predicted_per_token_ms",
                                a->n_generated > 0 ? a->predicted_ms / a->n_generated : 0) &&
        cJSON_AddNumberToObject(t, "predicted_per_second",
                                a->predicted_ms > 0 ? 1e3 * a->n_generated / a->predicted_ms : 0))
        return t;
    cJSON_Delete(t);
    return NULL;
}

/* Keeps only the fields named (llama-server's response_fields: "a/b" takes b out of a, as "b"). */
static cJSON *only_fields(cJSON *o, const cJSON *fields) {
    if (!o || !cJSON_IsArray(fields)) return o;
    cJSON *kept = cJSON_CreateObject();
    const cJSON *f;
    cJSON_ArrayForEach(f, fields) {
        if (!kept || !cJSON_IsString(f)) continue;
        const char *name = f->valuestring, *slash = strchr(name, '/');
        cJSON *v = NULL;
        if (slash) {
            char outer[64];
            snprintf(outer, sizeof(outer), "%.*s", (int)(slash - name < 63 ? slash - name : 63), name);
            v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, outer), slash + 1);
            name = slash + 1;
        } else {
            v = cJSON_GetObjectItemCaseSensitive(o, name);
        }
        if (v && !cb_json_get(kept, name))
            cb_json_add(kept, name, cJSON_Duplicate(v, true)); /* a missing one is left out */
    }
    cJSON_Delete(o);
    return kept;
}

/* The final object (content: the answer's, or "" in a stream's last event and for a prompt only). */
static cJSON *final_object(const cb_dialect_head *h, const cb_dialect_answer *a, const char *content) {
    cJSON *o = cJSON_CreateObject();
    bool ok =
        o && cJSON_AddNumberToObject(o, "index", 0) && cJSON_AddStringToObject(o, "content", content) &&
        cJSON_AddItemToObject(o, "tokens", cJSON_CreateArray()) && cJSON_AddNumberToObject(o, "id_slot", -1) &&
        cJSON_AddBoolToObject(o, "stop", true) && cJSON_AddStringToObject(o, "model", h->model) &&
        cJSON_AddNumberToObject(o, "tokens_predicted", a->n_generated) &&
        cJSON_AddNumberToObject(o, "tokens_evaluated", a->n_prompt) &&
        cb_json_add(o, "generation_settings", cJSON_Duplicate(cb_json_get(h->echo, "generation_settings"), true)) &&
        cJSON_AddBoolToObject(o, "has_new_line", strchr(a->text ? a->text : "", '\n') != NULL) &&
        cJSON_AddBoolToObject(o, "truncated", false) && cJSON_AddStringToObject(o, "stop_type", stop_type(a)) &&
        cJSON_AddStringToObject(o, "stopping_word", a->stop_sequence ? a->stop_sequence : "") &&
        cJSON_AddNumberToObject(o, "tokens_cached", a->n_cached) && cb_json_add(o, "timings", timings(a));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return only_fields(o, cb_json_get(h->echo, "response_fields"));
}

static char *print(cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

static char *answer_json(const cb_dialect_head *h, const cb_dialect_answer *a, int n) {
    (void)n;                                                        /* one choice */
    bool quiet = cJSON_IsTrue(cb_json_get(h->echo, "prompt_only")); /* n_predict 0: the prompt came back as echo */
    return print(final_object(h, a, quiet ? "" : a->text ? a->text : ""));
}

/* A stream: a data event a piece, the final object last (no [DONE]: llama-server sends none). */
typedef struct {
    int n_prompt;
    cb_dialect_head head; /* the request's: its model and echo outlive the stream */
} native_stream;

static char *data_event(cJSON *o) { return cb_dialect_data(print(o)); }

static char *stream_start(void *st, const cb_dialect_head *h, int n_prompt, int n_cached) {
    (void)n_cached;
    native_stream *s = st;
    s->n_prompt = n_prompt;
    s->head = *h;
    return strdup("");
}

static char *stream_text(void *st, int choice, const char *text, const char *finish, const cb_openai_logprobs *lp) {
    (void)choice, (void)finish, (void)lp; /* one choice; its end goes with the answer's */
    native_stream *s = st;
    if (!*text) return strdup("");
    cJSON *o = cJSON_CreateObject();
    bool ok = o && cJSON_AddNumberToObject(o, "index", 0) && cJSON_AddStringToObject(o, "content", text) &&
              cJSON_AddItemToObject(o, "tokens", cJSON_CreateArray()) && cJSON_AddBoolToObject(o, "stop", false) &&
              cJSON_AddNumberToObject(o, "id_slot", -1) && cJSON_AddNumberToObject(o, "tokens_evaluated", s->n_prompt);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return data_event(o);
}

static char *stream_none(void *st, int choice, const char *text) {
    (void)st, (void)choice, (void)text;
    return strdup("");
}

static char *stream_call(void *st, int choice, int k, const char *id, const char *name, const char *args, bool *late) {
    (void)st, (void)choice, (void)k, (void)id, (void)name, (void)args, (void)late;
    return strdup(""); /* a completion offers no tools */
}

static char *stream_end(void *st, const cb_dialect_answer *a) {
    return data_event(final_object(&((native_stream *)st)->head, a, ""));
}

static char *error_object(int status, const char *message) {
    cJSON *o = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(o, "error");
    bool ok = err && cJSON_AddNumberToObject(err, "code", status) && cJSON_AddStringToObject(err, "message", message) &&
              cJSON_AddStringToObject(err, "type",
                                      status == 404   ? "not_found_error"
                                      : status == 401 ? "authentication_error"
                                      : status >= 500 ? "server_error"
                                                      : "invalid_request_error");
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return print(o);
}

static char *error_json(const cb_openai_error *e) {
    char msg[sizeof(e->message) + sizeof(e->param) + 8];
    snprintf(msg, sizeof(msg), "%s", e->message);
    return error_object(e->status ? e->status : 400, msg);
}

static char *stream_error(void *st, int choice, int status, const char *type, const char *message) {
    (void)st, (void)choice, (void)type; /* its type follows the status */
    return cb_dialect_data(error_object(status, message));
}

static void stream_free(void *st) { (void)st; }

const cb_dialect cb_native_dialect = {.id_prefix = "cmpl-",
                                      .ping = ":\n\n",
                                      .stream_type = "text/event-stream",
                                      .completion = true,
                                      .to_chat = to_chat,
                                      .adjust = adjust,
                                      .error_json = error_json,
                                      .answer_json = answer_json,
                                      .stream_size = sizeof(native_stream),
                                      .stream_start = stream_start,
                                      .stream_reasoning = stream_none,
                                      .stream_text = stream_text,
                                      .stream_call = stream_call,
                                      .stream_end = stream_end,
                                      .stream_error = stream_error,
                                      .stream_free = stream_free};
