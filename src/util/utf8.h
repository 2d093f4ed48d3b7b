/* utf8.h — UTF-8 checks every layer uses: what of a text is valid, and a copy with the rest
 * replaced. Pure, no allocation. */
#ifndef CB_UTF8_H
#define CB_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Length of the longest prefix of s[0, n) that is valid UTF-8 and does not end inside a character
 * that could still be completed. Bytes after it are either an unfinished character (when
 * *incomplete is set) or invalid. */
size_t cb_utf8_valid_prefix(const char *s, size_t n, bool *incomplete);

/* Copies s[0, n) to out (room for 3n + 1 bytes) with every byte that is not part of valid UTF-8
 * replaced by U+FFFD, NUL-terminated. Returns the bytes written. */
size_t cb_utf8_sanitize(const char *s, size_t n, char *out);

/* Bytes at the end of s[0, n) that start a character still waiting for its other bytes (0-3). */
size_t cb_utf8_unfinished_tail(const char *s, size_t n);

#endif
