#include "swap.h"
#include "../util/util.h"

#include <stdlib.h>
#include <string.h>

/* Until measured: a CPU's prefill of a small model (~500 tokens/s) and a copy at ~2 GB/s. */
#define CB_SWAP_TOKEN_US 2000.0
#define CB_SWAP_BYTE_US (1.0 / 2000.0)

void cb_swap_init(cb_swap *sw, int64_t cap, double cell_bytes) {
    memset(sw, 0, sizeof(*sw));
    sw->cap = cap > 0 ? cap : 0;
    sw->cell_bytes = cell_bytes > 0 ? cell_bytes : 1;
    sw->token_us = CB_SWAP_TOKEN_US;
    sw->byte_us = CB_SWAP_BYTE_US;
}

bool cb_swap_choose(cb_swap *sw, cb_request *r, int32_t tokens) {
    if (!sw) return false;
    if (tokens <= 0 || sw->cap == 0) {
        sw->recomputed++;
        return false;
    }
    int64_t bytes = (int64_t)(tokens * sw->cell_bytes) + 4096; /* llama.cpp's header and cell records */
    double copy_us = 2.0 * (double)bytes * sw->byte_us, compute_us = tokens * sw->token_us;
    if (copy_us >= compute_us || sw->used + bytes > sw->cap) {
        sw->recomputed++;
        sw->refused += copy_us < compute_us;
        return false;
    }
    sw->used += bytes;
    if (sw->used > sw->peak) sw->peak = sw->used;
    r->swap.reserved = bytes;
    r->swap.state = CB_SWAP_SAVING;
    sw->swapped_out++;
    return true;
}

void cb_swap_end(cb_swap *sw, cb_request *r, bool restored) {
    if (r->swap.state == CB_SWAP_NONE) return;
    if (sw) {
        sw->used -= r->swap.reserved;
        if (restored) sw->swapped_in++;
        if (r->swap.state == CB_SWAP_FAILED) sw->lost++;
    }
    free(r->swap.data);
    memset(&r->swap, 0, sizeof(r->swap));
}

void cb_swap_note_copy(cb_swap *sw, size_t bytes, int32_t cells, int64_t us) {
    if (!sw || bytes == 0) return;
    sw->copied_bytes += (int64_t)bytes;
    sw->copy_us += us;
    sw->byte_us = cb_ewma(sw->byte_us, (double)(us > 0 ? us : 1) / (double)bytes, 0.2);
    if (cells > 0) sw->cell_bytes = (double)bytes / cells;
}

void cb_swap_note_prefill(cb_swap *sw, int32_t tokens, int64_t us) {
    if (!sw || tokens <= 0 || us <= 0) return;
    sw->token_us = cb_ewma(sw->token_us, (double)us / tokens, 0.2);
}
