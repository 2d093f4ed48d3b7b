/* hostcache.h — the prefix cache's host-memory tier (the split layout's, llama-server's --cache-ram,
 * vLLM's CPU offload): conversations that leave the device streams are kept in host memory and put
 * back into a stream when a request continues them, at the cost of a copy instead of a prefill.
 *
 * An entry is one stream's cells as llama.cpp saves them (llama_state_seq_get_data_ext) and the
 * tokens they hold. The stream cache (streams.h) decides what goes in and what comes back; the
 * copies are llama.cpp's, made by the runtime in op order (kv.h: CB_KV_OP_STASH, CB_KV_OP_LOAD):
 * a queued stash reserves its estimated bytes and locks its entry until the runner fills or fails
 * it; a queued load locks the entry it reads. A locked entry is never evicted or freed.
 *
 * An entry has a kind: the context that reads it (llama.cpp's saved state names its stream count,
 * so the split layout's streams and the long lane's pool read only their own; a request moving from
 * a stream to the lane has its stream saved in the lane's layout, an entry of the lane's). Bounded by
 * cap bytes, all kinds together, least recently used out. An entry whose tokens are a prefix of a newer one
 * (the same conversation a turn earlier) is dropped when the newer one comes in. Lookups are a
 * linear scan of the entries (hundreds at the default budget, against a decode step's ~100 ms).
 *
 * The disk tier (cb_host_disk_on; its files are runtime/disk.h's) lies under it, written through:
 * an entry is queued to be written to disk as soon as it is saved (locked while written), so a crash
 * loses only what no stream has left yet. An entry whose file is written leaves memory for room
 * as ON_DISK (its tokens stay here, its cells are in a file named by its id) instead of going; the
 * disk's own budget evicts the least recently used files. What the tier asks of the files is
 * queued (cb_host_io: write an entry, remove a file) and taken by the runtime each step
 * (cb_host_take_io); a write's end comes back through cb_host_written. Entries already on disk (a
 * restart, another replica's) come in through cb_host_add_disk. Pure logic, no llama.h, no I/O.
 * Engine thread only. */
#ifndef CB_HOSTCACHE_H
#define CB_HOSTCACHE_H

#include "swap.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The engine's min_len: a copy out and back costs a few ms for a thousand cells here, 32 prompt
 * tokens ~100 ms to compute. */
#define CB_HOST_MIN_LEN 32

/* The contexts an entry may come from (and go back to). */
#define CB_HOST_STREAMS 0 /* a stream of the split layout */
#define CB_HOST_LANE 1    /* the long lane's pool */

typedef enum {
    CB_HOST_SAVING,  /* its stash is queued: tokens known, data not yet */
    CB_HOST_SAVED,   /* data holds the cells of tok[0, len) */
    CB_HOST_FAILED,  /* the stash could not be made: freed with its last lock */
    CB_HOST_ON_DISK, /* on the disk tier only: data is NULL, size its bytes there */
} cb_host_state;

/* An entry's file on the disk tier. */
#define CB_HOST_FILE_NONE 0
#define CB_HOST_FILE_WRITING 1 /* queued or being written (the entry is locked: data stays) */
#define CB_HOST_FILE_WRITTEN 2

/* What the tier asks of its files (the runtime makes it, in order). */
#define CB_HOST_IO_WRITE 0  /* write e (locked; its data and tokens stay until cb_host_written) */
#define CB_HOST_IO_REMOVE 1 /* the file of `id` goes (its entry is gone) */

/* A file's bytes beyond the cells: the runtime's header and the tokens. */
#define CB_HOST_FILE_HEADER 128

struct cb_host_cache;

typedef struct cb_host_entry {
    struct cb_host_cache *owner;
    int32_t *tok; /* (len) owned */
    int32_t len;
    int32_t kind;  /* CB_HOST_STREAMS or CB_HOST_LANE */
    uint8_t *data; /* (size) llama.cpp's saved state of the stream; owned */
    size_t size;
    int64_t bytes; /* counted against the budget: the estimate until saved, then size */
    int state;     /* cb_host_state */
    int32_t locks; /* queued ops that read or fill it */
    int64_t last_use;
    uint64_t id;        /* its kind and tokens hashed: its file's name on the disk tier */
    int file;           /* CB_HOST_FILE_* */
    int64_t disk_bytes; /* what its file takes on the disk tier (being written or written), else 0 */
} cb_host_entry;

