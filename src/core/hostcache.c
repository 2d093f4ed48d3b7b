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
    free(h->io);
    memset(h, 0, sizeof(*h));
}

/* Queues file work; false when the queue cannot grow. */
static bool push_io(cb_host_cache *h, int op, cb_host_entry *e, uint64_t id) {
    if (!cb_grow((void **)&h->io, &h->io_cap, (size_t)h->n_io + 1, sizeof(*h->io), 16)) return false;
    h->io[h->n_io++] = (cb_host_io){.op = op, .e = e, .id = id};
    return true;
}

static bool in_memory(const cb_host_entry *e) { return e->state == CB_HOST_SAVING || e->state == CB_HOST_SAVED; }

/* e's file goes from the accounting (and from the disk when written). */
static void forget_file(cb_host_cache *h, cb_host_entry *e) {
    if (e->file == CB_HOST_FILE_NONE) return;
    h->disk_used -= e->disk_bytes;
    h->n_disk--;
    if (e->file == CB_HOST_FILE_WRITTEN)
        push_io(h, CB_HOST_IO_REMOVE, NULL, e->id); /* (no room: the next start bounds it) */
    e->disk_bytes = 0;
    e->file = CB_HOST_FILE_NONE;
}

/* Takes entry i out of the list and frees it (its bytes go back; its file is removed). */
static void remove_at(cb_host_cache *h, int32_t i) {
    cb_host_entry *e = h->e[i];
    h->used -= e->bytes;
    forget_file(h, e);
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
        if (l < cb_host_floor(h, e)) continue;
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
    double us = (double)e->size * h->byte_us;
    if (e->state == CB_HOST_ON_DISK)
        us += (double)e->disk_bytes * h->disk_byte_us;
    else if (e->state == CB_HOST_SAVING)
        us = (double)e->bytes * h->byte_us;
    return us < gained * token_us;
}

static int64_t estimate(const cb_host_cache *h, int32_t n);

bool cb_host_worth_new(const cb_host_cache *h, int32_t n, int32_t gained) {
    if (gained <= 0 || n < h->min_len) return false;
    double token_us = h->rates ? h->rates->token_us : 2000.0;
    return 2.0 * (double)estimate(h, n) * h->byte_us < gained * token_us;
}

/* ---------------------------------------------------------------- stashing ------------------- */

/* The least recently used unlocked entry in memory (files false) or with a written file; -1 when
 * none. */
static int32_t lru_of(const cb_host_cache *h, bool files) {
    int32_t lru = -1;
    for (int32_t i = 0; i < h->n; i++) {
        const cb_host_entry *e = h->e[i];
        if (e->locks > 0 || (files ? e->file != CB_HOST_FILE_WRITTEN : !in_memory(e))) continue;
        if (lru < 0 || e->last_use < h->e[lru]->last_use) lru = i;
    }
    return lru;
}

/* Least recently used unlocked files go until `bytes` more fit the disk (an entry on disk only
 * goes with its file). false when they cannot. */
static bool disk_room(cb_host_cache *h, int64_t bytes) {
    if (bytes > h->disk_cap) return false;
    while (h->disk_used + bytes > h->disk_cap) {
        int32_t lru = lru_of(h, true);
        if (lru < 0) return false;
        if (h->e[lru]->state == CB_HOST_ON_DISK)
            remove_at(h, lru);
        else
            forget_file(h, h->e[lru]);
        h->disk_evicted++;
    }
    return true;
}

static int64_t file_bytes(const cb_host_entry *e) {
    return (int64_t)e->size + (int64_t)sizeof(int32_t) * e->len + CB_HOST_FILE_HEADER;
}

/* Saved entry e without a file is queued to be written, locked until it is. false (nothing
 * changed) when there is no disk tier or no room on it, or the queue cannot grow. */
static bool write_through(cb_host_cache *h, cb_host_entry *e) {
    int64_t fb = file_bytes(e);
    if (h->disk_cap == 0 || e->state != CB_HOST_SAVED || e->file != CB_HOST_FILE_NONE) return false;
    if (!disk_room(h, fb) || !push_io(h, CB_HOST_IO_WRITE, e, e->id)) return false;
    e->file = CB_HOST_FILE_WRITING;
    e->disk_bytes = fb;
    h->disk_used += fb;
    h->n_disk++;
    e->locks++; /* the write's */
    return true;
}

/* Least recently used unlocked entries leave memory until `bytes` more fit: those with a file stay
 * on disk, the others go. false when they cannot. */
static bool make_room(cb_host_cache *h, int64_t bytes) {
    while (h->used + bytes > h->cap) {
        int32_t lru = lru_of(h, false);
        if (lru < 0) return false;
        cb_host_entry *e = h->e[lru];
        if (e->file == CB_HOST_FILE_WRITTEN) {
            h->used -= e->bytes;
            e->bytes = 0;
            free(e->data);
            e->data = NULL;
            e->state = CB_HOST_ON_DISK;
        } else {
            remove_at(h, lru);
        }
        h->evicted++;
    }
    return true;
}

