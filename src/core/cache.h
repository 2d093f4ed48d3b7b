/* cache.h — the prefix cache as the scheduler sees it: one interface, four implementations.
 *
 *   cb_cache_new_radix    unified KV layout: a radix tree of published prompt prefixes whose cells
 *                         sequences share without a copy (prefix.h)
 *   cb_cache_new_streams  split layout: every stream a request leaves stays as a cache entry, and
 *                         a new request takes or copies the one sharing its longest prefix
 *                         (streams.h)
 *   cb_cache_new_host     unified layout, no sharing in the pool: what a request computed goes to
 *                         the host tier when it leaves, and comes back to a request that continues
 *                         it (the long lane's pool)
 *   cb_cache_new_none     no sharing; in the split layout it still keeps running streams in one
 *                         block (cb_cache_arrange)
 *
 * The scheduler holds one cb_cache and never asks which it is; a request holds an opaque
 * cb_cache_slot. Every change to llama.cpp's cells is queued on the cb_kv_ops passed in, and the
 * accounting in cb_kv follows at once. Pure logic, no llama.h. Engine thread only. */
#ifndef CB_CACHE_H
#define CB_CACHE_H

#include "kv.h"
#include "prefix.h"
#include "request.h"
#include "streams.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct cb_cache cb_cache;

/* Where an admission's prefix can come from: len tokens, found by cb_cache_match (match: what it
 * found, len may be lowered to compute some of it again). The other fields belong to the
 * implementation. */
typedef struct {
    int32_t len, match;
    void *node;  /* radix: the tree node the match ends in */
    int32_t src; /* streams: the stream holding the tokens, running or parked */
    void *host;  /* streams: else the host-tier entry holding them (hostcache.h); then src holds
                    src_len of them, or is -1 */
    int32_t src_len;
    int32_t floor; /* len may not be lowered under this (a sliding-window model's loaded cells: streams.h);
                      0: any length will do */
} cb_cache_hit;

typedef struct {
    int64_t query_tokens, hit_tokens; /* tokens admissions asked for, and found cached */
    int64_t evicted_cells;
    int64_t copies; /* streams: whole-stream copies */
    int32_t cells;  /* cells the cache holds */
    int32_t idle;   /* of those, cells no running request uses: free on demand */
} cb_cache_stats;

/* Each takes kv (not owned; it must outlive the cache). Return NULL on bad sizes or allocation
 * failure. radix: unified layout, up to max_holders sequence ids of kv for its own cells, and
 * idle cells beyond max_idle evicted at each step (0: no cap). streams: split layout, ids
 * [0, n_run) run requests and the rest hold copies; a match shorter than min_share is not worth a
 * stream copy; host (NULL: none; not owned, it must outlive the cache) is the host-memory tier.
 * An admission from the host tier queues CB_KV_OP_LOAD with the request as ref and r->cache.host
 * set, locked (the runner unlocks it); when the load fails the runner sets r->cache.load_failed. */
cb_cache *cb_cache_new_radix(cb_kv *kv, int32_t max_holders, int32_t max_idle);
cb_cache *cb_cache_new_streams(cb_kv *kv, int32_t n_run, int32_t min_share, cb_host_cache *host);
cb_cache *cb_cache_new_none(cb_kv *kv);
/* host: unified kv only; entries of this kind (hostcache.h) are stashed (CB_KV_OP_STASH, as a
 * release's first op, unless a swap saves the request) and loaded (CB_KV_OP_LOAD, as streams' are);
 * a match shorter than min_share, or that costs more to load than to compute, is not taken. With no
 * tier (NULL or cap 0) it is cb_cache_new_none. */
cb_cache *cb_cache_new_host(cb_kv *kv, cb_host_cache *host, int32_t kind, int32_t min_share);
/* Frees the cache's records; queues nothing (the caller drops or clears llama.cpp's cells). */
void cb_cache_free(cb_cache *c);

/* Longest prefix of r's tokens, all but its last (computed again for its logits), that an
 * admission could share now: cached cells or, for streams, what a running request computed; none
 * longer than the rows a request wanting every prompt row's logits has (all_logits_from). Read-only. */
cb_cache_hit cb_cache_match(const cb_cache *c, const cb_request *r, cb_request *const *running, int32_t n_running);
/* A hit of nothing that an admission still publishes from (radix: the tree's root, as a match of
 * nothing finds): r computes its whole prompt and leaves it as cache as any request does. */
cb_cache_hit cb_cache_miss(const cb_cache *c);

