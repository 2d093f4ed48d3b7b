#include "repack.h"

#include <stdio.h>

const char *cb_repack_mode_name(cb_repack_mode mode) {
    switch (mode) {
    case CB_REPACK_ON: return "on";
    case CB_REPACK_OFF: return "off";
    default: return "auto";
    }
}

/* The AMX half of the reason, for every mode but off. */
static const char *amx_reason(cb_cpu_features f, bool amx) {
    if (amx) return "AMX on (--repack on; its kernels fault on some hosts)";
    if (!f.cpu_amx) return "no AMX on this CPU";
    if (!f.ggml_amx) return "AMX: this llama.cpp build has no AMX kernels";
    return "AMX off: known ggml fault (ggml_backend_amx_mul_mat segfaults on some hosts); --repack on to force it";
}

cb_repack_decision cb_repack_decide(cb_cpu_features f, cb_repack_mode mode) {
    cb_repack_decision d = {0};
    if (mode == CB_REPACK_OFF) {
        snprintf(d.why, sizeof(d.why), "repacking off (--repack off): weights as the file has them%s",
                 f.cpu_amx ? ", AMX not used" : "");
        return d;
    }
    d.repack = f.ggml_pack;
    d.amx = mode == CB_REPACK_ON && f.cpu_amx && f.ggml_amx;
    snprintf(d.why, sizeof(d.why), "%s; %s", d.repack ? "interleaved CPU repacks on" : "no CPU repacks offered",
             amx_reason(f, d.amx));
    return d;
}
