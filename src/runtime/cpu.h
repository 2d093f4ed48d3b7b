/* cpu.h — the CPU backend's weight layouts on this host: reads the CPU's features, makes a model
 * load use only the buffer types a cb_repack_decision (core/repack.h) allows, and names the ones
 * a load used.
 *
 * llama.cpp's loader asks ggml's CPU backend for its "extra buffer types" (the proc address
 * "ggml_backend_dev_get_extra_bufts": a NULL-terminated array ggml keeps for the process) on every
 * load, and puts each weight in the first one that takes it. llama.h can only turn all of them off
 * (use_extra_bufts), so cb_cpu_bufts_apply rewrites that array, from a copy of what ggml offered
 * first, to the allowed ones: AMX can go while CPU_REPACK stays. The array is process-wide: a load
 * and the apply before it run under cb_cpu_load_lock. */
#ifndef CB_CPU_H
#define CB_CPU_H

#include "../core/repack.h"

#include <stdbool.h>
#include <stddef.h>

/* The host's features (CPUID and XCR0 for AMX; the buffer types this ggml offers). Any thread. */
cb_cpu_features cb_cpu_features_probe(void);

/* Serializes model loads: the buffer-type list and the load's log capture are process-wide. */
void cb_cpu_load_lock(void);
void cb_cpu_load_unlock(void);

/* Leaves ggml's extra buffer types as d allows (AMX kept only if d->amx, every other only if
 * d->repack) for the next load; returns the use_extra_bufts value that load should pass. Under
 * cb_cpu_load_lock. */
bool cb_cpu_bufts_apply(const cb_repack_decision *d);

/* Between begin and end (around llama_model_load_from_file, on the thread that loads), the
 * loader's "<name> model buffer size" log lines are collected: end writes the buffer names, comma-separated
 * in the loader's order ("CPU_REPACK,CPU_Mapped"), into out. cb_cpu_log_line takes every log line
 * (model.c's llama log callback passes them on). */
void cb_cpu_capture_begin(void);
void cb_cpu_capture_end(char *out, size_t cap);
void cb_cpu_log_line(const char *text);

#endif
