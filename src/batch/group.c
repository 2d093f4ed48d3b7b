/* group.c — compact prefix tree, first-level prefix enlargement, prefix-sharing groups. */
#include "group.h"

#include <stdlib.h>
#include <string.h>

/* A node holds the tokens [start, start + len) of any prompt that passes through it; `ref` is
 * one such prompt. Children and the prompts that end exactly here are singly linked lists of
 * indices (-1 ends a list), so the whole tree is two arrays and no per-node allocation. */
typedef struct {
    int32_t ref, start, len;
    int32_t child, next;   /* first child, next sibling */
    int32_t end, end_last; /* prompts ending here: first, last (chained through tree.end_next) */
    int32_t leaves;        /* prompts ending in this subtree */
} node;

typedef struct {
    const cb_group_prompt *p;
    node *nodes; /* (cap) nodes[0] is the root */
    int32_t n_nodes, cap;
    int32_t *end_next; /* (n prompts) next prompt ending at the same node */
    int32_t *stack;    /* (cap) scratch for the walks */
    int32_t *walk;     /* (cap) the nodes in pre-order */
} tree;

#define N(i) (t->nodes[(i)])

/* ---------------------------------------------------------------- building ------------------ */

typedef struct {
    const int32_t *tok;
    int32_t n, idx;
} sorted_prompt;

static int cmp_prompt(const void *pa, const void *pb) {
    const sorted_prompt *a = pa, *b = pb;
    int32_t n = a->n < b->n ? a->n : b->n;
    for (int32_t i = 0; i < n; i++)
        if (a->tok[i] != b->tok[i]) return a->tok[i] < b->tok[i] ? -1 : 1;
    if (a->n != b->n) return a->n < b->n ? -1 : 1; /* a prefix sorts before its extensions */
    return (a->idx > b->idx) - (a->idx < b->idx);
}

static int32_t common_prefix(const sorted_prompt *a, const sorted_prompt *b) {
    int32_t n = a->n < b->n ? a->n : b->n, i = 0;
    while (i < n && a->tok[i] == b->tok[i])
        i++;
    return i;
}

static int32_t node_new(tree *t, int32_t ref, int32_t start, int32_t len) {
    int32_t i = t->n_nodes++;
    N(i) = (node){.ref = ref, .start = start, .len = len, .child = -1, .next = -1, .end = -1, .end_last = -1};
    return i;
}

static int32_t depth(const tree *t, int32_t i) { return t->nodes[i].start + t->nodes[i].len; }

static void add_end(tree *t, int32_t i, int32_t prompt) {
    t->end_next[prompt] = -1;
    if (N(i).end_last < 0)
        N(i).end = prompt;
    else
        t->end_next[N(i).end_last] = prompt;
    N(i).end_last = prompt;
}

/* Inserts the sorted prompts one by one, keeping the path of the previous one on a stack: the
 * next prompt leaves that path at depth lcp, splitting the node it leaves in the middle of. New
 * children are prepended (the newest child is the one a split may cut), then every list is
 * reversed so children come in token order. */
static void insert_sorted(tree *t, const sorted_prompt *s, int32_t n) {
    int32_t top = 0;
    t->stack[0] = node_new(t, -1, 0, 0);
    for (int32_t k = 0; k < n; k++) {
        int32_t l = k ? common_prefix(&s[k - 1], &s[k]) : 0, last = -1;
        while (depth(t, t->stack[top]) > l)
            last = t->stack[top--];
        int32_t up = t->stack[top];
        if (depth(t, up) < l) { /* `last` (up's newest child) is cut at depth l */
            int32_t mid = node_new(t, N(last).ref, depth(t, up), l - depth(t, up));
            N(mid).next = N(last).next;
            N(up).child = mid;
            N(mid).child = last;
            N(last).next = -1;
            N(last).len = depth(t, last) - l;
            N(last).start = l;
            t->stack[++top] = up = mid;
        }
        if (s[k].n == l) {
            add_end(t, up, s[k].idx);
            continue;
        }
        int32_t leaf = node_new(t, s[k].idx, l, s[k].n - l);
        N(leaf).next = N(up).child;
        N(up).child = leaf;
        add_end(t, leaf, s[k].idx);
        t->stack[++top] = leaf;
    }
    for (int32_t i = 0; i < t->n_nodes; i++) {
        int32_t prev = -1, c = N(i).child;
        while (c >= 0) {
            int32_t next = N(c).next;
            N(c).next = prev;
            prev = c;
            c = next;
        }
        N(i).child = prev;
    }
}

