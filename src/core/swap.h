/* swap.h — swap preemption: a preempted request's KV cells kept in host memory and put back when
 * it runs again, instead of computed again from its tokens (vLLM's SWAPPED state; seed 003).
 *
 * A cb_swap is the engine's swap space: a byte budget shared by the scheduler and the long lane,
 * and the two costs a victim is chosen by: recomputing a prompt token (measured from the engine's
 * steps) against copying a byte out and back in (measured from the saves and restores). A victim
 * is swapped when the copy costs less and its bytes fit, else recomputed. The copies themselves
 * are llama.cpp's (llama_state_seq_get_data_ext / set_data_ext), made by the runtime: the
 * scheduler queues them as cb_kv_ops (kv.h), the lane makes them at once. Pure logic, no llama.h.
 * Engine thread only. */
#ifndef CB_SWAP_H
#define CB_SWAP_H

#include "request.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    CB_SWAP_NONE = 0,
    CB_SWAP_SAVING,    /* the save is queued (the plan's ops have not run yet) */
    CB_SWAP_SAVED,     /* data holds its cells [from, to) */
    CB_SWAP_FAILED,    /* the save or the restore could not be made: it is recomputed */
    CB_SWAP_RESTORING, /* admitted: the plan's ops restore it (then NONE) */
} cb_swap_state;

typedef struct {
    int64_t cap;       /* bytes saved cells may take; 0: every preemption recomputes */
    int64_t used;      /* bytes reserved by requests swapped out (or being saved) */
    int64_t peak;      /* most used at once */
    double cell_bytes; /* one cell's K and V, as llama.cpp saves it (an estimate until a save measures it) */
    double token_us;   /* recomputing one prompt token (the engine measures its prefill steps) */
    double byte_us;    /* copying one byte out or in (measured by every save and restore) */
    int64_t swapped_out, swapped_in;
    int64_t recomputed;            /* preemptions that dropped their cells (swap off, too cheap to copy, no room) */
    int64_t refused;               /* of those, for want of swap space */
    int64_t lost;                  /* swaps that came to nothing (a save or restore failed): recomputed */
    int64_t copied_bytes, copy_us; /* all saves and restores: bytes and time */
} cb_swap;

/* cap in bytes; cell_bytes an estimate of a cell's size. */
void cb_swap_init(cb_swap *sw, int64_t cap, double cell_bytes);

/* A victim with `tokens` computed tokens to keep: whether to swap them (then their bytes are
 * reserved in r->swap.reserved and r->swap.state is SAVING) or recompute them (counted). sw may be
 * NULL (no swap space). */
bool cb_swap_choose(cb_swap *sw, cb_request *r, int32_t tokens);

/* r's swap ends (restored, dropped, or r finished): its bytes are given back and its data freed
 * (r->swap.pin is the cache's to release first). restored: r came back through it. */
void cb_swap_end(cb_swap *sw, cb_request *r, bool restored);

/* A save or restore of `bytes` took `us` microseconds; a step computed `tokens` prompt tokens
 * (and little else) in `us`: the costs follow (moving averages). */
void cb_swap_note_copy(cb_swap *sw, size_t bytes, int32_t cells, int64_t us);
void cb_swap_note_prefill(cb_swap *sw, int32_t tokens, int64_t us);

#endif
