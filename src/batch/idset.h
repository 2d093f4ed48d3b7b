/* idset.h — a set of strings (custom_ids): open addressing, linear probing, grows at half full.
 * Pure; one thread per set. */
#ifndef CB_IDSET_H
#define CB_IDSET_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char **slots; /* (cap) owned copies, NULL = empty slot */
    size_t cap, n;
} cb_idset;

/* An empty set; no allocation until the first add. */
void cb_idset_init(cb_idset *s);
/* Adds a copy of key. Returns 1 if added, 0 if it was there already, -1 on allocation failure
 * (the set is unchanged). */
int cb_idset_add(cb_idset *s, const char *key);
bool cb_idset_has(const cb_idset *s, const char *key);
void cb_idset_free(cb_idset *s);

#endif
