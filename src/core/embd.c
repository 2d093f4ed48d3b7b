/* embd.c — the embedding passes' share of the engine's time (embd.h). */
#include "embd.h"

void cb_embd_pace_init(cb_embd_pace *p, double share) { *p = (cb_embd_pace){.share = share}; }

/* What a token costs now: measured, else the fallback; 0 when neither is known. */
static double token_cost(const cb_embd_pace *p, double fallback_us) {
    return p->pace.token_us > 0 ? p->pace.token_us : fallback_us > 0 ? fallback_us : 0;
}

int32_t cb_embd_pace_tokens(cb_embd_pace *p, int64_t gen_us, int32_t head, int32_t max, double fallback_us) {
    if (gen_us <= 0 || p->share >= 1) return max;
    double tok = token_cost(p, fallback_us);
    if (tok <= 0) return head; /* nothing measured yet: one input, and its pass is measured */
    double cap = tok * max;    /* a full pass: an idle spell buys no burst beyond it */
    p->credit_us += (double)gen_us * p->share / (1 - p->share);
    if (p->credit_us > cap) p->credit_us = cap;
    double n = p->credit_us / tok;
    if (n < head) return 0;
    return n >= max ? max : (int32_t)n;
}

void cb_embd_pace_note(cb_embd_pace *p, int32_t tokens, int64_t us, bool beside, int32_t max) {
    cb_pace_note(&p->pace, tokens, us);
    if (!beside) return;
    p->credit_us -= (double)us;
    double floor = -p->pace.token_us * max; /* a pass that overran its estimate owes at most a full pass */
    if (p->credit_us < floor) p->credit_us = floor;
}