/* t->walk = every node in pre-order; reversed, it visits children before their parent. */
static void preorder(tree *t) {
    int32_t top = 0, n = 0;
    t->stack[0] = 0;
    while (top >= 0) {
        int32_t i = t->stack[top--];
        t->walk[n++] = i;
        for (int32_t c = N(i).child; c >= 0; c = N(c).next)
            t->stack[++top] = c;
    }
}

static void count_leaves(tree *t) {
    for (int32_t k = t->n_nodes - 1; k >= 0; k--) {
        int32_t i = t->walk[k], n = 0;
        for (int32_t e = N(i).end; e >= 0; e = t->end_next[e])
            n++;
        for (int32_t c = N(i).child; c >= 0; c = N(c).next)
            n += N(c).leaves;
        N(i).leaves = n;
    }
}

/* ---------------------------------------------------------------- enlargement (Algorithm 1) - */

/* Fork c and merge it with its child g? Gain: g's tokens computed once instead of leaves(g)
 * times. Penalty: c's tokens computed once more, unless g holds all c has left (c then vanishes). */
static bool should_fork(const tree *t, int32_t c, int32_t g) {
    const node *nc = &t->nodes[c], *ng = &t->nodes[g];
    bool all_left = nc->end < 0 && ng->leaves == nc->leaves;
    int64_t gain = (int64_t)(ng->leaves - 1) * ng->len, penalty = nc->len;
    return all_left || gain > penalty;
}

/* The merge step for node d, its children already enlarged: each child c gives up the children g
 * worth forking; g takes c's tokens in front of its own and becomes d's child, right after c. A c
 * left with no prompt is unlinked. */
static void maximize_reuse(tree *t, int32_t d) {
    int32_t cprev = -1;
    for (int32_t c = N(d).child; c >= 0;) {
        int32_t tail = c, gprev = -1;
        for (int32_t g = N(c).child; g >= 0;) {
            int32_t gnext = N(g).next;
            if (should_fork(t, c, g)) {
                if (gprev < 0)
                    N(c).child = gnext;
                else
                    N(gprev).next = gnext;
                N(c).leaves -= N(g).leaves;
                N(g).start = N(c).start;
                N(g).len += N(c).len;
                N(g).next = N(tail).next;
                N(tail).next = g;
                tail = g;
            } else {
                gprev = g;
            }
            g = gnext;
        }
        int32_t after = N(tail).next;
        if (N(c).leaves == 0) { /* everything forked away: its forks take its place */
            if (cprev < 0)
                N(d).child = N(c).next;
            else
                N(cprev).next = N(c).next;
        }
        cprev = tail;
        c = after;
    }
}

/* ---------------------------------------------------------------- groups -------------------- */

/* Appends the prompts of the subtree under c to g->order, in tree order. */
static void collect(tree *t, int32_t c, cb_grouping *g, cb_group *grp) {
    const cb_group_prompt *p = t->p;
    int32_t top = 0;
    t->stack[0] = c;
    while (top >= 0) {
        int32_t i = t->stack[top--];
        for (int32_t e = N(i).end; e >= 0; e = t->end_next[e]) {
            g->order[grp->first + grp->n++] = e;
            grp->prefill += p[e].n_tokens - grp->prefix_len;
            grp->decode += p[e].max_tokens;
        }
        /* push children last-first so the first child is visited first */
        int32_t k0 = top;
        for (int32_t ch = N(i).child; ch >= 0; ch = N(ch).next)
            t->stack[++top] = ch;
        for (int32_t a = k0 + 1, b = top; a < b; a++, b--) {
            int32_t x = t->stack[a];
            t->stack[a] = t->stack[b];
            t->stack[b] = x;
        }
    }
}

