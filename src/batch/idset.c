/* idset.c — string set for custom_ids. */
#include "idset.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash(const char *s) { /* FNV-1a */
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The slot holding key, or the empty slot where it would go. cap is a power of two. */
static size_t find(char **slots, size_t cap, const char *key) {
    size_t i = (size_t)hash(key) & (cap - 1);
    while (slots[i] && strcmp(slots[i], key) != 0)
        i = (i + 1) & (cap - 1);
    return i;
}

static int grow(cb_idset *s) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    char **slots = calloc(cap, sizeof(*slots));
    if (!slots) return -1;
    for (size_t i = 0; i < s->cap; i++)
        if (s->slots[i]) slots[find(slots, cap, s->slots[i])] = s->slots[i];
    free(s->slots);
    s->slots = slots;
    s->cap = cap;
    return 0;
}

void cb_idset_init(cb_idset *s) { memset(s, 0, sizeof(*s)); }

int cb_idset_add(cb_idset *s, const char *key) {
    if (cb_idset_has(s, key)) return 0;
    if (2 * (s->n + 1) > s->cap && grow(s) != 0) return -1;
    char *copy = strdup(key);
    if (!copy) return -1;
    s->slots[find(s->slots, s->cap, key)] = copy;
    s->n++;
    return 1;
}

bool cb_idset_has(const cb_idset *s, const char *key) {
    return s->cap && s->slots[find(s->slots, s->cap, key)] != NULL;
}

void cb_idset_free(cb_idset *s) {
    for (size_t i = 0; i < s->cap; i++)
        free(s->slots[i]);
    free(s->slots);
    memset(s, 0, sizeof(*s));
}
