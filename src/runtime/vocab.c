/* vocab.c — text to tokens and back for a loaded model: tokenizing in pieces (special-token texts
 * bounded per piece), a chat rendered with its template into tokens, pieces and detokenizing. */
#include "model.h"
#include "llama_common.h"
#include "../util/buf.h"
#include "../util/util.h"

#include <llama.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Texts longer than this with special tokens parsed are tokenized in pieces of at most
 * CB_TOKENIZE_SPECIALS special-token texts. */
#define CB_TOKENIZE_PIECE_BYTES 16384
#define CB_TOKENIZE_SPECIALS 64

/* Where the piece of text[start, len) ends: right after its CB_TOKENIZE_SPECIALS-th special-token
 * text that may end a piece (leftmost, longest matches), or at len. */
static size_t piece_end(const cb_model *m, const char *text, size_t start, size_t len) {
    int32_t seen = 0;
    for (size_t i = start; i < len;) {
        unsigned char b = (unsigned char)text[i];
        int32_t hit = -1;
        for (int32_t k = m->first[b]; k < m->first[b + 1] && hit < 0; k++)
            if ((size_t)m->special_len[k] <= len - i && !memcmp(text + i, m->special[k], (size_t)m->special_len[k]))
                hit = k;
        if (hit < 0) {
            i++;
            continue;
        }
        i += (size_t)m->special_len[hit];
        if (m->special_cut[hit] && ++seen == CB_TOKENIZE_SPECIALS) return i;
    }
    return len;
}

int32_t cb_model_tokenize_into(const cb_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                               int32_t *out, int32_t max) {
    if (len > INT32_MAX / 2) return INT32_MIN;
    bool pieces = parse_special && len > CB_TOKENIZE_PIECE_BYTES && m->special &&
                  !(add_special && llama_vocab_get_add_eos(m->vocab)); /* an added eos belongs to the last piece */
    if (!pieces) return llama_tokenize(m->vocab, text, (int32_t)len, out, max, add_special, parse_special);
    int32_t n = 0;
    bool short_of_room = false;
    for (size_t start = 0; start < len;) {
        size_t end = piece_end(m, text, start, len);
        int32_t k = llama_tokenize(m->vocab, text + start, (int32_t)(end - start), short_of_room ? NULL : out + n,
                                   short_of_room ? 0 : max - n, add_special && start == 0, true);
        if (k == INT32_MIN) return INT32_MIN;
        if (k < 0) { /* counted, not written: from here on only the size needed */
            short_of_room = true;
            k = -k;
        }
        if (n > INT32_MAX - k) return INT32_MIN;
        n += k;
        start = end;
    }
    return short_of_room ? -n : n;
}

/* Token ids by their texts' first byte, then longest first. */
static int by_first_then_longest(const void *a, const void *b, void *arg) {
    const cb_model *m = arg;
    const char *x = llama_vocab_get_text(m->vocab, *(const int32_t *)a),
               *y = llama_vocab_get_text(m->vocab, *(const int32_t *)b);
    unsigned char fx = (unsigned char)x[0], fy = (unsigned char)y[0];
    if (fx != fy) return fx < fy ? -1 : 1;
    size_t lx = strlen(x), ly = strlen(y);
    return lx == ly ? 0 : lx > ly ? -1 : 1;
}

#define LOOKED_FOR (LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_USER_DEFINED | LLAMA_TOKEN_ATTR_UNKNOWN)

