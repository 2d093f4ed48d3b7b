/* streams.h — the prefix cache of the split KV layout: every stream is a cache entry.
 *
 * In llama.cpp's split layout each sequence id owns a stream of its own cells, and a copy
 * between streams (llama_memory_seq_cp) can only take a whole stream: it resets the destination,
 * tags the source's cells there and copies the stream's K/V at the start of the next decode
 * (milliseconds: BENCHMARKS.md, "KV layouts"). So instead of prefix.h's
 * radix tree this cache keeps whole streams:
 *   - a request that leaves (finished, cancelled, preempted) parks its stream: the cells stay,
 *     the id is free, and the stream's tokens are recorded here;
 *   - a request that starts takes the stream (running or parked) whose tokens share its longest
 *     prefix: a parked stream in the running range is taken over in place (no copy), any other is
 *     copied into a free stream; then the tail past the match is trimmed;
 *   - ids [0, n_run) run requests; ids [n_run, n_seq) are holders: when a parked stream must be
 *     reused for an unrelated request, its tokens move to a holder (one copy, least recently used
 *     holder evicted) so they outlive the reuse.
 * With a host tier (hostcache.h), what would be lost goes to host memory first: a holder evicted
 * for a newer stream, or a parked stream reused when there are no holders; and a request whose
 * conversation the host tier holds longer than any stream (by more than the load costs against a
 * prefill) gets it loaded into its stream. The stash and the load act at once, a stream copy at the
 * next decode, so neither names a stream that a copy queued since the last decode reads or writes
 * (`busy`): such a stash is not made, such a load goes to another stream.
 * Running requests keep ids in [0, n_run) in one block: llama.cpp cuts a batch into one graph run
 * per block of consecutive sequence ids in the split layout, so gaps cost whole graph runs. A new
 * request without an in-place match fills a hole (cb_streams_admit; an in-place take-over happens
 * wherever the match is); the scheduler moves requests into the holes others leave
 * (cb_streams_move).
 *
 * Accounting: a parked stream's cells are counted once in kv->shared (free on demand: taking the
 * stream trims them); a running stream's cells are its own (kv->used[seq]). Pure logic, no
 * llama.h: every change to llama.cpp's cells is queued as a cb_kv_op. Engine thread only. */
#ifndef CB_STREAMS_H
#define CB_STREAMS_H

#include "hostcache.h"
#include "kv.h"

#include <stdbool.h>
#include <stdint.h>

/* The engine's min_share: a whole-stream copy costs ~6 ms for 1024 cells here (BENCHMARKS), eight
 * prompt tokens ~30 ms to compute. */
#define CB_STREAM_MIN_SHARE 8

typedef struct {
    cb_kv *kv;         /* split layout; not owned */
    int32_t n_run;     /* ids [0, n_run) run requests, [n_run, kv->n_seq) are holders */
    int32_t min_share; /* shortest match worth a stream copy (a take-over is free at any length) */
    int32_t *tok;      /* (kv->n_seq x kv->per_seq_cap) the tokens each parked stream holds */
    int32_t *len;      /* (kv->n_seq) tokens a parked stream holds; 0 when empty or running */
    int64_t *last_use; /* (kv->n_seq) LRU clock of each parked stream */
    int64_t clock;
    int64_t copies, evicted_cells;
    int64_t moves;       /* running requests moved to another stream (cb_streams_move) */
    cb_host_cache *host; /* the host tier (not owned), or NULL */
    uint8_t *busy;       /* (kv->n_seq) a stream copy queued since the last decode reads or writes it */
    /* (kv->n_seq) the shortest prefix of a stream's tokens a trim may keep (0: any): a stream loaded
     * from the host tier of a sliding-window model lacks the cells before the window of the
     * conversation it loaded (hostcache.h, whole_only), so a match must keep at least that much; a
     * copy carries it, an emptied stream starts at 0 */
    int32_t *floor;
} cb_streams;

/* Where a request's prefix comes from: stream src holds its first len tokens (src -1: none), or
 * the host-tier entry host does (then src, if not -1, holds the first src_len: the way back when no
 * stream can take the load); the source agrees with the request up to agree tokens (0: len; more
 * when the request computes some of them again: a taken-over stream's tail up to there is no loss). */
typedef struct {
    int32_t src, len, agree;
    cb_host_entry *host;
    int32_t src_len;
    int32_t floor; /* the source's: len may not drop under it (0 when any length will do) */
} cb_stream_match;

/* kv must be split with n_run <= kv->n_seq; host may be NULL (no host tier; not owned). Returns 0,
 * or -1 on bad sizes or allocation failure. */
int cb_streams_init(cb_streams *sc, cb_kv *kv, int32_t n_run, int32_t min_share, cb_host_cache *host);
/* Frees the records (queues nothing: the caller drops the llama context or clears it). */
void cb_streams_free(cb_streams *sc);

/* A request leaves stream seq, which holds toks[0, kv->used[seq]): the cells stay as cache, the
 * id is freed. */
void cb_streams_park(cb_streams *sc, int32_t seq, const int32_t *toks);

/* Length of the common prefix of a[0, na) and b[0, nb). */
static inline int32_t cb_common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    int32_t n = na < nb ? na : nb, l = 0;
    while (l < n && a[l] == b[l])
        l++;
    return l;
}

/* Raises *m to the parked stream sharing the longest prefix with toks[0, n), if it beats *m (a
 * tie goes to a parked stream in the running range: taking it over needs no copy); then to the
 * host-tier entry sharing a longer one, where loading it costs less than computing what it adds.
 * Read-only. */
void cb_streams_match(const cb_streams *sc, const int32_t *toks, int32_t n, cb_stream_match *m);

/* Starts a request whose first m.len tokens stream m.src (running or parked) or host entry m.host
 * holds (a match shorter than min_share is ignored). Returns its stream, taken in kv with m.len
 * cells of its own (*shared says how many: 0 when the match was ignored), or -1 when every id in
 * [0, n_run) is running (nothing changed). Queues the copies and trims; may move a parked stream
 * to a holder or stash it. A host match comes back with *loaded true: the stream is emptied, and
 * the caller queues the load (the entry's whole stream) and then the trim to *shared; a host match
 * with no stream free of pending copies falls back to none. */
int32_t cb_streams_admit(cb_streams *sc, cb_stream_match m, int32_t *shared, bool *loaded, cb_kv_ops *ops);

/* A decode ran: the stream copies queued before it are made. */
void cb_streams_settled(cb_streams *sc);

/* Moves the request running on stream `from`, whose cells hold toks[0, kv->used[from]), to stream
 * `to` of the running range (not running): to's parked tokens go (to a holder when worth it), a
 * whole-stream copy brings from's cells, and from stays parked with the same tokens, as cache. */
void cb_streams_move(cb_streams *sc, int32_t from, int32_t to, const int32_t *toks, cb_kv_ops *ops);

/* Empties every parked stream. Returns the cells freed. */
int32_t cb_streams_drop(cb_streams *sc, cb_kv_ops *ops);

/* Debug invariant: parked lengths sum to kv->shared, running streams record nothing, holders
 * never run. */
bool cb_streams_check(const cb_streams *sc);

/* Parked stream s is queued to the host tier now (as when it leaves the device; with a disk tier a
 * request's stream is, as it parks: the disk then holds every finished turn). Returns whether it was. */
bool cb_streams_save(cb_streams *sc, int32_t s, cb_kv_ops *ops);
/* Every parked stream is queued to the host tier (as one leaving it is): a drain. Returns how many. */
int32_t cb_streams_save_all(cb_streams *sc, cb_kv_ops *ops);

#endif
