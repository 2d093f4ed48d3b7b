/* faultalloc.h — allocation failures on demand, for tests of the out-of-memory paths.
 *
 * A build with COBATCH_FAULT_ALLOC (the sanitizer build) compiles every cobatch library source with
 * this header forced in: malloc, calloc, realloc, strdup and strndup of cobatch's own code go
 * through a counter that, once armed, makes every Nth call fail. llama.cpp's allocations are not
 * touched (its C++ throws); cJSON's and libevent's are when the caller hooks them in
 * (cb_fault_alloc_hooks). In other builds arming does nothing and the functions are plain. */
#ifndef CB_FAULTALLOC_H
#define CB_FAULTALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Arms from the environment: COBATCH_FAIL_ALLOC="every=N[,seconds=S]" makes every Nth allocation
 * fail, for S seconds if given. Returns whether it armed (false without the variable, or in a build
 * without COBATCH_FAULT_ALLOC). */
bool cb_fault_alloc_arm_from_env(void);
/* Every Nth allocation fails from now on; 0 disarms. */
void cb_fault_alloc_set(uint64_t every);
/* Allocations made to fail so far. */
uint64_t cb_fault_alloc_failed(void);
/* Whether this build can inject (COBATCH_FAULT_ALLOC). */
bool cb_fault_alloc_available(void);

void *cb_fa_malloc(size_t n);
void *cb_fa_calloc(size_t n, size_t m);
void *cb_fa_realloc(void *p, size_t n);
char *cb_fa_strdup(const char *s);
char *cb_fa_strndup(const char *s, size_t n);

#if defined(COBATCH_FAULT_ALLOC) && !defined(CB_FAULTALLOC_IMPL)
#define malloc(n) cb_fa_malloc(n)
#define calloc(n, m) cb_fa_calloc(n, m)
#define realloc(p, n) cb_fa_realloc(p, n)
#define strdup(s) cb_fa_strdup(s)
#define strndup(s, n) cb_fa_strndup(s, n)
#endif

#endif