/* The special-token texts, indexed for piece_end and for defusing. Returns false when out of memory. */
bool cb_model_index_specials(cb_model *m) {
    int32_t n = 0;
    for (int32_t t = 0; t < m->n_vocab; t++) {
        const char *s = llama_vocab_get_text(m->vocab, t);
        n += (llama_vocab_get_attr(m->vocab, t) & LOOKED_FOR) && s && s[0];
    }
    if (n == 0) return true;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n), *len = malloc(sizeof(int32_t) * (size_t)n);
    const char **text = malloc(sizeof(char *) * (size_t)n);
    bool *cut = malloc(sizeof(bool) * (size_t)n), *ctl = malloc(sizeof(bool) * (size_t)n);
    if (!ids || !len || !text || !cut || !ctl) {
        free(ids), free(len), free(text), free(cut), free(ctl);
        return false;
    }
    for (int32_t t = 0, k = 0; t < m->n_vocab; t++) {
        const char *s = llama_vocab_get_text(m->vocab, t);
        if ((llama_vocab_get_attr(m->vocab, t) & LOOKED_FOR) && s && s[0]) ids[k++] = t;
    }
    m->special = NULL; /* by_first_then_longest reads texts by token id while sorting */
    qsort_r(ids, (size_t)n, sizeof(int32_t), by_first_then_longest, m);
    for (int32_t i = 0; i < n; i++) {
        enum llama_token_attr a = llama_vocab_get_attr(m->vocab, ids[i]);
        text[i] = llama_vocab_get_text(m->vocab, ids[i]);
        len[i] = (int32_t)strlen(text[i]);
        cut[i] = !(a & LLAMA_TOKEN_ATTR_RSTRIP);
        ctl[i] = (a & (LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_UNKNOWN)) != 0;
    }
    free(ids);
    m->special = text;
    m->special_len = len;
    m->special_cut = cut;
    m->special_control = ctl;
    m->n_special = n;
    for (int b = 0, i = 0; b <= 256; b++) { /* first[b]: the first text starting with a byte >= b */
        while (i < n && (unsigned char)text[i][0] < b)
            i++;
        m->first[b] = i;
    }
    return true;
}

int32_t *cb_model_tokenize(const cb_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                           int32_t *n_out) {
    int32_t cap = (int32_t)(len < 1000000 ? len + 8 : 1000008);
    int32_t *t = malloc(sizeof(int32_t) * (size_t)cap);
    if (!t) return NULL;
    int32_t n = cb_model_tokenize_into(m, text, len, add_special, parse_special, t, cap);
    if (n < 0 && n != INT32_MIN) {
        int32_t *t2 = realloc(t, sizeof(int32_t) * (size_t)-n);
        if (!t2) {
            free(t);
            return NULL;
        }
        t = t2;
        n = cb_model_tokenize_into(m, text, len, add_special, parse_special, t, -n);
    }
    if (n < 0) {
        free(t);
        return NULL;
    }
    *n_out = n;
    return t;
}

/* The template applied to these messages (the Jinja one, else the built-in, which knows no tools):
 * 0 with out->prompt set (and with tools, the rest of out), or -1 with the reason in err. */
static int render(const cb_model *m, const cb_common_msg *msgs, size_t n, const cb_common_tools *tools,
                  const cb_common_reasoning *rs, const cb_common_defuse *d, cb_common_rendered *out, char *err,
                  size_t errlen) {
    memset(out, 0, sizeof(*out));
    if (m->tmpls) return cb_common_render(m->tmpls, msgs, n, tools, rs, d, out, err, errlen);
    if (tools && tools->tools && tools->choice != CB_TOOLS_NONE) {
        if (err && errlen)
            snprintf(err, errlen,
                     "the model has no chat template that offers tools; give the server one "
                     "(--chat-template)");
        return -1;
    }
    const char *tmpl = llama_model_chat_template(m->model, NULL);
    struct llama_chat_message *lm = calloc(n ? n : 1, sizeof(*lm));
    if (!lm) return -1;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        lm[i].role = msgs[i].role;
        lm[i].content = msgs[i].content;
        total += strlen(msgs[i].role) + strlen(msgs[i].content);
    }
    int32_t cap = total < INT32_MAX / 4 ? (int32_t)(total * 2 + 256) : -1;
    char *buf = cap > 0 ? malloc((size_t)cap) : NULL;
    int32_t len = buf ? llama_chat_apply_template(tmpl, lm, n, true, buf, cap) : -1;
    if (len >= cap) {
        char *b2 = realloc(buf, (size_t)len + 1);
        if (b2) {
            buf = b2;
            len = llama_chat_apply_template(tmpl, lm, n, true, buf, len + 1);
        } else {
            len = -1;
        }
    }
    free(lm);
    if (len < 0) {
        free(buf);
        return -1;
    }
    buf[len] = '\0';
    out->prompt = buf;
    return 0;
}

