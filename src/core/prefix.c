#include "prefix.h"
#include "../util/buf.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- nodes ---------------------- */

static int32_t node_end(const cb_pnode *x) { return x->start + x->len; }

static void node_free(cb_pnode *x) {
    for (int32_t i = 0; i < x->n_kids; i++)
        node_free(x->kids[i]);
    free(x->kids);
    free(x->tok);
    free(x);
}

static bool kids_add(cb_pnode *p, cb_pnode *k) {
    if (!cb_grow((void **)&p->kids, &p->cap_kids, (size_t)p->n_kids + 1, sizeof(*p->kids), 2)) return false;
    p->kids[p->n_kids++] = k;
    k->parent = p;
    return true;
}

static void kids_remove(cb_pnode *p, const cb_pnode *k) {
    for (int32_t i = 0; i < p->n_kids; i++) {
        if (p->kids[i] == k) {
            p->kids[i] = p->kids[--p->n_kids];
            return;
        }
    }
}

/* O(kids): fan-out is the number of distinct continuations of one prefix, small in practice. */
static cb_pnode *kid_starting(const cb_pnode *p, int32_t tok) {
    for (int32_t i = 0; i < p->n_kids; i++)
        if (p->kids[i]->tok[0] == tok) return p->kids[i];
    return NULL;
}

static cb_pnode *node_new(const int32_t *tok, int32_t start, int32_t len, int32_t holder) {
    cb_pnode *x = calloc(1, sizeof(*x));
    int32_t *t = malloc(sizeof(int32_t) * (size_t)len);
    if (!x || !t) {
        free(x);
        free(t);
        return NULL;
    }
    memcpy(t, tok, sizeof(int32_t) * (size_t)len);
    x->tok = t;
    x->start = start;
    x->len = len;
    x->holder = holder;
    return x;
}

/* ---------------------------------------------------------------- lifecycle ------------------ */

int cb_prefix_init(cb_prefix *px, cb_kv *kv, int32_t max_holders) {
    memset(px, 0, sizeof(*px));
    px->held = calloc((size_t)kv->n_seq, sizeof(int32_t));
    if (!px->held) return -1;
    px->kv = kv;
    px->max_holders = max_holders;
    px->root.holder = -1;
    return 0;
}

void cb_prefix_free(cb_prefix *px) {
    for (int32_t i = 0; i < px->root.n_kids; i++)
        node_free(px->root.kids[i]);
    free(px->root.kids);
    free(px->held);
    memset(px, 0, sizeof(*px));
}

/* ---------------------------------------------------------------- lookup and locks ----------- */

int32_t cb_prefix_match(const cb_prefix *px, const int32_t *toks, int32_t n, cb_pnode **node) {
    const cb_pnode *at = &px->root;
    int32_t pos = 0;
    while (pos < n) {
        const cb_pnode *k = kid_starting(at, toks[pos]);
        if (!k) break;
        int32_t j = 0;
        while (j < k->len && pos + j < n && k->tok[j] == toks[pos + j])
            j++;
        pos += j;
        at = k;
        if (j < k->len) break;
    }
    *node = (cb_pnode *)at;
    return pos;
}

void cb_prefix_lock(cb_prefix *px, cb_pnode *node) {
    int64_t now = ++px->clock;
    for (cb_pnode *x = node; x; x = x->parent) {
        if (x->refs++ == 0) px->locked_cells += x->len;
        x->last_use = now;
    }
}

void cb_prefix_unlock(cb_prefix *px, cb_pnode *node) {
    int64_t now = ++px->clock;
    for (cb_pnode *x = node; x; x = x->parent) {
        if (--x->refs == 0) px->locked_cells -= x->len;
        x->last_use = now;
    }
}

void cb_prefix_share(const cb_prefix *px, const cb_pnode *node, int32_t n, int32_t seq, cb_kv_ops *ops) {
    (void)px;
    if (n > 0 && node->holder >= 0) cb_kv_ops_push(ops, seq, node->holder, 0, n);
}

