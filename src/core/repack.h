/* repack.h — which of ggml's CPU weight layouts a model load may use, decided from the CPU's
 * features and the operator's --repack flag. Pure logic, no llama.h: the runtime (runtime/cpu.h)
 * reads the features and applies the decision.
 *
 * ggml's CPU backend offers "extra buffer types" that repack weights at load time into layouts its
 * faster kernels read: CPU_REPACK (x86 and Arm interleaved Q4_0 / IQ4_NL / Q8_0 / K-quants for
 * AVX2, AVX-512 and NEON) and, on CPUs with Intel AMX (built with -march=native there), AMX. The
 * AMX kernels segfault in ggml_backend_amx_mul_mat on some AMX hosts (a ggml fault closed upstream
 * without a fix), on the first prompt of more than a few tokens. So `auto` keeps the interleaved
 * repacks and leaves AMX out; `on` takes every layout ggml offers, AMX included; `off` repacks
 * nothing (llama-server's --no-repack). */
#ifndef CB_REPACK_H
#define CB_REPACK_H

#include <stdbool.h>

typedef enum { CB_REPACK_AUTO = 0, CB_REPACK_ON, CB_REPACK_OFF } cb_repack_mode;

/* What the host offers: the CPU's AMX features (with the OS's leave to use its tiles), and
 * whether this ggml build has the AMX buffer type at all (built where the compiler targets AMX). */
typedef struct {
    bool cpu_amx;   /* CPUID says AMX-TILE and AMX-INT8 and the OS enabled tile state (XCR0) */
    bool ggml_amx;  /* ggml offers the AMX buffer type (compiled in and ready) */
    bool ggml_pack; /* ggml offers other repacking buffer types (CPU_REPACK, ...) */
} cb_cpu_features;

typedef struct {
    bool repack; /* the interleaved CPU repacks (every extra buffer type but AMX) */
    bool amx;    /* the AMX buffer type */
    char why[200];
} cb_repack_decision;

/* The decision for mode on a host with features f: never AMX unless mode is CB_REPACK_ON, the
 * other repacks unless mode is CB_REPACK_OFF, only what ggml offers; why says it in one line for
 * the start-up log ("AMX off: known ggml fault ...; --repack on to force it"). */
cb_repack_decision cb_repack_decide(cb_cpu_features f, cb_repack_mode mode);

/* "auto", "on" or "off". */
const char *cb_repack_mode_name(cb_repack_mode mode);

#endif
