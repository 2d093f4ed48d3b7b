/* What speculation would give on recorded greedy outputs, with the engine's own drafter and choice
 * (src/core/draft.h, spec.h) and a measured step cost: the cost model behind speculative decoding,
 * before the engine runs it. Greedy outputs are what the target model would produce anyway, so a
 * draft token holds exactly when it equals the recorded one.
 *
 * Input (stdin), one sample per two lines: "P n t1 ... tn" (the prompt's token ids), "O n t1 ... tn"
 * (the output's). Arguments: fixed_us row_us (a step of r rows costs fixed + row x r), clients (that
 * many samples decode in lock step, each the next sample when one ends), k_max (drafts a request may
 * check), n_min n_max (the lookup's n-gram lengths). Prints the drafts' acceptance, tokens per step
 * per request and the modelled speed-up over one-row steps. Build (after a release build in build/):
 *     cc -O2 -std=c11 scripts/spec_sim.c build/libcobatch_core.a -lm -o /tmp/spec_sim
 * Samples: scripts/spec_sim.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/draft.h"
#include "../src/core/spec.h"

typedef struct {
    int32_t *t; /* (n_prompt + n_out) prompt then output */
    int32_t n_prompt, n_out;
} sample;

static int32_t *read_ids(char tag, int32_t *n) {
    char c;
    if (scanf(" %c %d", &c, n) != 2 || c != tag || *n < 0 || *n > 1 << 22) return NULL;
    int32_t *v = malloc(sizeof(int32_t) * (size_t)(*n > 0 ? *n : 1));
    for (int32_t i = 0; v && i < *n; i++)
        if (scanf("%d", &v[i]) != 1) {
            free(v);
            return NULL;
        }
    return v;
}

typedef struct {
    double time;
    long tokens, steps, drafted, held, tried;
} sim;

/* Clients decode samples in lock step (each takes the next sample when its own ends); a step: every
 * live client's next token, and the drafts the choice gives it. */
static sim simulate(sample *s, int ns, double fixed, double row, int clients, int kmax, int nmin, int nmax) {
    static int cur[256], done_upto[256];
    static cb_accept acc[256];
    static int32_t avail[256], k[256], draft[256][64];
    static double rate[256];
    sim r = {0};
    /* every request's counts start from 4 tries at the rate all requests have seen (itself from 3 of 4):
     * a prior of one half would keep a request whose step costs favour only likely drafts from ever
     * trying one, and so from ever learning its rate */
    cb_accept all = {0};
    int next = 0;
    for (int c = 0; c < clients; c++)
        cur[c] = next < ns ? next++ : -1, done_upto[c] = 0, acc[c] = (cb_accept){0};
    for (;;) {
        int live = 0;
        for (int c = 0; c < clients; c++) {
            if (cur[c] < 0) continue;
            sample *x = &s[cur[c]];
            int32_t n = x->n_prompt + done_upto[c];     /* known text: prompt and output so far */
            int32_t left = x->n_out - done_upto[c] - 1; /* drafts past the output's end never hold */
            int32_t want = kmax < left ? kmax : left;
            avail[live] = want > 0 ? cb_draft_lookup(x->t, n, x->t, n, nmin, nmax, -1, want, draft[c], NULL) : 0;
            double prior = cb_accept_rate(&all, 3, 4);
            rate[live] = cb_accept_rate(&acc[c], 4 * prior, 4);
            live++;
        }
        if (live == 0) break;
        cb_spec_choose(live, live, avail, rate, NULL, fixed, row, 0, 1 << 20, k);
        int32_t rows = 0;
        for (int c = 0, i = 0; c < clients; c++) {
            if (cur[c] < 0) continue;
            sample *x = &s[cur[c]];
            int32_t base = x->n_prompt + done_upto[c];
            int32_t h = 0;
            while (h < k[i] && draft[c][h] == x->t[base + h])
                h++;
            int32_t t = h < k[i] ? h + 1 : h; /* tried: those held and the one that failed */
            cb_accept_note(&acc[c], t, h, 0.9);
            cb_accept_note(&all, t, h, 0.99);
            r.drafted += k[i], r.held += h, r.tried += t;
            rows += 1 + k[i];
            done_upto[c] += h + 1; /* the held drafts and the token the last row samples */
            r.tokens += h + 1;
            if (done_upto[c] >= x->n_out) {
                done_upto[c] = 0;
                cur[c] = next < ns ? next++ : -1;
            }
            i++;
        }
        r.time += fixed + row * rows;
        r.steps++;
    }
    return r;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: spec_sim FIXED_US ROW_US CLIENTS K_MAX N_MIN N_MAX < samples\n");
        return 2;
    }
    double fixed = atof(argv[1]), row = atof(argv[2]);
    int clients = atoi(argv[3]), kmax = atoi(argv[4]), nmin = atoi(argv[5]), nmax = atoi(argv[6]);
    if (clients < 1 || clients > 256 || kmax < 0 || kmax > 64) return 2;
    sample s[512];
    int ns = 0;
    while (ns < 512) {
        int32_t np, no;
        int32_t *p = read_ids('P', &np);
        if (!p) break;
        int32_t *o = read_ids('O', &no);
        if (!o) return 2;
        s[ns].t = malloc(sizeof(int32_t) * (size_t)(np + no + 1));
        memcpy(s[ns].t, p, sizeof(int32_t) * (size_t)np);
        memcpy(s[ns].t + np, o, sizeof(int32_t) * (size_t)no);
        s[ns].n_prompt = np, s[ns].n_out = no;
        free(p), free(o);
        ns++;
    }
    if (ns == 0) return 2;
    sim with = simulate(s, ns, fixed, row, clients, kmax, nmin, nmax);
    sim without = simulate(s, ns, fixed, row, clients, 0, nmin, nmax);
    printf("clients %d, k_max %d, n-gram %d-%d: %ld tokens in %ld steps (%ld without drafts); drafts checked %ld, "
           "held %ld (%.2f of those tried); modelled speed-up %.2fx\n",
           clients, kmax, nmin, nmax, with.tokens, with.steps, without.steps, with.drafted, with.held,
           with.tried ? (double)with.held / with.tried : 0, without.time / with.time);
    return 0;
}