/* A new entry in the list for toks[0, n) (copied), of this kind, its id set, the rest zero; NULL
 * on allocation failure. */
static cb_host_entry *new_entry(cb_host_cache *h, int32_t kind, const int32_t *toks, int32_t n) {
    if (!cb_grow((void **)&h->e, &h->n_cap, (size_t)h->n + 1, sizeof(*h->e), 64)) return NULL;
    cb_host_entry *e = calloc(1, sizeof(*e));
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n);
    if (!e || !tok) {
        free(e);
        free(tok);
        return NULL;
    }
    memcpy(tok, toks, sizeof(int32_t) * (size_t)n);
    *e = (cb_host_entry){.owner = h, .tok = tok, .len = n, .kind = kind, .id = cb_host_id(kind, toks, n)};
    h->e[h->n++] = e;
    return e;
}

/* What saving n cells will take. With a window the estimate may be far off until two entries past
 * it are measured: till then it is never over the tier (the copy says what it took, and
 * cb_host_saved drops an entry too big). */
static int64_t estimate(const cb_host_cache *h, int32_t n) {
    if (h->window == 0 || h->ref_n == 0) return (int64_t)(n * h->cell_bytes) + CB_HOST_HEADER_BYTES;
    double b = (double)h->ref_size + (n - h->ref_n) * h->cell_bytes; /* (the measured size has its header) */
    int64_t bytes = b > CB_HOST_HEADER_BYTES ? (int64_t)b : CB_HOST_HEADER_BYTES;
    return h->n_ref < 2 && bytes > h->cap ? h->cap : bytes;
}

/* A copy of `cells` cells took size bytes: the model of what the next will take. */
static void measured(cb_host_cache *h, size_t size, int32_t cells) {
    if (cells <= 0) return;
    if (h->window == 0) {
        h->cell_bytes = (double)size / cells;
        return;
    }
    if (cells < h->window) return; /* (under the window every layer grows: not the growth beyond it) */
    if (h->ref_n >= h->window && cells != h->ref_n) {
        double growth = ((double)size - (double)h->ref_size) / (cells - h->ref_n);
        if (growth > 0) h->cell_bytes = growth, h->n_ref = 2;
    }
    if (h->n_ref == 0) h->n_ref = 1;
    h->ref_n = cells;
    h->ref_size = (int64_t)size;
}

