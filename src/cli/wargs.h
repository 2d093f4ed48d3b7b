/* wargs.h — workload and arrival flags shared by `cobatch bench` and `cobatch loadgen`. */
#ifndef CB_WARGS_H
#define CB_WARGS_H

#include "../bench/workload.h"
#include "flags.h"

#include <cobatch.h>

typedef struct {
    const char *workload; /* a generator's name (default mixed) */
    const char *file;     /* --workload-file: JSONL instead of a generator */
    cb_workload_opts o;
    double rate, burstiness; /* --request-rate (0 = all at once), --burstiness */
    int concurrency;         /* --max-concurrency (0 = open loop) */
    double think_ms;         /* --think-ms (sessions) */
    bool text;               /* also give every item its prompt as text (cb_work_item.text) */
} cb_wargs;

void cb_wargs_init(cb_wargs *a);
/* The workload and arrival flags (flags.h), writing into a (not owned; it must outlive the group). */
#define CB_WARGS_FLAGS 24
cb_flag_group cb_wargs_flags(cb_flag *room, cb_wargs *a);
/* Makes the workload in tokens of ep's model (loads its vocabulary), sets arrival times. Writes
 * the model's name into model_name. Returns 0, or -1 with a message. */
int cb_wargs_build(const cb_wargs *a, const struct cobatch_engine_params *ep, cb_workload *w, char *model_name,
                   size_t name_len, char *err, size_t errlen);

#endif
