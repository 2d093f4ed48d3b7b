/* preempt.h — preemption, in one place: when a step's decode rows do not fit, the scheduler asks
 * for one victim at a time; the victim's cells are saved to host memory (swap.h) when copying them
 * back costs less than computing them again, else dropped, and it waits at the head of its
 * priority. A swap given up (the cache holds the cells after all, the request ended, its pinned
 * prefix blocks an idle engine) takes back what it queued. Core only, engine thread. */
#ifndef CB_PREEMPT_H
#define CB_PREEMPT_H

#include "sched_internal.h"

/* Preempts the running request that loses least by waiting (lowest aged priority, then youngest),
 * recording it in plan->preempted (or plan->failed, when the waiting queue cannot grow: it ends
 * with an error). may_swap: false when nothing could move this step (the victim may be admitted
 * again in this very step, and a queued save would keep it waiting): it recomputes. */
void cb_preempt_one(cb_sched *s, cb_plan *plan, bool may_swap);

/* r gives up its swap (restored from the cache instead, or ended): the hold and the bytes go; a
 * save or restore still queued is taken back. */
void cb_preempt_drop_swap(cb_sched *s, cb_request *r);

/* Swapped requests' pinned prefixes hold cells nobody runs on: their swaps are given up (counted as
 * lost: they recompute) so the cache may evict those cells. true if any was. */
bool cb_preempt_unpin_waiting(cb_sched *s);

#endif
