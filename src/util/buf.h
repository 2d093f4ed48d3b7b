/* buf.h — a growable string, and the one way arrays grow.
 *
 * A cb_buf is redis's sds in spirit (a whole small module: append, format, take), kept as a plain
 * struct: its bytes are always NUL-terminated, and running out of memory sticks (failed), so a
 * caller builds a whole text and checks once. A zeroed cb_buf is empty and ready. */
#ifndef CB_BUF_H
#define CB_BUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *s; /* (cap) NUL-terminated; NULL until something is appended */
    size_t len, cap;
    bool failed; /* an append ran out of memory or a format failed: the text is not whole */
} cb_buf;

/* Appends n bytes of p. Returns false (failed set, the text as it was) when memory runs out. */
bool cb_buf_append(cb_buf *b, const void *p, size_t n);
/* Appends the formatted text. Returns false (failed set) when memory runs out or the format fails. */
bool cb_buf_printf(cb_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The text so far ("" when nothing was appended). */
const char *cb_buf_str(const cb_buf *b);
/* Hands the bytes over (malloc'd, NUL-terminated, NULL when nothing was appended) and empties b. */
char *cb_buf_take(cb_buf *b, size_t *len);
void cb_buf_free(cb_buf *b);

/* Makes room for need elements of elem bytes in *items, which holds *cap: doubling, from first
 * at least. Returns false (nothing changed) when memory runs out or the size overflows. */
bool cb_grow(void **items, size_t *cap, size_t need, size_t elem, size_t first);

#endif
