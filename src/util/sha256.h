/* sha256.h — SHA-256 of a file, to name the exact model a benchmark ran (FIPS 180-4). */
#ifndef CB_SHA256_H
#define CB_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t bits;
    uint8_t buf[64];
    size_t used;
} cb_sha256;

void cb_sha256_init(cb_sha256 *s);
void cb_sha256_update(cb_sha256 *s, const void *data, size_t n);
void cb_sha256_final(cb_sha256 *s, uint8_t out[32]);
/* Hex digest of a whole file into hex (65 bytes). Returns 0, or -1 if it cannot be read. */
int cb_sha256_file(const char *path, char hex[65]);

#endif
