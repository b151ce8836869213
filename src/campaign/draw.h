/* draw.h - where the campaign's cases come from (library-internal; campaign_opts.h af_strategy):
 * the structure-aware generator, mutation and crossover of the feedback pool (pool.h), or
 * a baseline (a parametrized suite's grid, random bytes). */
#ifndef ATTNFUZZ_DRAW_H
#define ATTNFUZZ_DRAW_H

#include <stdint.h>

#include "attnfuzz/campaign_opts.h"
#include "attnfuzz/store.h"
#include "known_gate.h"
#include "pool.h"

/* What a draw reads and updates: the options, the pool, the stream, the executor (which
 * backends would run a case), the store and gate (known bugs' skips, counted in s). */
typedef struct af_draw {
    const af_campaign_opts *o;
    af_pool *pool;
    af_rng *rng;
    const af_exec *x;
    const af_store *store;
    af_known_gate *gate;
    af_campaign_stats *s;
    double max_flops; /* cap per generated case */
    double serving;   /* share of generated cases in a serving form */
    double fp8;       /* share of generated cases in an FP8 format */
    af_gen_edges_opts *edges; /* the edges share and field weights; its fields: the last
                                 draw's edge fields (0 when not generated on the edges) */
} af_draw;

/* The next case of the strategy (n: the cases drawn before it; the grid's point), with
 * backward the share of generated cases that ask for gradients. The generator's draws are
 * redrawn (up to AF_DRAW_TRIES times) while no backend would run them: a target that
 * declares few capabilities, or refused a feature often enough to have learned it
 * (worker.h), gets cases it runs instead of skipped ones; so does one that keeps hitting a
 * known bug (*skip: the backends this case leaves out for theirs). */
void af_draw_case(const af_draw *d, uint64_t n, double backward, af_case *c, uint32_t *skip);

#endif
