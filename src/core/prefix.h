/* prefix.h — the prefix cache: a radix tree over token ids recording which prompt prefixes are
 * resident in the KV cache, so a request that starts with one shares its cells instead of
 * computing them again. Pure logic, no llama.h: every change to llama.cpp's cells is queued as a
 * cb_kv_op for the runner.
 *
 * How cells are held. llama.cpp's unified cache tags each cell with a set of sequence ids and
 * frees it when the last tag goes. A tree node covers tokens [start, start + len) of every path
 * through it; its cells are tagged by its holder, a sequence id of the pool (cb_kv) that belongs
 * to the cache, not to a request. Invariant: a holder tags exactly the cells of the path from the
 * root to the deepest node it holds, and the nodes it holds are a contiguous chain ending there.
 * So one op, copy(holder of D, request, 0, n), gives a request the first n tokens of any path
 * through D; and evicting a leaf is one op, remove(holder, leaf start, end), plus freeing the
 * holder when it holds nothing else.
 *
 * Accounting: a node's cells are counted once, in kv->shared; a request's cells beyond its cached
 * prefix are its own (kv->used[seq]) until it publishes them (cb_prefix_insert).
 * Requests lock the path they use (refs); only unlocked leaves are evicted, least recently used
 * first, and only when someone needs the cells or a sequence id. Engine thread only. */
#ifndef CB_PREFIX_H
#define CB_PREFIX_H

#include "kv.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cb_pnode cb_pnode;
struct cb_pnode {
    cb_pnode *parent;
    cb_pnode **kids; /* (cap_kids) children, each starting with a different token */
    int32_t n_kids;
    size_t cap_kids;
    int32_t *tok;  /* (len) the tokens of this edge; owned */
    int32_t start; /* position of tok[0]: the tokens on the path above it */
    int32_t len;
    int32_t holder;   /* sequence id whose cells are this node's; -1 for the root */
    int32_t refs;     /* requests using a path through this node */
    int64_t last_use; /* LRU clock */
};

typedef struct {
    cb_pnode root; /* empty sentinel */
    cb_kv *kv;
    int32_t max_holders; /* sequence ids the cache may hold at once */
    int32_t n_holders;
    int32_t *held; /* (kv->n_seq) nodes each holder holds; 0 for ids that are not holders */
    int32_t n_nodes;
    int32_t locked_cells; /* cells of nodes some request uses (refs > 0); the rest can be evicted */
    int64_t clock;
    int64_t evicted_cells;
} cb_prefix;

/* The cache uses kv's cells and sequence ids (unified layout only). Returns 0, or -1 on
 * allocation failure. */
int cb_prefix_init(cb_prefix *px, cb_kv *kv, int32_t max_holders);
/* Frees the tree (queues nothing: the caller drops the llama context or clears it). */
void cb_prefix_free(cb_prefix *px);

/* Longest cached prefix of toks[0, n): returns its length and, in *node, the node it ends in
 * (the root for 0). Read-only. */
int32_t cb_prefix_match(const cb_prefix *px, const int32_t *toks, int32_t n, cb_pnode **node);

/* A match of n tokens that ends inside *node: cuts the node there, so *node becomes the part the
 * match covers and a lock on it leaves the rest evictable. Unchanged when n ends at the node's end
 * or the cut cannot be allocated (the lock then covers the whole node, as before). */
void cb_prefix_cut(cb_prefix *px, cb_pnode **node, int32_t n);

/* A request starts (lock) or stops (unlock) using the path root..node. */
void cb_prefix_lock(cb_prefix *px, cb_pnode *node);
void cb_prefix_unlock(cb_prefix *px, cb_pnode *node);

/* Queues copy(holder, seq, 0, n) for a request that locked `node` with a match of n tokens. */
void cb_prefix_share(const cb_prefix *px, const cb_pnode *node, int32_t n, int32_t seq, cb_kv_ops *ops);

/* Publishes a request's cells: seq holds toks[0, to), of which [0, from) are the cached path it
 * locked at *node. Inserts toks[from, to) as a new node and moves those cells from seq to the
 * cache; *node becomes the new node (the request's lock moves with it). Returns true when the
 * cache took them; false (nothing changed) when another request published the same tokens first
 * (seq's cells are duplicates: they stay its own) or no sequence id is left for a new holder. */
bool cb_prefix_insert(cb_prefix *px, cb_pnode **node, const int32_t *toks, int32_t from, int32_t to, int32_t seq,
                      cb_kv_ops *ops);

/* Frees exactly min(n, idle cells): unlocked leaves, least recently used first, go whole while
 * they fit in what is left to free, and the last one loses only the tail it must (its head, often
 * a prompt others share, stays). Returns the cells freed. O(nodes) per leaf. */
int32_t cb_prefix_evict(cb_prefix *px, int32_t n, cb_kv_ops *ops);
/* Evicts until a sequence id is free in kv. Returns false when no unlocked leaf is left. */
bool cb_prefix_evict_for_id(cb_prefix *px, cb_kv_ops *ops);

/* Cells held by the cache (= kv->shared), and those of them no running request uses: free on
 * demand, so they count as free to a user (vLLM counts cached blocks nobody references so). */
static inline int32_t cb_prefix_cells(const cb_prefix *px) { return px->kv->shared; }
static inline int32_t cb_prefix_idle_cells(const cb_prefix *px) { return px->kv->shared - px->locked_cells; }

/* Debug invariant: node lengths sum to kv->shared, held[] counts match, refs never exceed the
 * parent's, children start where their parent ends with distinct first tokens. */
bool cb_prefix_check(const cb_prefix *px);

#endif
