/* testing.h — hooks for tests of the engine's failure paths; not part of the public API (no
 * application has a reason to call them). Any thread; each takes effect at the engine's next
 * iteration. */
#ifndef CB_ENGINE_TESTING_H
#define CB_ENGINE_TESTING_H

#include <cobatch.h>

/* The kinds of work a fault is for: generation's context, or the embedding context. */
enum { COBATCH_TEST_GENERATE, COBATCH_TEST_EMBED };
/* Faults at the runtime boundary of a kind's context: its next `count` passes (llama_decode calls)
 * return rc without running (rc != 0); and for generation, the next decode that runs aborts through
 * llama.cpp's abort callback after abort_after_nodes graph nodes (> 0; nodes are counted over every
 * graph run of the batch, so a count past one run aborts in the middle of a batch of several). */
void cobatch_test_fault(cobatch_engine *e, int kind, int rc, int count, int64_t abort_after_nodes);

/* Graph nodes the last decode that had an abort count armed went through before it ended or
 * aborted (arm a count no batch reaches to measure a batch). */
int64_t cobatch_test_nodes_seen(cobatch_engine *e);

/* Events left unpolled beyond which the engine waits (default CB_EVENT_BACKLOG, 4096). Call before
 * submitting anything. */
void cobatch_test_set_event_backlog(cobatch_engine *e, int n);

/* Forgets the attention-path times this process measured or read (attn.c): the next engine reads
 * the cache file again, as a new process would. */
void cobatch_test_attn_forget(void);
/* The factor within which a probe's reference must time the same at its start and end for its
 * times to be kept (default 1.5); 0 keeps any probe (a test of the cache on a busy host). */
void cobatch_test_attn_steady(double tol);

#endif
