/* embd.h — when the engine's embedding passes run beside generation, and how many tokens each takes.
 *
 * A pass is one llama_decode of whole inputs in the embedding context; every decoding request waits
 * for it, as for a long step. While generation runs, embeddings may take a share s of the engine's
 * time: each step beside generation earns s / (1 - s) of the step's generation time as credit, and a
 * pass takes the whole inputs the credit pays for at the measured cost of a pass, then spends its real
 * time. So over any run of steps embeddings take about s of the time and generation keeps 1 - s of its
 * speed; an input that one step's earnings do not cover waits a few steps for it (one longer gap then,
 * never more than a full pass). The credit is capped at a full pass, so an idle spell buys no burst.
 * With nothing generating a pass takes the whole context every step.
 *
 * A pass costs a fixed part (a pass over the weights, whatever its rows) and a part a token: on a CPU
 * a pass of 12 tokens took most of what one of 48 took. The pace fits both to the passes it saw (least
 * squares, recent passes weighing more), so that the credit buys as many inputs as one pass can carry
 * for it. Pure: the engine passes the times in. */
#ifndef CB_EMBD_H
#define CB_EMBD_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    double share;     /* of the engine's time while generation runs, in (0, 1]; >= 1: no bound */
    double credit_us; /* time earned beside generation and not yet spent (a pass may overdraw it) */
    /* the passes seen, weighted (recent ones more): sums of 1, tokens, us, tokens^2, tokens x us */
    double w, x, y, xx, xy;
} cb_embd_pace;

void cb_embd_pace_init(cb_embd_pace *p, double share);

/* What a pass of n tokens costs, as fitted (fallback_us a token and nothing fixed before a pass is
 * measured); 0 when nothing is known. */
double cb_embd_pace_cost(const cb_embd_pace *p, int32_t n, double fallback_us);

/* The tokens this step's pass may take: whole inputs, oldest first, of which the first (the oldest
 * waiting one) has `head` tokens; at most `max` (the context). gen_us: the time the step's generation
 * took, 0 when it ran none (then: max). Beside generation the step earns its credit here, and the
 * answer is the most tokens whose pass the credit pays for (with no cost known, `head`: one input, to
 * measure it), or 0 while that is less than `head`: the credit grows over the next steps until it
 * covers it. */
int32_t cb_embd_pace_tokens(cb_embd_pace *p, int64_t gen_us, int32_t head, int32_t max, double fallback_us);

/* A pass of `tokens` tokens took `us`; beside: the step ran generation too (the pass spends credit). */
void cb_embd_pace_note(cb_embd_pace *p, int32_t tokens, int64_t us, bool beside, int32_t max);

#endif