typedef struct {
    int op; /* CB_HOST_IO_* */
    cb_host_entry *e;
    uint64_t id;
} cb_host_io;

typedef struct cb_host_cache {
    int64_t cap, used, peak; /* bytes */
    double cell_bytes;       /* one cell as llama.cpp saves it: an estimate until a stash measures it */
    int32_t min_len;         /* shortest conversation worth keeping */
    /* a sliding-window model's window (0: none): llama.cpp saves only the cells it still reads, so an
     * entry serves a request that continues all of it, and no shorter match (cb_host_match); and an
     * entry's bytes grow with its cells by the layers without a window only: sizes are estimated
     * from the last entry measured (ref_n cells, ref_size bytes), cell_bytes being that growth */
    int32_t window, ref_n, n_ref; /* n_ref: entries measured beyond the window (2: the growth is known) */
    int64_t ref_size;
    const cb_swap *rates; /* the measured cost of a prompt token (not owned; may be NULL) */
    double byte_us;       /* a byte stashed or loaded (measured by every copy) */
    cb_host_entry **e;    /* (n_cap) the entries, n of them */
    int32_t n;
    size_t n_cap;
    int64_t clock;
    int64_t saves, loads;          /* stashes filled, loads made */
    int64_t failed;                /* stashes or loads that could not be made */
    int64_t evicted;               /* entries dropped for room or superseded */
    int64_t hit_tokens;            /* prompt tokens admissions took from this tier */
    int64_t copied_bytes, copy_us; /* every stash and load */
    /* the disk tier (disk_cap 0: none) */
    int64_t disk_cap, disk_used; /* bytes its files take (those being written included) */
    double disk_byte_us;         /* a byte read back from disk (measured by every read) */
    void *disk;                  /* the runtime's files (runtime/disk.h); not owned */
    cb_host_io *io;              /* (io_cap) what the files are asked, n_io of it */
    int32_t n_io;
    size_t io_cap;
    int32_t n_disk;                  /* entries with a file (being written or written) */
    int64_t disk_writes, disk_reads; /* files written, and read back for a load */
    int64_t disk_failed;             /* writes or reads that could not be made */
    int64_t disk_evicted;            /* files removed for room or superseded */
    int64_t disk_hit_tokens;         /* of hit_tokens, those read from the disk tier */
    int64_t disk_written_bytes, disk_read_bytes, disk_write_us, disk_read_us;
} cb_host_cache;

/* cap 0: a tier that keeps nothing. Returns 0, or -1 on bad sizes. */
int cb_host_init(cb_host_cache *h, int64_t cap, double cell_bytes, int32_t min_len, const cb_swap *rates);
/* Frees every entry, locked or not (the caller is done with the ops that name them). */
void cb_host_free(cb_host_cache *h);

/* The entry of this kind (saved or being saved) sharing the longest prefix with toks[0, n), its
 * length in *len (at least the entry's cb_host_floor); NULL (and 0) when none shares any. Read-only. */
cb_host_entry *cb_host_match(const cb_host_cache *h, int32_t kind, const int32_t *toks, int32_t n, int32_t *len);
/* The shortest match entry e may serve: with a window, its whole length when it is longer than the
 * window; else 0 (any). */
static inline int32_t cb_host_floor(const cb_host_cache *h, const cb_host_entry *e) {
    return h->window > 0 && e->len > h->window ? e->len : 0; /* (within the window nothing was left out) */
}

/* Whether loading e to get `gained` prompt tokens not otherwise cached costs less than computing
 * them (a load copies the whole entry). */
bool cb_host_worth(const cb_host_cache *h, const cb_host_entry *e, int32_t gained);
/* Whether saving n cells to a new entry and loading them back costs less than computing `gained`
 * prompt tokens. */