/* ---------------------------------------------------------------- eviction ------------------- */

static void lru_leaf(cb_pnode *x, cb_pnode **best) {
    if (x->n_kids == 0) {
        if (x->refs == 0 && x->holder >= 0 && (!*best || x->last_use < (*best)->last_use)) *best = x;
        return;
    }
    for (int32_t i = 0; i < x->n_kids; i++)
        lru_leaf(x->kids[i], best);
}

/* Evicts the unlocked leaf x. Returns its cells. */
static int32_t evict_leaf(cb_prefix *px, cb_pnode *x, cb_kv_ops *ops) {
    int32_t h = x->holder, len = x->len;
    if (--px->held[h] == 0) { /* h held nothing else: drop all its tags and give its id back */
        cb_kv_ops_push(ops, h, -1, 0, -1);
        cb_kv_seq_release(px->kv, h);
        px->n_holders--;
    } else { /* h's chain now ends at x's parent */
        cb_kv_ops_push(ops, h, -1, x->start, -1);
    }
    cb_kv_unshare(px->kv, len);
    kids_remove(x->parent, x);
    x->n_kids = 0; /* a leaf: node_free must not walk anything */
    node_free(x);
    px->n_nodes--;
    px->evicted_cells += len;
    return len;
}

/* Evicts the least recently used unlocked leaf. Returns its cells, 0 when there is none. */
static int32_t evict_one(cb_prefix *px, cb_kv_ops *ops) {
    cb_pnode *x = NULL;
    lru_leaf(&px->root, &x);
    return x ? evict_leaf(px, x, ops) : 0;
}

int32_t cb_prefix_evict(cb_prefix *px, int32_t n, cb_kv_ops *ops) {
    int32_t freed = 0;
    while (freed < n) {
        cb_pnode *x = NULL;
        lru_leaf(&px->root, &x);
        if (!x) break;
        int32_t want = n - freed;
        if (x->len <= want) {
            freed += evict_leaf(px, x, ops);
            continue;
        }
        /* the leaf keeps its head: its holder's chain still ends at x, now shorter */
        int32_t keep = x->len - want;
        cb_kv_ops_push(ops, x->holder, -1, x->start + keep, -1);
        cb_kv_unshare(px->kv, want);
        x->len = keep;
        px->evicted_cells += want;
        freed += want;
    }
    return freed;
}

static bool has_free_id(const cb_kv *kv) {
    for (int32_t s = 0; s < kv->n_seq; s++)
        if (!kv->taken[s]) return true;
    return false;
}

bool cb_prefix_evict_for_id(cb_prefix *px, cb_kv_ops *ops) {
    while (!has_free_id(px->kv))
        if (evict_one(px, ops) == 0) return false;
    return true;
}

/* A sequence id for a new holder, evicting to stay within max_holders; -1 if none can be had. */
static int32_t new_holder(cb_prefix *px, cb_kv_ops *ops) {
    while (px->n_holders >= px->max_holders)
        if (evict_one(px, ops) == 0) return -1;
    if (!cb_prefix_evict_for_id(px, ops)) return -1;
    int32_t h = cb_kv_seq_acquire(px->kv);
    if (h >= 0) px->n_holders++;
    return h;
}

/* ---------------------------------------------------------------- insertion ------------------ */

/* Cuts x after its first k tokens: a new node above x takes them (same holder and locks, so the
 * holder's chain stays contiguous and every lock through x still covers them). */
static cb_pnode *split(cb_prefix *px, cb_pnode *x, int32_t k) {
    cb_pnode *parent = x->parent;
    cb_pnode *p = node_new(x->tok, x->start, k, x->holder);
    if (!p) return NULL;
    if (!kids_add(p, x)) {
        node_free(p);
        return NULL;
    }
    for (int32_t i = 0; i < parent->n_kids; i++)
        if (parent->kids[i] == x) parent->kids[i] = p;
    p->parent = parent;
    p->refs = x->refs;
    p->last_use = x->last_use;
    memmove(x->tok, x->tok + k, sizeof(int32_t) * (size_t)(x->len - k));
    x->start += k;
    x->len -= k;
    x->parent = p;
    px->held[p->holder]++;
    px->n_nodes++;
    return p;
}