/* Appends the tokens of text[0, len) to *v (cap grown as needed). Returns false on failure. */
static bool append_tokens(const cb_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                          int32_t **v, int32_t *n, size_t *cap) {
    if (len == 0 && !add_special) return true;
    int32_t k = 0;
    int32_t *t = cb_model_tokenize(m, text, len, add_special, parse_special, &k);
    if (!t) return false;
    if (!cb_grow((void **)v, cap, (size_t)*n + (size_t)k, sizeof(int32_t), 64)) {
        free(t);
        return false;
    }
    memcpy(*v + *n, t, sizeof(int32_t) * (size_t)k);
    *n += k;
    free(t);
    return true;
}

/* ---------------------------------------------------------------- defusing ------------------ */

/* A client's text that spells a control token's text becomes DEFUSE index DEFUSE (the index into the
 * model's special texts; n_special: the byte DEFUSE itself, so that every DEFUSE a client sent is a
 * mark too): llama_common.h's cb_common_defuse. DEL passes templates and JSON as it is (tojson and
 * nlohmann escape only bytes below 0x20 and, with ensure_ascii, above 0x7f). */
#define DEFUSE '\x7f'

/* The length of the control-token text (or DEFUSE) at s[0, n) and its index in *k; 0: none. */
static size_t control_at(const cb_model *m, const char *s, size_t n, int32_t *k) {
    unsigned char b = (unsigned char)s[0];
    if (b == (unsigned char)DEFUSE) {
        *k = m->n_special;
        return 1;
    }
    for (int32_t i = m->special ? m->first[b] : 0; m->special && i < m->first[b + 1]; i++)
        if (m->special_control[i] && (size_t)m->special_len[i] <= n &&
            !memcmp(s, m->special[i], (size_t)m->special_len[i])) {
            *k = i;
            return (size_t)m->special_len[i];
        }
    return 0;
}

/* The length of the mark at s[0, n) and its index in *k; 0: none (a DEFUSE a template wrote). */
static size_t mark_at(const cb_model *m, const char *s, size_t n, int32_t *k) {
    if (n < 3 || s[0] != DEFUSE) return 0;
    size_t i = 1;
    long long v = 0;
    while (i < n && i < 12 && s[i] >= '0' && s[i] <= '9')
        v = v * 10 + (s[i++] - '0');
    if (i == 1 || i >= n || s[i] != DEFUSE || v > m->n_special) return 0;
    *k = (int32_t)v;
    return i + 1;
}

static const char *mark_text(const cb_model *m, int32_t k) { return k == m->n_special ? "\x7f" : m->special[k]; }

/* cb_common_defuse's text (ctx: the model). */
static char *defuse_text(const void *ctx, const char *s, size_t n, bool *failed) {
    const cb_model *m = ctx;
    cb_buf out = {0};
    size_t from = 0;
    bool ok = true;
    for (size_t i = 0; i < n && ok;) {
        int32_t k;
        size_t l = control_at(m, s + i, n - i, &k);
        if (l == 0) {
            i++;
            continue;
        }
        ok = cb_buf_append(&out, s + from, i - from) && cb_buf_printf(&out, "%c%d%c", DEFUSE, (int)k, DEFUSE);
        from = i += l;
    }
    if (ok && from > 0) ok = cb_buf_append(&out, s + from, n - from);
    if (!ok) {
        cb_buf_free(&out);
        *failed = true;
        return NULL;
    }
    return from > 0 ? cb_buf_take(&out, NULL) : NULL;
}