bool cb_host_worth_new(const cb_host_cache *h, int32_t n, int32_t gained);

/* A sequence of this kind holding toks[0, n) is about to lose them: a new entry for them, SAVING
 * and locked once (the stash op's lock), its estimated bytes reserved after evicting the least
 * recently used unlocked entries; entries of its kind it supersedes (prefixes of it) go. NULL when
 * it is not worth keeping (shorter than min_len, or an entry already holds all of it: that one is
 * touched), does not fit the budget, or on allocation failure. Copies toks. */
cb_host_entry *cb_host_stash(cb_host_cache *h, int32_t kind, const int32_t *toks, int32_t n);

/* The runner's side, after the op that holds a lock: cb_host_saved hands e the data (owned from
 * now on) and counts the copy; cb_host_fail marks e failed (its data and bytes go); cb_host_loaded
 * counts a load made (ok) or one that could not be (e stays); cb_host_unlock drops the op's lock
 * (a failed entry is freed with its last). cb_host_lock: a queued load's lock. */
void cb_host_saved(cb_host_cache *h, cb_host_entry *e, uint8_t *data, size_t size, int32_t cells, int64_t us);
void cb_host_fail(cb_host_cache *h, cb_host_entry *e);
void cb_host_loaded(cb_host_cache *h, cb_host_entry *e, bool ok, int64_t us);
void cb_host_lock(cb_host_cache *h, cb_host_entry *e);
void cb_host_unlock(cb_host_cache *h, cb_host_entry *e);

/* Entries in memory (saved or being saved). O(entries). */
int32_t cb_host_in_memory(const cb_host_cache *h);

/* Frees every unlocked entry (those on disk too: their files go). Returns how many went. */
int32_t cb_host_drop(cb_host_cache *h);

/* ---------------------------------------------------------------- the disk tier ------------- */

/* Turns the disk tier on: files up to cap bytes. Returns 0, or -1 on a bad size. (h->disk, the
 * runtime's handle for the runner's reads, is set by the runtime.) */
int cb_host_disk_on(cb_host_cache *h, int64_t cap);
/* The id of an entry of this kind holding toks[0, n): its file's name (FNV-1a, 64 bits). */
uint64_t cb_host_id(int32_t kind, const int32_t *toks, int32_t n);
/* A file already on disk: an ON_DISK entry for its tokens (copied), data_size bytes of cells in a
 * file of file_bytes. Found at start (recent false): the least recently used of all, NULL when it
 * does not fit the disk's budget (the caller removes the file); written by another replica since
 * (recent): the most recently used, older files evicted for its room. NULL too when an entry of
 * that id is here already, or on allocation failure. */
cb_host_entry *cb_host_add_disk(cb_host_cache *h, int32_t kind, const int32_t *toks, int32_t n, size_t data_size,
                                int64_t file_bytes, bool recent);
/* Whether an entry of this id is here (a scan for files skips those). */
bool cb_host_has_id(const cb_host_cache *h, uint64_t id);
/* Every saved entry in memory without a file is queued to be written (a drain: one whose write
 * found no room or failed tries again). Returns how many were queued. */
int32_t cb_host_write_all(cb_host_cache *h);
/* The runtime's side: the queued file work in order (the array is the tier's, valid until the
 * next call into it; the queue is empty after); a write's end (the lock of its WRITE dropped:
 * ok, the entry is on disk and its data freed; else it goes); a read for a load (ok: bytes read in
 * us; else the entry goes and its file is removed, the load fails). */
const cb_host_io *cb_host_take_io(cb_host_cache *h, int32_t *n);
void cb_host_written(cb_host_cache *h, cb_host_entry *e, bool ok, int64_t us);
void cb_host_read(cb_host_cache *h, cb_host_entry *e, bool ok, int64_t us);

/* Debug invariant: used is the sum of the entries' bytes (within cap but while locked entries
 * hold more than estimated), disk_used of their disk_bytes; no entry is empty; data is there
 * exactly when saved, a file exactly when it has disk bytes, an entry on disk only has a file. */
bool cb_host_check(const cb_host_cache *h);

#endif
