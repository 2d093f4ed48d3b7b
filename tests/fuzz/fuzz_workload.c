/* libFuzzer: workload JSONL (cobatch bench --workload FILE). Text prompts are "tokenized" one
 * token a byte. */
#include "../../src/bench/workload.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t *bytes(void *ctx, const char *text, int32_t *n) {
    (void)ctx;
    size_t k = strlen(text);
    int32_t *t = malloc(sizeof(int32_t) * (k + 1));
    for (size_t i = 0; t && i < k; i++)
        t[i] = (unsigned char)text[i];
    *n = (int32_t)k;
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fmemopen((void *)data, size, "r");
    if (!f) return 0;
    cb_workload w;
    bool arrivals;
    char err[256];
    if (cb_workload_read_jsonl(f, "fuzz.jsonl", bytes, NULL, &w, &arrivals, err, sizeof(err)) == 0) {
        for (int i = 0; i < w.n; i++)
            if (w.items[i].n_in < 1 || w.items[i].n_out < 1 || !w.items[i].tokens) abort();
        cb_workload_free(&w);
    }
    fclose(f);
    return 0;
}
