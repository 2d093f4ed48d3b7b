/* group.h — global prefix identification for the offline batch runner (BatchLLM §4.2 and
 * §4.3.2): the compact prefix tree (radix tree over token ids) of every prompt of a job, its
 * first-level prefixes enlarged by the paper's dynamic-programming pass (Algorithm 1), and the
 * prefix-sharing groups that come out of it, ordered by their decode/prefill ratio.
 *
 * Pure: no llama.h, no I/O, no globals; one thread per cb_grouping.
 *
 * The first-level prefix of a group is computed once; the rest of each member's prompt ("distinct
 * part") is computed per member. The DP forks a first-level node C and merges it with one of its
 * children G when (leaves(G) - 1) * tokens(G) > tokens(C): G's tokens are then shared by all of
 * G's prompts at the cost of computing C's tokens once more. One refinement over the paper: when
 * G holds every prompt C has left, C disappears with the merge, nothing is computed twice, and
 * the merge is made (it never costs anything and keeps each group's prefix as long as it is). */
#ifndef CB_GROUP_H
#define CB_GROUP_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    const int32_t *tokens; /* (n_tokens) borrowed: only read during cb_group_build */
    int32_t n_tokens;      /* >= 1 */
    int32_t max_tokens;    /* expected output length (>= 0): the decode side of the ratio */
} cb_group_prompt;

typedef struct {
    int32_t first, n;   /* members: cb_grouping.order[first .. first + n) */
    int32_t prefix_len; /* tokens every member starts with: the group's shared first-level prefix */
    int64_t prefill;    /* tokens the group computes: the prefix once + each member's distinct part */
    int64_t decode;     /* sum of the members' max_tokens */
} cb_group;

typedef struct {
    int32_t *order;   /* (n_prompts) prompt indices, group after group; in a group, tree order */
    cb_group *groups; /* (n_groups) */
    int32_t n_prompts, n_groups;
    int64_t logical_tokens; /* sum of the prompt lengths: what no reuse at all computes */
    int64_t tree_tokens;    /* tokens in the compact prefix tree: the fewest any prefix reuse computes */
    int64_t group_tokens;   /* sum of the groups' prefill: what sharing each group's prefix computes */
} cb_grouping;

/* Builds the prefix tree of prompts[0..n), enlarges its first-level prefixes when `enlarge`
 * (without it, the groups are the tree's first-level nodes as they are) and forms one group per
 * first-level prefix; groups come in the prompts' lexicographic token order. Every prompt is in
 * exactly one group. Returns 0 and fills *out (the caller frees it with cb_grouping_free), or -1
 * on allocation failure or a prompt with n_tokens < 1, with *out zeroed.
 * Cost: O(n log n) comparisons of token runs (each as long as the common prefix) plus
 * O(total tokens); memory O(n) beside the prompts, which are not copied. */
int cb_group_build(const cb_group_prompt *prompts, int32_t n, bool enlarge, cb_grouping *out);

/* Orders the groups by R = decode / prefill, largest first (BatchLLM eq. 3 and 4 with the
 * requests' own max_tokens as the decode length); ties keep the build order. Members stay put. */
void cb_group_sort_by_ratio(cb_grouping *g);

void cb_grouping_free(cb_grouping *g);

#endif
