#include "draft.h"

#include <stdlib.h>

/* ---- lookup in a text --------------------------------------------------------------------- */

int32_t cb_draft_lookup(const int32_t *key, int32_t n_key, const int32_t *hay, int32_t n_hay, int32_t n_min,
                        int32_t n_max, int32_t from, int32_t k, int32_t *out, int32_t *end) {
    if (end) *end = -1;
    if (!key || !hay || k <= 0 || n_min < 1 || n_max < n_min || n_key < n_min || n_hay <= n_min) return 0;
    if (n_max > n_key) n_max = n_key;
    const int32_t *tail = key + n_key; /* the n-gram ends here: tail[-1] is the key's last token */
    int32_t best = 0, at = -1;
    bool at_after = false;
    /* j: where the token after an occurrence sits (the occurrence is hay[j - len, j)); one pass, the
     * last token compared first, the match then extended backwards up to n_max */
    for (int32_t j = n_min; j < n_hay; j++) {
        if (hay[j - 1] != tail[-1]) continue;
        int32_t len = 1;
        while (len < n_max && len < j && hay[j - 1 - len] == tail[-1 - len])
            len++;
        if (len < n_min) continue;
        bool after = from >= 0 && j >= from;
        if (len > best) {
            best = len, at = j, at_after = after;
        } else if (len == best && !at_after) {
            at = j, at_after = after; /* a later one: the last so far, or the first at or after `from` */
        }
    }
    if (at < 0) return 0;
    int32_t m = n_hay - at < k ? n_hay - at : k;
    for (int32_t i = 0; i < m; i++)
        out[i] = hay[at + i];
    if (end) *end = at + m;
    return m;
}

/* ---- the shared pool ---------------------------------------------------------------------- */

typedef struct {
    uint32_t tag; /* 0: empty */
    int32_t token;
} slot;

struct cb_ngram_pool {
    slot *slots; /* (1 << bits) */
    int bits;
    int32_t n;
};

cb_ngram_pool *cb_ngram_pool_new(int bits, int32_t n) {
    if (bits < 8 || bits > 26 || n < 1 || n > 16) return NULL;
    cb_ngram_pool *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    p->slots = calloc((size_t)1 << bits, sizeof(slot));
    if (!p->slots) {
        free(p);
        return NULL;
    }
    p->bits = bits;
    p->n = n;
    return p;
}

void cb_ngram_pool_free(cb_ngram_pool *p) {
    if (!p) return;
    free(p->slots);
    free(p);
}

/* The hash of t[0, n): FNV-1a over the tokens' bytes, then a multiply to spread the high bits (the
 * slot index is taken from them). */
static uint64_t ngram_hash(const int32_t *t, int32_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)t[i];
        for (int b = 0; b < 4; b++) {
            h ^= (v >> (8 * b)) & 0xff;
            h *= 1099511628211ull;
        }
    }
    return h * 0x9e3779b97f4a7c15ull;
}

static slot *slot_of(const cb_ngram_pool *p, const int32_t *t, uint32_t *tag) {
    uint64_t h = ngram_hash(t, p->n);
    *tag = (uint32_t)h | 1u;
    return &p->slots[h >> (64 - p->bits)];
}

void cb_ngram_pool_learn(cb_ngram_pool *p, const int32_t *text, int32_t n_text, int32_t from) {
    if (!p || !text) return;
    for (int32_t i = from > p->n ? from : p->n; i < n_text; i++) {
        uint32_t tag;
        slot *s = slot_of(p, text + i - p->n, &tag);
        s->tag = tag;
        s->token = text[i];
    }
}

int32_t cb_ngram_pool_draft(const cb_ngram_pool *p, const int32_t *text, int32_t n_text, int32_t k, int32_t *out) {
    if (!p || !text || n_text < p->n || k <= 0) return 0;
    int32_t win[16]; /* the last n tokens, text then drafts */
    for (int32_t i = 0; i < p->n; i++)
        win[i] = text[n_text - p->n + i];
    int32_t m = 0;
    while (m < k) {
        uint32_t tag;
        const slot *s = slot_of(p, win, &tag);
        if (s->tag != tag) break;
        out[m++] = s->token;
        for (int32_t i = 0; i + 1 < p->n; i++)
            win[i] = win[i + 1];
        win[p->n - 1] = s->token;
    }
    return m;
}