/* Starts r: a sequence id with hit->len tokens shared (hit->len may drop: a match too short to be
 * worth a copy is not taken) and room for `need` more cells, `outstanding` of the free cells being
 * promised to running requests already. Evicts idle cache for the room. Returns the id (taken in
 * kv, r->cache filled, r->seq_id not set) or -1 when r cannot start now (nothing changed). */
int32_t cb_cache_admit(cb_cache *c, cb_request *r, cb_cache_hit *hit, int32_t need, int32_t outstanding,
                       cb_kv_ops *ops);

/* r leaves its sequence (finished or preempted, r->seq_id >= 0): what it computed stays as cache
 * where the implementation keeps it, the id is freed. r->seq_id is left for the caller to reset. */
void cb_cache_release(cb_cache *c, cb_request *r, cb_kv_ops *ops);

/* Swap preemption (swap.h). cb_cache_pin: running r is about to leave with its cells saved to host
 * memory; the part of its cached prefix that other requests use too stays in the cache under a hold
 * r keeps (r->swap.pin) until it comes back: returns that length (cells not to save), or -1 when
 * this cache cannot restore a sequence (the split layout: a restore writes a stream at once, ahead
 * of the whole-stream copies queued before it; a preempted stream stays parked anyway).
 * cb_cache_unpin lets the hold go (r dropped its swap). */
int32_t cb_cache_pin(cb_cache *c, cb_request *r);
void cb_cache_unpin(cb_cache *c, cb_request *r);

/* Starts r back from swap: as cb_cache_admit with its pinned prefix [0, r->swap.from) as the hit,
 * and the restore of its saved cells [from, to) queued (CB_KV_OP_RESTORE) after the room it makes
 * and before the prefix is shared (a restore empties the sequence first). The pin becomes r's lock;
 * the restored cells count as r's own. Returns the id, or -1 when r cannot start now (nothing
 * changed). */
int32_t cb_cache_admit_swapped(cb_cache *c, cb_request *r, int32_t need, int32_t outstanding, cb_kv_ops *ops);

/* r's tokens [0, to) are computed: prompt cells are published as they are made, so a request
 * sharing them can start before r ends (radix; the others find running requests directly). */
void cb_cache_publish(cb_cache *c, cb_request *r, int32_t to, cb_kv_ops *ops);

/* Whether the prompt r is computing becomes shareable, chunk by chunk, to whoever matches it: an
 * admission that shares more with it than with the cache does better to wait a step. */
bool cb_cache_in_flight(const cb_cache *c, const cb_request *r);
/* The shortest shared prefix worth waiting for (0: the cache shares nothing). */
int32_t cb_cache_min_share(const cb_cache *c);

/* Evicts idle cache until n cells are free in kv (or nothing idle is left): the cache gives way
 * before anyone is preempted. */
void cb_cache_make_room(cb_cache *c, int32_t n, cb_kv_ops *ops);

/* Before a step: idle cache beyond its cap goes, and in the split layout running requests move
 * into one block of stream ids (llama.cpp runs every block of consecutive ids as a graph run of
 * its own) unless may_move is false (admissions are about to fill the holes). Returns the
 * requests moved (their seq_id changed). */
int32_t cb_cache_arrange(cb_cache *c, cb_request *const *running, int32_t n_running, bool may_move, cb_kv_ops *ops);

/* Evicts every cached prefix no running request uses (and the host tier's unlocked entries).
 * Returns the cells freed. */
int32_t cb_cache_drop(cb_cache *c, cb_kv_ops *ops);

/* Every cached conversation the pool holds that the host tier does not is queued to it
 * (CB_KV_OP_STASH; streams: each parked stream; a drain, before the disk tier's last writes).
 * Returns how many were queued. */
int32_t cb_cache_save_all(cb_cache *c, cb_kv_ops *ops);
/* A load from the host tier that an admission counted as `tokens` hit tokens could not be made: stream
 * seq holds nothing. */
void cb_cache_load_failed(cb_cache *c, int32_t seq, int32_t tokens);

/* A decode ran: the stream copies queued before it are made (streams: stash and load may name
 * those streams again). */
void cb_cache_settled(cb_cache *c);

void cb_cache_get_stats(const cb_cache *c, cb_cache_stats *out);

/* Tokens a sequence id that runs nothing holds in llama.cpp (a parked stream's; 0 for others),
 * for the engine's check of llama.cpp's cells against the accounting. */
int32_t cb_cache_parked_len(const cb_cache *c, int32_t seq);

/* Debug invariant of the implementation and of kv. */
bool cb_cache_check(const cb_cache *c);

/* For tests: the implementation's own records (NULL when it is another one). */
const cb_prefix *cb_cache_prefix(const cb_cache *c);
const cb_streams *cb_cache_streams(const cb_cache *c);

#endif