void cb_prefix_cut(cb_prefix *px, cb_pnode **node, int32_t n) {
    cb_pnode *x = *node;
    if (!x || x == &px->root || n <= x->start || n >= node_end(x)) return;
    cb_pnode *p = split(px, x, n - x->start);
    if (p) *node = p;
}

bool cb_prefix_insert(cb_prefix *px, cb_pnode **node, const int32_t *toks, int32_t from, int32_t to, int32_t seq,
                      cb_kv_ops *ops) {
    if (to <= from) return true;
    cb_pnode *at;
    if (cb_prefix_match(px, toks, to, &at) != from) return false; /* someone published these first */
    if (at != &px->root && node_end(at) > from) {                 /* ends inside a node: cut it there */
        at = split(px, at, from - at->start);
        if (!at) return false;
    }
    /* A leaf's holder tags exactly its path, so it can take the new cells itself; anywhere else
     * the path forks and a new holder must tag the whole of it. */
    bool extend = at != &px->root && at->n_kids == 0;
    int32_t h = extend ? at->holder : new_holder(px, ops);
    if (h < 0 && at != &px->root && at->n_kids == 0) { /* making room for a holder evicted the fork */
        extend = true;
        h = at->holder;
    }
    if (h < 0) return false;
    cb_pnode *c = node_new(toks + from, from, to - from, h);
    if (!c || !kids_add(at, c)) {
        if (c) node_free(c);
        if (!extend && px->held[h] == 0) { /* give the unused holder back */
            cb_kv_seq_release(px->kv, h);
            px->n_holders--;
        }
        return false;
    }
    cb_kv_ops_push(ops, h, seq, extend ? from : 0, to);
    px->held[h]++;
    px->n_nodes++;
    cb_kv_share(px->kv, seq, to - from);
    cb_prefix_lock(px, c);
    cb_prefix_unlock(px, *node);
    *node = c;
    return true;
}

/* ---------------------------------------------------------------- checks --------------------- */

static bool check_node(const cb_prefix *px, const cb_pnode *x, int64_t *cells, int64_t *locked, int32_t *held,
                       int32_t *nodes) {
    for (int32_t i = 0; i < x->n_kids; i++) {
        const cb_pnode *k = x->kids[i];
        if (k->parent != x || k->len < 1 || k->start != node_end(x) || k->refs > x->refs || k->refs < 0) return false;
        if (k->holder < 0 || k->holder >= px->kv->n_seq || !px->kv->taken[k->holder]) return false;
        for (int32_t j = 0; j < i; j++)
            if (x->kids[j]->tok[0] == k->tok[0]) return false;
        *cells += k->len;
        *locked += k->refs > 0 ? k->len : 0;
        held[k->holder]++;
        (*nodes)++;
        if (!check_node(px, k, cells, locked, held, nodes)) return false;
    }
    return true;
}

bool cb_prefix_check(const cb_prefix *px) {
    int32_t *held = calloc((size_t)px->kv->n_seq, sizeof(int32_t));
    if (!held) return false;
    int64_t cells = 0, locked = 0;
    int32_t nodes = 0, holders = 0;
    bool ok = check_node(px, &px->root, &cells, &locked, held, &nodes);
    for (int32_t s = 0; ok && s < px->kv->n_seq; s++) {
        ok = held[s] == px->held[s] && (held[s] == 0 || px->kv->used[s] == 0);
        holders += held[s] > 0;
    }
    free(held);
    return ok && cells == px->kv->shared && locked == px->locked_cells && nodes == px->n_nodes &&
           holders == px->n_holders && holders <= px->max_holders;
}
