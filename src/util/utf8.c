#include "utf8.h"

#include <string.h>

/* Bytes a UTF-8 lead byte announces (1-4), 0 for a byte that cannot start a character. */
static int utf8_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

/* Whether s[0, n) (n <= len) is a valid start of the character led by s[0]: continuation bytes,
 * and the second-byte ranges that rule out overlongs, surrogates and code points > U+10FFFF. */
static bool utf8_prefix_ok(const unsigned char *s, int n) {
    for (int i = 1; i < n; i++) {
        unsigned char lo = 0x80, hi = 0xBF;
        if (i == 1) {
            if (s[0] == 0xE0) lo = 0xA0;
            if (s[0] == 0xED) hi = 0x9F;
            if (s[0] == 0xF0) lo = 0x90;
            if (s[0] == 0xF4) hi = 0x8F;
        }
        if (s[i] < lo || s[i] > hi) return false;
    }
    return true;
}

size_t cb_utf8_valid_prefix(const char *str, size_t n, bool *incomplete) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    if (incomplete) *incomplete = false;
    while (i < n) {
        int l = utf8_len(s[i]);
        if (l == 0) return i;
        if (i + (size_t)l > n) {
            if (incomplete) *incomplete = utf8_prefix_ok(s + i, (int)(n - i));
            return i;
        }
        if (!utf8_prefix_ok(s + i, l)) return i;
        i += (size_t)l;
    }
    return i;
}

size_t cb_utf8_unfinished_tail(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        int l = utf8_len(s[n - k]);
        if (l > 1) return (size_t)l > k && utf8_prefix_ok(s + n - k, (int)k) ? k : 0;
        if (l == 1 || (l == 0 && s[n - k] > 0xBF)) return 0; /* ASCII or a byte that starts nothing */
    }
    return 0;
}

size_t cb_utf8_sanitize(const char *s, size_t n, char *out) {
    size_t o = 0;
    while (n > 0) {
        size_t ok = cb_utf8_valid_prefix(s, n, NULL);
        memcpy(out + o, s, ok);
        o += ok;
        s += ok;
        n -= ok;
        if (n > 0) { /* one invalid byte (or an unfinished character at the very end) */
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            s++;
            n--;
        }
    }
    out[o] = '\0';
    return o;
}
