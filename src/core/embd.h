/* embd.h — when the engine's embedding passes run beside generation, and how many tokens each takes.
 *
 * A pass is one llama_decode of whole inputs in the embedding context; every decoding request waits
 * for it, as for a long step. While generation runs, embeddings may take a share s of the engine's
 * time: each step beside generation earns s / (1 - s) of the step's generation time as credit, and a
 * pass takes the whole inputs the credit pays for at the measured cost of an embedding token, then
 * spends its real time. So over any run of steps embeddings take about s of the time and generation
 * keeps 1 - s of its speed; an input that one step's earnings do not cover waits a few steps for it
 * (one longer gap then, never more than a full pass). The credit is capped at a full pass, so an idle
 * spell buys no burst. With nothing generating a pass takes the whole context every step. Pure: the
 * engine passes the times in. */
#ifndef CB_EMBD_H
#define CB_EMBD_H

#include "plan.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    double share;     /* of the engine's time while generation runs, in (0, 1]; >= 1: no bound */
    double credit_us; /* time earned beside generation and not yet spent (a pass may overdraw it) */
    cb_pace pace;     /* what an embedding token costs (a pass's time over its tokens) */
} cb_embd_pace;

void cb_embd_pace_init(cb_embd_pace *p, double share);

/* The tokens this step's pass may take: whole inputs, oldest first, of which the first (the oldest
 * waiting one) has `head` tokens; at most `max` (the context). gen_us: the time the step's generation
 * took, 0 when it ran none (then: max). Beside generation the step earns its credit here, and the
 * answer is what the credit pays for at the measured cost a token (fallback_us a token until a pass is
 * measured; with neither, `head`: one input), or 0 while that is less than `head`: the credit grows
 * over the next steps until it covers it. */
int32_t cb_embd_pace_tokens(cb_embd_pace *p, int64_t gen_us, int32_t head, int32_t max, double fallback_us);

/* A pass of `tokens` tokens took `us`; beside: the step ran generation too (the pass spends credit). */
void cb_embd_pace_note(cb_embd_pace *p, int32_t tokens, int64_t us, bool beside, int32_t max);

#endif