static int form_groups(tree *t, cb_grouping *g) {
    int32_t n_groups = 0;
    for (int32_t c = N(0).child; c >= 0; c = N(c).next)
        n_groups++;
    g->groups = calloc(n_groups ? (size_t)n_groups : 1, sizeof(*g->groups));
    if (!g->groups) return -1;
    int32_t at = 0;
    for (int32_t c = N(0).child; c >= 0; c = N(c).next) {
        cb_group *grp = &g->groups[g->n_groups++];
        grp->first = at;
        grp->prefix_len = N(c).len;
        grp->prefill = N(c).len;
        collect(t, c, g, grp);
        at += grp->n;
        g->group_tokens += grp->prefill;
    }
    return 0;
}

/* ---------------------------------------------------------------- public -------------------- */

static void tree_free(tree *t) {
    free(t->nodes);
    free(t->end_next);
    free(t->stack);
    free(t->walk);
}

int cb_group_build(const cb_group_prompt *prompts, int32_t n, bool enlarge, cb_grouping *out) {
    memset(out, 0, sizeof(*out));
    if (n < 0) return -1;
    for (int32_t i = 0; i < n; i++)
        if (prompts[i].n_tokens < 1 || !prompts[i].tokens) return -1;
    tree t = {.p = prompts, .cap = 2 * n + 1}; /* each prompt adds at most a leaf and a split */
    size_t cap = (size_t)t.cap, np = n ? (size_t)n : 1;
    t.nodes = malloc(cap * sizeof(*t.nodes));
    t.end_next = malloc(np * sizeof(*t.end_next));
    t.stack = malloc(cap * sizeof(*t.stack));
    t.walk = malloc(cap * sizeof(*t.walk));
    sorted_prompt *s = malloc(np * sizeof(*s));
    out->order = malloc(np * sizeof(*out->order));
    int rc = -1;
    if (!t.nodes || !t.end_next || !t.stack || !t.walk || !s || !out->order) goto done;
    for (int32_t i = 0; i < n; i++) {
        s[i] = (sorted_prompt){prompts[i].tokens, prompts[i].n_tokens, i};
        out->logical_tokens += prompts[i].n_tokens;
    }
    qsort(s, (size_t)n, sizeof(*s), cmp_prompt);
    insert_sorted(&t, s, n);
    for (int32_t i = 0; i < t.n_nodes; i++)
        out->tree_tokens += t.nodes[i].len;
    preorder(&t);
    count_leaves(&t);
    if (enlarge)
        for (int32_t k = t.n_nodes - 1; k >= 0; k--)
            maximize_reuse(&t, t.walk[k]);
    out->n_prompts = n;
    rc = form_groups(&t, out);
done:
    free(s);
    tree_free(&t);
    if (rc != 0) cb_grouping_free(out);
    return rc;
}

static int cmp_ratio(const void *pa, const void *pb) {
    const cb_group *a = pa, *b = pb;
    /* a before b when decode_a / prefill_a > decode_b / prefill_b; doubles: the products of
     * 64-bit sums can overflow int64 */
    double x = (double)a->decode * (double)b->prefill, y = (double)b->decode * (double)a->prefill;
    if (x != y) return x > y ? -1 : 1;
    return (a->first > b->first) - (a->first < b->first);
}

void cb_group_sort_by_ratio(cb_grouping *g) {
    if (g->n_groups > 1) qsort(g->groups, (size_t)g->n_groups, sizeof(*g->groups), cmp_ratio);
}

void cb_grouping_free(cb_grouping *g) {
    free(g->order);
    free(g->groups);
    memset(g, 0, sizeof(*g));
}