cb_host_entry *cb_host_stash(cb_host_cache *h, int32_t kind, const int32_t *toks, int32_t n) {
    int64_t bytes = estimate(h, n);
    if (n < h->min_len || bytes > h->cap) return NULL; /* (before anything it would supersede goes) */
    for (int32_t i = 0; i < h->n; i++) {               /* held already: touch it; superseded: it goes */
        cb_host_entry *e = h->e[i];
        if (e->state == CB_HOST_FAILED || e->kind != kind) continue;
        int32_t l = cb_common_prefix(toks, n, e->tok, e->len);
        if (l == n && (h->window == 0 || e->len == n)) { /* (with a window only e's own length serves) */
            e->last_use = ++h->clock;
            return NULL;
        }
        if (l == e->len && e->locks == 0 && h->window == 0) { /* (with a window it serves what e does not) */
            if (e->file == CB_HOST_FILE_WRITTEN) h->disk_evicted++;
            remove_at(h, i--);
            h->evicted++;
        }
    }
    if (!make_room(h, bytes)) return NULL;
    cb_host_entry *e = new_entry(h, kind, toks, n);
    if (!e) return NULL;
    e->bytes = bytes;
    e->state = CB_HOST_SAVING;
    e->locks = 1;
    e->last_use = ++h->clock;
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
    measured(h, size, cells);
    if (e->bytes > h->cap) { /* (a window's first estimates) */
        cb_host_fail(h, e);
        return;
    }
    make_room(h, 0); /* the estimate was short: others go (e is locked) */
    h->saves++;
    note_copy(h, size, us);
    write_through(h, e);
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

int32_t cb_host_in_memory(const cb_host_cache *h) {
    int32_t n = 0;
    for (int32_t i = 0; i < h->n; i++)
        n += in_memory(h->e[i]);
    return n;
}

int32_t cb_host_drop(cb_host_cache *h) {
    int32_t gone = 0;
    for (int32_t i = 0; i < h->n; i++) {
        if (h->e[i]->locks > 0) continue;
        if (h->e[i]->file == CB_HOST_FILE_WRITTEN) h->disk_evicted++;
        remove_at(h, i--);
        gone++;
    }
    h->evicted += gone;
    return gone;
}

/* ---------------------------------------------------------------- the disk tier ------------- */

int cb_host_disk_on(cb_host_cache *h, int64_t cap) {
    if (cap < 0) return -1;
    h->disk_cap = cap;
    h->disk_byte_us = 1.0 / 500.0; /* ~500 MB/s until measured */
    return 0;
}

uint64_t cb_host_id(int32_t kind, const int32_t *toks, int32_t n) {
    uint64_t x = 1469598103934665603ULL;
    uint32_t k = (uint32_t)kind;
    for (int b = 0; b < 4; b++)
        x = (x ^ ((k >> (8 * b)) & 0xff)) * 1099511628211ULL;
    for (int32_t i = 0; i < n; i++) {
        uint32_t t = (uint32_t)toks[i];
        for (int b = 0; b < 4; b++)
            x = (x ^ ((t >> (8 * b)) & 0xff)) * 1099511628211ULL;
    }
    return x;
}

bool cb_host_has_id(const cb_host_cache *h, uint64_t id) {
    for (int32_t i = 0; i < h->n; i++)
        if (h->e[i]->id == id && h->e[i]->state != CB_HOST_FAILED) return true;
    return false;
}

cb_host_entry *cb_host_add_disk(cb_host_cache *h, int32_t kind, const int32_t *toks, int32_t n, size_t data_size,
                                int64_t file_bytes, bool recent) {
    uint64_t id = cb_host_id(kind, toks, n);
    if (n < 1 || file_bytes < 1 || h->disk_cap == 0 || cb_host_has_id(h, id)) return NULL;
    if (recent ? !disk_room(h, file_bytes) : h->disk_used + file_bytes > h->disk_cap) return NULL;
    int64_t oldest = 0;
    for (int32_t i = 0; i < h->n; i++)
        if (h->e[i]->last_use < oldest) oldest = h->e[i]->last_use;
    cb_host_entry *e = new_entry(h, kind, toks, n);
    if (!e) return NULL;
    e->size = data_size;
    e->state = CB_HOST_ON_DISK;
    e->last_use = recent ? ++h->clock : oldest - 1;
    e->file = CB_HOST_FILE_WRITTEN;
    e->disk_bytes = file_bytes;
    h->disk_used += file_bytes;
    h->n_disk++;
    return e;
}

int32_t cb_host_write_all(cb_host_cache *h) {
    int32_t queued = 0;
    for (int32_t i = 0; i < h->n; i++) {
        int32_t n = h->n;
        if (h->e[i]->locks > 0 || !write_through(h, h->e[i])) continue;
        queued++;
        if (h->n < n) i = -1; /* its room removed files and moved entries: from the start again */
    }
    return queued;
}

const cb_host_io *cb_host_take_io(cb_host_cache *h, int32_t *n) {
    *n = h->n_io;
    h->n_io = 0;
    return h->io;
}

void cb_host_written(cb_host_cache *h, cb_host_entry *e, bool ok, int64_t us) {
    if (ok) {
        e->file = CB_HOST_FILE_WRITTEN;
        h->disk_writes++;
        h->disk_written_bytes += e->disk_bytes;
        h->disk_write_us += us;
    } else {
        h->disk_used -= e->disk_bytes;
        h->n_disk--;
        e->disk_bytes = 0;
        e->file = CB_HOST_FILE_NONE;
        h->disk_failed++;
    }
    cb_host_unlock(h, e);
}

void cb_host_read(cb_host_cache *h, cb_host_entry *e, bool ok, int64_t us) {
    if (ok) {
        h->disk_reads++;
        h->disk_read_bytes += e->disk_bytes;
        h->disk_read_us += us;
        if (e->disk_bytes > 0)
            h->disk_byte_us = cb_ewma(h->disk_byte_us, (double)(us > 0 ? us : 1) / (double)e->disk_bytes, 0.2);
        return;
    }
    h->disk_failed++;
    if (e->state != CB_HOST_ON_DISK) return;
    forget_file(h, e); /* unreadable: removed, nobody reads it again */
    e->size = 0;
    e->state = CB_HOST_FAILED; /* freed with its last lock */
}

bool cb_host_check(const cb_host_cache *h) {
    int64_t sum = 0, disk = 0;
    int32_t n_disk = 0;
    for (int32_t i = 0; i < h->n; i++) {
        const cb_host_entry *e = h->e[i];
        if (e->len < 1 || e->locks < 0 || e->owner != h) return false;
        if ((e->state == CB_HOST_SAVED) != (e->data != NULL)) return false;
        if ((e->file != CB_HOST_FILE_NONE) != (e->disk_bytes > 0)) return false;
        if (e->file == CB_HOST_FILE_WRITING && e->locks < 1) return false;
        if (e->state == CB_HOST_ON_DISK && (e->file != CB_HOST_FILE_WRITTEN || e->bytes != 0)) return false;
        sum += e->bytes;
        disk += e->disk_bytes;
        n_disk += e->file != CB_HOST_FILE_NONE;
    }
    return sum == h->used && disk == h->disk_used && n_disk == h->n_disk;
}
