#include "attn.h"

#include <math.h>

enum { KV_F16 = 0, KV_F32 = 1, KV_BF16 = 2, KV_Q8_0 = 3 }; /* enum cobatch_kv_type's values */

/* The types an open (auto) type tries; a named one is itself. */
static int types_for(int type, int *out) {
    if (type != CB_ATTN_AUTO) {
        out[0] = type;
        return 1;
    }
    out[0] = KV_F16;
    out[1] = KV_BF16;
    out[2] = KV_F32;
    return 3;
}

int cb_attn_candidates(const cb_attn_ask *ask, cb_attn_path *out) {
    bool quant_v = ask->type_v != CB_ATTN_AUTO && ask->type_v >= KV_Q8_0;
    int fas[2], n_fa = 0;
    if (ask->fa != 0) fas[n_fa++] = 1; /* on first: the reference */
    if (ask->fa != 1 && !quant_v) fas[n_fa++] = 0;
    const char *off_why = ask->fa == 0      ? NULL
                          : ask->unified    ? "the unified layout"
                          : ask->exact_hits ? "exact cache hits"
                                            : NULL;
    int ks[3], vs[3], nk = types_for(ask->type_k, ks), nv = types_for(ask->type_v, vs);
    bool pair = ask->type_k == CB_ATTN_AUTO && ask->type_v == CB_ATTN_AUTO; /* K and V alike */
    int n = 0;
    for (int f = 0; f < n_fa; f++)
        for (int a = 0; a < nk; a++)
            for (int b = 0; b < nv; b++) {
                if (pair && a != b) continue;
                bool fa = fas[f] == 1;
                /* flash attention reads an f32 cache through a cast to f16 every step: never faster */
                if (fa && ((ask->type_k == CB_ATTN_AUTO && ks[a] == KV_F32) ||
                           (ask->type_v == CB_ATTN_AUTO && vs[b] == KV_F32)))
                    continue;
                if (n == CB_ATTN_MAX_PATHS) return n;
                bool off_kept = !fa && ask->fa == CB_ATTN_AUTO && off_why;
                out[n++] = (cb_attn_path){.fa = fa,
                                          .type_k = ks[a],
                                          .type_v = vs[b],
                                          .eligible = !off_kept,
                                          .why_not = off_kept ? off_why : NULL};
            }
    return n;
}

bool cb_attn_open(const cb_attn_path *paths, int n) {
    int eligible = 0;
    for (int i = 0; i < n; i++)
        eligible += paths[i].eligible;
    return eligible > 1;
}

int cb_attn_choose(const cb_attn_path *paths, int n, const double *t, int n_points, double margin, double *scores) {
    double best[64];
    if (n_points > 64) n_points = 64;
    for (int p = 0; p < n_points; p++) {
        best[p] = 0;
        for (int i = 0; i < n; i++) {
            double v = t[i * n_points + p];
            if (v > 0 && (best[p] <= 0 || v < best[p])) best[p] = v;
        }
    }
    int pick = -1;
    double ref = 0, pick_score = 0;
    for (int i = 0; i < n; i++) {
        double logs = 0;
        bool ok = n_points > 0;
        for (int p = 0; p < n_points && ok; p++) {
            double v = t[i * n_points + p];
            ok = v > 0 && best[p] > 0;
            if (ok) logs += log(v / best[p]);
        }
        double s = ok ? exp(logs / n_points) : 0;
        if (scores) scores[i] = s;
        if (i == 0) ref = s;
        if (ok && paths[i].eligible && (pick < 0 || s < pick_score)) pick = i, pick_score = s;
    }
    if (pick <= 0) return 0;
    if (ref > 0 && paths[0].eligible && pick_score > (1.0 - margin) * ref) return 0;
    return pick;
}

bool cb_attn_steady(const double *first, const double *again, int n, double tol, double min_ms) {
    for (int i = 0; i < n; i++) {
        if (first[i] <= 0 || again[i] <= 0 || (first[i] < min_ms && again[i] < min_ms)) continue;
        double r = first[i] / again[i];
        if (r > tol || r < 1.0 / tol) return false;
    }
    return true;
}