/* text[0, len) with its marks back to the characters they stand for, malloc'd (*n its length). */
static char *unmarked(const cb_model *m, const char *text, size_t len, size_t *n) {
    cb_buf out = {0};
    size_t from = 0;
    bool ok = true;
    for (size_t i = 0; i < len && ok;) {
        int32_t k;
        size_t l = mark_at(m, text + i, len - i, &k);
        if (l == 0) {
            i++;
            continue;
        }
        const char *t = mark_text(m, k);
        ok = cb_buf_append(&out, text + from, i - from) && cb_buf_append(&out, t, strlen(t));
        from = i += l;
    }
    if (!ok || !cb_buf_append(&out, text + from, len - from)) {
        cb_buf_free(&out);
        return NULL;
    }
    return cb_buf_take(&out, n);
}

/* append_tokens for a rendering's text that may hold marks: each mark's characters are tokenized as
 * plain text, apart from the text around them (which parse_special says how to read). */
static bool append_marked(const cb_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                          int32_t **v, int32_t *n, size_t *cap) {
    if (!memchr(text, DEFUSE, len)) return append_tokens(m, text, len, add_special, parse_special, v, n, cap);
    if (!parse_special) {
        size_t pl = 0;
        char *plain = unmarked(m, text, len, &pl);
        bool ok = plain && append_tokens(m, plain, pl, add_special, false, v, n, cap);
        free(plain);
        return ok;
    }
    size_t from = 0;
    for (size_t i = 0; i < len;) {
        int32_t k;
        size_t l = mark_at(m, text + i, len - i, &k);
        if (l == 0) {
            i++;
            continue;
        }
        const char *t = mark_text(m, k);
        if (!append_tokens(m, text + from, i - from, add_special && from == 0, true, v, n, cap) ||
            !append_tokens(m, t, strlen(t), false, false, v, n, cap))
            return false;
        from = i += l;
    }
    return append_tokens(m, text + from, len - from, add_special && from == 0, true, v, n, cap);
}

/* Marks where message i's content goes in a rendering: a character no template adds and no
 * template changes, the index, another one. */
#define MARK '\x1e'

/* Walks the skeleton (the rendering around marks): template text up to a mark, the mark's content,
 * and so on, checking each piece against the real rendering. Fills *v with the template's text
 * tokenized with special tokens and the contents without. False when the pieces do not give the
 * real rendering (the template changed a content) or on allocation failure. */
static bool split_tokens(const cb_model *m, const char *skel, const char *real, const char *const *contents, size_t n,
                         int32_t **v, int32_t *nv) {
    size_t cap = 0;
    size_t at = 0;
    bool first = true;
    *nv = 0;
    for (const char *p = skel; *p;) {
        const char *q = strchr(p, MARK), *after = NULL;
        size_t idx = 0;
        if (q) {
            char *endp = NULL;
            idx = strtoul(q + 1, &endp, 10);
            if (endp == q + 1 || *endp != MARK || idx >= n) return false;
            after = endp + 1;
        }
        size_t lit = q ? (size_t)(q - p) : strlen(p);
        if (strncmp(real + at, p, lit) != 0 || !append_marked(m, p, lit, first, true, v, nv, &cap)) return false;
        at += lit;
        first = false;
        if (!q) break;
        size_t cl = strlen(contents[idx]);
        if (strncmp(real + at, contents[idx], cl) != 0 ||
            !append_marked(m, contents[idx], cl, false, false, v, nv, &cap))
            return false;
        at += cl;
        p = after;
    }
    return real[at] == '\0';
}

