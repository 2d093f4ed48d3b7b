#include "hostcache.h"

#include "streams.h"
#include "../util/buf.h"
#include "../util/util.h"

#include <stdlib.h>
#include <string.h>

/* llama.cpp's header and cell records around a stream's K and V */
#define CB_HOST_HEADER_BYTES 4096

int cb_host_init(cb_host_cache *h, int64_t cap, double cell_bytes, int32_t min_len, const cb_swap *rates) {
    memset(h, 0, sizeof(*h));
    if (cap < 0 || min_len < 1) return -1;
    h->cap = cap;
    h->cell_bytes = cell_bytes > 0 ? cell_bytes : 1;
    h->min_len = min_len;
    h->rates = rates;
    h->byte_us = 1.0 / 2000.0; /* ~2 GB/s until measured */
    return 0;
}

static void entry_free(cb_host_entry *e) {
    free(e->tok);
    free(e->data);
    free(e);
}

void cb_host_free(cb_host_cache *h) {
    for (int32_t i = 0; i < h->n; i++)
        entry_free(h->e[i]);
    free(h->e);
    memset(h, 0, sizeof(*h));
}

/* Takes entry i out of the list and frees it (its bytes go back). */
static void remove_at(cb_host_cache *h, int32_t i) {
    cb_host_entry *e = h->e[i];
    h->used -= e->bytes;
    h->e[i] = h->e[--h->n];
    entry_free(e);
}

static int32_t index_of(const cb_host_cache *h, const cb_host_entry *e) {
    for (int32_t i = 0; i < h->n; i++)
        if (h->e[i] == e) return i;
    return -1;
}

/* ---------------------------------------------------------------- lookups -------------------- */

cb_host_entry *cb_host_match(const cb_host_cache *h, int32_t kind, const int32_t *toks, int32_t n, int32_t *len) {
    cb_host_entry *best = NULL;
    *len = 0;
    for (int32_t i = 0; i < h->n; i++) {
        cb_host_entry *e = h->e[i];
        if (e->state == CB_HOST_FAILED || e->kind != kind) continue;
        int32_t l = cb_common_prefix(toks, n, e->tok, e->len);
        if (l > *len || (l == *len && l > 0 && best && e->last_use > best->last_use)) {
            best = e;
            *len = l;
        }
    }
    return best;
}

bool cb_host_worth(const cb_host_cache *h, const cb_host_entry *e, int32_t gained) {
    if (gained <= 0) return false;
    double token_us = h->rates ? h->rates->token_us : 2000.0;
    return (double)e->bytes * h->byte_us < gained * token_us;
}

/* ---------------------------------------------------------------- stashing ------------------- */

/* Least recently used unlocked entries go until `bytes` more fit. false when they cannot. */
static bool make_room(cb_host_cache *h, int64_t bytes) {
    while (h->used + bytes > h->cap) {
        int32_t lru = -1;
        for (int32_t i = 0; i < h->n; i++)
            if (h->e[i]->locks == 0 && (lru < 0 || h->e[i]->last_use < h->e[lru]->last_use)) lru = i;
        if (lru < 0) return false;
        remove_at(h, lru);
        h->evicted++;
    }
    return true;
}

cb_host_entry *cb_host_stash(cb_host_cache *h, int32_t kind, const int32_t *toks, int32_t n) {
    int64_t bytes = (int64_t)(n * h->cell_bytes) + CB_HOST_HEADER_BYTES;
    if (n < h->min_len || bytes > h->cap) return NULL; /* (before anything it would supersede goes) */
    for (int32_t i = 0; i < h->n; i++) {               /* held already: touch it; superseded: it goes */
        cb_host_entry *e = h->e[i];
        if (e->state == CB_HOST_FAILED || e->kind != kind) continue;
        int32_t l = cb_common_prefix(toks, n, e->tok, e->len);
        if (l == n) {
            e->last_use = ++h->clock;
            return NULL;
        }
        if (l == e->len && e->locks == 0) {
            remove_at(h, i--);
            h->evicted++;
        }
    }
    if (!make_room(h, bytes)) return NULL;
    if (!cb_grow((void **)&h->e, &h->n_cap, (size_t)h->n + 1, sizeof(*h->e), 64)) return NULL;
    cb_host_entry *e = calloc(1, sizeof(*e));
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n);
    if (!e || !tok) {
        free(e);
        free(tok);
        return NULL;
    }
    memcpy(tok, toks, sizeof(int32_t) * (size_t)n);
    *e = (cb_host_entry){
        .owner = h, .tok = tok, .len = n, .kind = kind, .bytes = bytes, .state = CB_HOST_SAVING, .locks = 1};
    e->last_use = ++h->clock;
    h->e[h->n++] = e;
    h->used += bytes;
    if (h->used > h->peak) h->peak = h->used;
    return e;
}

/* ---------------------------------------------------------------- the runner's side ---------- */

static void note_copy(cb_host_cache *h, size_t bytes, int64_t us) {
    h->copied_bytes += (int64_t)bytes;
    h->copy_us += us;
    if (bytes > 0) h->byte_us = cb_ewma(h->byte_us, (double)(us > 0 ? us : 1) / (double)bytes, 0.2);
}

void cb_host_saved(cb_host_cache *h, cb_host_entry *e, uint8_t *data, size_t size, int32_t cells, int64_t us) {
    free(e->data);
    e->data = data;
    e->size = size;
    e->state = CB_HOST_SAVED;
    h->used += (int64_t)size - e->bytes; /* what the copy took, not the estimate */
    e->bytes = (int64_t)size;
    if (h->used > h->peak) h->peak = h->used;
    if (cells > 0) h->cell_bytes = (double)size / cells;
    make_room(h, 0); /* the estimate was short: others go (e is locked) */
    h->saves++;
    note_copy(h, size, us);
}

void cb_host_fail(cb_host_cache *h, cb_host_entry *e) {
    free(e->data);
    e->data = NULL;
    e->size = 0;
    h->used -= e->bytes;
    e->bytes = 0;
    e->state = CB_HOST_FAILED;
    h->failed++;
}

void cb_host_loaded(cb_host_cache *h, cb_host_entry *e, bool ok, int64_t us) {
    if (!ok) {
        h->failed++;
        return;
    }
    e->last_use = ++h->clock;
    h->loads++;
    note_copy(h, e->size, us);
}

void cb_host_lock(cb_host_cache *h, cb_host_entry *e) {
    e->locks++;
    e->last_use = ++h->clock;
}

void cb_host_unlock(cb_host_cache *h, cb_host_entry *e) {
    if (--e->locks > 0 || e->state != CB_HOST_FAILED) return;
    int32_t i = index_of(h, e);
    if (i >= 0) remove_at(h, i);
}

int32_t cb_host_drop(cb_host_cache *h) {
    int32_t gone = 0;
    for (int32_t i = 0; i < h->n; i++) {
        if (h->e[i]->locks > 0) continue;
        remove_at(h, i--);
        gone++;
    }
    h->evicted += gone;
    return gone;
}

bool cb_host_check(const cb_host_cache *h) {
    int64_t sum = 0;
    for (int32_t i = 0; i < h->n; i++) {
        const cb_host_entry *e = h->e[i];
        if (e->len < 1 || e->locks < 0 || e->owner != h) return false;
        if ((e->state == CB_HOST_SAVED) != (e->data != NULL)) return false;
        sum += e->bytes;
    }
    return sum == h->used;
}
