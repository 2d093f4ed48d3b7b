/* embd.c — the embedding passes' share of the engine's time (embd.h). */
#include "embd.h"

/* How much a pass seen before weighs against the next one: about the last ten passes count. */
#define CB_EMBD_FORGET 0.9

void cb_embd_pace_init(cb_embd_pace *p, double share) { *p = (cb_embd_pace){.share = share}; }

/* The fitted cost: its fixed part and its part a token (both >= 0). With passes of one size alone the
 * two cannot be told apart: all of it a token, which overstates a larger pass (the safe side). */
static void fit(const cb_embd_pace *p, double fallback_us, double *fixed, double *per) {
    *fixed = 0;
    *per = p->x > 0 ? p->y / p->x : fallback_us > 0 ? fallback_us : 0;
    double d = p->w * p->xx - p->x * p->x;
    if (p->w <= 0 || d <= 1e-9 * p->w * p->xx) return;
    double slope = (p->w * p->xy - p->x * p->y) / d, at0 = (p->y - slope * p->x) / p->w;
    if (slope > 0 && at0 >= 0) *fixed = at0, *per = slope;
}

double cb_embd_pace_cost(const cb_embd_pace *p, int32_t n, double fallback_us) {
    double fixed, per;
    fit(p, fallback_us, &fixed, &per);
    return fixed + per * n;
}

int32_t cb_embd_pace_tokens(cb_embd_pace *p, int64_t gen_us, int32_t head, int32_t max, double fallback_us) {
    if (gen_us <= 0 || p->share >= 1) return max;
    double fixed, per;
    fit(p, fallback_us, &fixed, &per);
    if (per <= 0) return head;      /* nothing measured yet: one input, and its pass is measured */
    double cap = fixed + per * max; /* a full pass: an idle spell buys no burst beyond it */
    p->credit_us += (double)gen_us * p->share / (1 - p->share);
    if (p->credit_us > cap) p->credit_us = cap;
    double n = (p->credit_us - fixed) / per + 1e-6; /* (a whole count is not cut by rounding) */
    if (n < head) return 0;
    return n >= max ? max : (int32_t)n;
}

void cb_embd_pace_note(cb_embd_pace *p, int32_t tokens, int64_t us, bool beside, int32_t max) {
    if (tokens > 0 && us > 0) {
        double x = tokens, y = (double)us, f = CB_EMBD_FORGET;
        p->w = p->w * f + 1;
        p->x = p->x * f + x;
        p->y = p->y * f + y;
        p->xx = p->xx * f + x * x;
        p->xy = p->xy * f + x * y;
    }
    if (!beside) return;
    p->credit_us -= (double)us;
    double floor = -cb_embd_pace_cost(p, max, 0); /* a pass that overran its estimate owes a full pass at most */
    if (p->credit_us < floor) p->credit_us = floor;
}