/* s without leading and trailing whitespace, malloc'd. */
static char *trimmed(const char *s) {
    while (*s && strchr(" \t\r\n", *s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && strchr(" \t\r\n", s[n - 1]))
        n--;
    return strndup(s, n);
}

/* The texts a rendering carries from its messages: message i's content at i, its reasoning (or NULL)
 * at n + i. */
typedef struct {
    const char **texts; /* (2n) */
    char **marks, **trims;
    cb_common_msg *skel; /* (n) the messages with marks for their texts */
} chat_marks;

static void marks_free(chat_marks *k, size_t n) {
    for (size_t i = 0; i < 2 * n && k->marks && k->trims; i++) {
        free(k->marks[i]);
        free(k->trims[i]);
    }
    free(k->texts);
    free(k->marks);
    free(k->trims);
    free(k->skel);
}

/* Marks message texts: each non-empty one becomes MARK index MARK in the skeleton's messages. */
static bool marks_make(chat_marks *k, const cb_common_msg *msgs, size_t n) {
    k->texts = calloc(2 * n, sizeof(char *));
    k->marks = calloc(2 * n, sizeof(char *));
    k->trims = calloc(2 * n, sizeof(char *));
    k->skel = calloc(n, sizeof(*k->skel));
    bool ok = k->texts && k->marks && k->trims && k->skel;
    for (size_t i = 0; ok && i < n; i++) {
        k->skel[i] = msgs[i];
        k->texts[i] = msgs[i].content;
        k->texts[n + i] = msgs[i].reasoning ? msgs[i].reasoning : "";
    }
    for (size_t j = 0; ok && j < 2 * n; j++) {
        ok = (k->trims[j] = trimmed(k->texts[j])) != NULL;
        if (!ok || !k->texts[j][0]) continue; /* an empty text stays empty: templates test it */
        ok = (k->marks[j] = malloc(24)) != NULL;
        if (!ok) break;
        snprintf(k->marks[j], 24, "%c%zu%c", MARK, j, MARK);
        if (j < n)
            k->skel[j].content = k->marks[j];
        else
            k->skel[j - n].reasoning = k->marks[j];
    }
    return ok;
}

/* The messages' plain fields defused (the tool calls are the renderer's: JSON), into out (n); the
 * texts made are listed in *made (free with defused_free). False when memory ran out. */
static bool defuse_msgs(const cb_model *m, const cb_common_msg *msgs, size_t n, cb_common_msg *out, char ***made) {
    *made = calloc(5 * n + 1, sizeof(char *));
    if (!*made) return false;
    size_t k = 0;
    bool failed = false;
    for (size_t i = 0; i < n && !failed; i++) {
        out[i] = msgs[i];
        const char **f[] = {&out[i].role, &out[i].content, &out[i].name, &out[i].tool_call_id, &out[i].reasoning};
        for (size_t j = 0; j < 5 && !failed; j++) {
            char *t = *f[j] ? defuse_text(m, *f[j], strlen(*f[j]), &failed) : NULL;
            if (t) *f[j] = (*made)[k++] = t;
        }
    }
    return !failed;
}

static void defused_free(char **made) {
    for (size_t i = 0; made && made[i]; i++)
        free(made[i]);
    free(made);
}

/* The tokens of a rendering: the template's text with special tokens, the texts the skeleton marks
 * without, or (a template that changes a text) the whole rendering with special tokens; the marks of
 * defused text become its characters as plain text either way. */
static int32_t *rendered_tokens(const cb_model *m, const chat_marks *k, size_t n, const cb_common_rendered *real,
                                const cb_common_rendered *skel, bool have_skel, int32_t *nv) {
    int32_t *v = NULL;
    if (have_skel && (split_tokens(m, skel->prompt, real->prompt, k->texts, 2 * n, &v, nv) ||
                      split_tokens(m, skel->prompt, real->prompt, (const char *const *)k->trims, 2 * n, &v, nv)))
        return v;
    free(v);
    v = NULL;
    size_t cap = 0;
    *nv = 0;
    if (!append_marked(m, real->prompt, strlen(real->prompt), true, true, &v, nv, &cap)) {
        free(v);
        return NULL;
    }
    return v;
}

int32_t *cb_model_chat_tokens(const cb_model *m, const cb_common_msg *given, size_t n, const cb_common_tools *tools,
                              const cb_common_reasoning *rs, cb_common_rendered *extra, int32_t *n_out, char *err,
                              size_t errlen) {
    if (err && errlen) err[0] = '\0';
    if (extra) memset(extra, 0, sizeof(*extra));
    if (!cb_model_has_chat_template(m) || n == 0) return NULL;
    chat_marks k = {0};
    cb_common_rendered real = {0}, skel = {0};
    cb_common_defuse d = {.text = defuse_text, .ctx = m};
    cb_common_msg *msgs = calloc(n, sizeof(*msgs));
    char **made = NULL;
    int32_t *v = NULL, nv = 0;
    bool ok = msgs && defuse_msgs(m, given, n, msgs, &made) && marks_make(&k, msgs, n) &&
              render(m, msgs, n, tools, rs, &d, &real, err, errlen) == 0;
    /* the skeleton needs the prompt only: the tools as listed, no grammar or parser worked out */
    cb_common_tools listed = tools ? *tools : (cb_common_tools){0};
    listed.choice = CB_TOOLS_NONE;
    listed.function = NULL;
    cb_common_reasoning plain = rs ? *rs : (cb_common_reasoning){.think = -1};
    plain.extract = false;
    plain.json_schema = NULL;
    /* templates copy a text as it is, or trimmed (llama2-like ones) */
    bool have_skel = ok && render(m, k.skel, n, tools ? &listed : NULL, &plain, &d, &skel, NULL, 0) == 0;
    if (ok) v = rendered_tokens(m, &k, n, &real, &skel, have_skel, &nv);
    marks_free(&k, n);
    cb_common_rendered_clear(&skel);
    defused_free(made);
    free(msgs);
    if (!ok || !v) {
        free(v);
        cb_common_rendered_clear(&real);
        return NULL;
    }
    free(real.prompt);
    real.prompt = NULL;
    if (extra)
        *extra = real;
    else
        cb_common_rendered_clear(&real);
    *n_out = nv;
    return v;
}

void cb_model_fim_vocab(const cb_model *m, int32_t *pre, int32_t *suf, int32_t *mid, int32_t *rep, int32_t *sep,
                        int32_t *bos, bool *add_bos) {
    const struct llama_vocab *v = m->vocab;
    int32_t t[6] = {llama_vocab_fim_pre(v), llama_vocab_fim_suf(v), llama_vocab_fim_mid(v),
                    llama_vocab_fim_rep(v), llama_vocab_fim_sep(v), llama_vocab_bos(v)};
    for (int i = 0; i < 6; i++)
        if (t[i] < 0 || t[i] >= m->n_vocab) t[i] = -1; /* LLAMA_TOKEN_NULL, or none of this vocabulary */
    *pre = t[0], *suf = t[1], *mid = t[2], *rep = t[3], *sep = t[4], *bos = t[5];
    *add_bos = llama_vocab_get_add_bos(v);
}

bool cb_model_has_chat_template(const cb_model *m) {
    return m->tmpls || llama_model_chat_template(m->model, NULL) != NULL;
}

void cb_model_vocab_info(const cb_model *m, struct cobatch_vocab_info *out) {
    out->n_vocab = m->n_vocab;
    out->bos = llama_vocab_bos(m->vocab);
    out->eos = llama_vocab_eos(m->vocab);
    if (out->bos >= m->n_vocab) out->bos = -1;
    if (out->eos >= m->n_vocab) out->eos = -1;
    out->bos_text = out->bos >= 0 ? llama_vocab_get_text(m->vocab, out->bos) : "";
    out->eos_text = out->eos >= 0 ? llama_vocab_get_text(m->vocab, out->eos) : "";
    out->add_bos = llama_vocab_get_add_bos(m->vocab);
    out->chat_template = m->tmpls ? cb_common_template_source(m->tmpls) : llama_model_chat_template(m->model, NULL);
}

int32_t cb_model_piece(const cb_model *m, int32_t token, char *buf, int32_t cap) {
    int32_t n = llama_token_to_piece(m->vocab, token, buf, cap, 0, false);
    return n < 0 ? -1 : n;
}

int32_t cb_model_token_text(const cb_model *m, int32_t token, char *buf, int32_t cap) {
    return llama_token_to_piece(m->vocab, token, buf, cap, 0, true); /* -size when buf is too small */
}

bool cb_model_is_eog(const cb_model *m, int32_t token) { return llama_vocab_is_eog(m->vocab, token); }

int32_t cb_model_detokenize(const cb_model *m, const int32_t *tokens, int32_t n, char *out, int32_t max) {
    return llama_detokenize(m->vocab, tokens, n, out, max, true,
                            true); /* the added bos/eos go, other specials stay text */
}
