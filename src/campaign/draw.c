/* draw.c - the case strategies of the campaign (see draw.h). */
#include "draw.h"

#include "attnfuzz/rng.h"

#define AF_DRAW_TRIES 64 /* draws per case while no backend would run it */

/* Grid point i of the baseline suite: 64 points, then the same points with new seeds. */
static void af_grid_case(af_case *c, uint64_t i, af_rng *r, size_t budget) {
    uint64_t p = i % 64;
    af_case_default(c);
    c->batch = p & 1 ? 2 : 1;
    c->q_heads = c->kv_heads = p & 2 ? 8 : 1;
    c->q_len = c->kv_len = p & 4 ? 128 : 16;
    c->head_dim = c->v_head_dim = 64;
    c->dtype = p & 8 ? AF_F16 : AF_F32;
    c->causal = (p & 32) != 0; /* the unmasked half first, then causal */
    (void)(p & 16);            /* two value draws per pass */
    for (int t = 0; t < AF_QKV_COUNT; t++) c->t[t].seed = af_rng_u32(r);
    af_case_repair(c, budget);
}

static void af_bytes_case(af_case *c, af_rng *r, size_t budget) {
    uint8_t buf[AF_CASE_ENCODED_MAX];
    size_t n = af_rng_below(r, 257);
    for (size_t k = 0; k < n; k++) buf[k] = (uint8_t)af_rng_u32(r);
    af_case_decode(c, buf, n, budget);
}

/* Every dimension 1 (--tiny): the cost of a case is then the pipeline's and the
 * backends' own overhead. */
static void af_case_tiny(af_case *c, size_t budget) {
    c->batch = c->q_heads = c->kv_heads = c->q_len = c->kv_len = c->head_dim = c->v_head_dim = 1;
    af_case_repair(c, budget);
}

void af_draw_case(const af_draw *d, uint64_t n, double backward, af_case *c, uint32_t *skip) {
    const af_campaign_opts *o = d->o;
    af_pool *pool = d->pool;
    af_rng *rng = d->rng;
    double max_flops = d->max_flops;
    *skip = 0;
    for (int tries = 0;; tries++) {
        d->edges->fields = 0;
        uint32_t pick = af_rng_below(rng, 10);
        if (o->strategy == AF_STRATEGY_GRID) {
            af_grid_case(c, n, rng, o->exec.budget);
        } else if (o->strategy == AF_STRATEGY_BYTES) {
            af_bytes_case(c, rng, o->exec.budget);
        } else if (pool->n > 0 && pick < 3) {
            *c = pool->cases[af_rng_below(rng, (uint32_t)pool->n)];
            af_case_mutate(c, rng, o->exec.budget);
        } else if (pool->n > 1 && pick == 3) {
            af_case_crossover(&pool->cases[af_rng_below(rng, (uint32_t)pool->n)],
                              &pool->cases[af_rng_below(rng, (uint32_t)pool->n)], c, rng, o->exec.budget);
        } else {
            af_gen_opts go = {o->exec.budget, max_flops, backward, d->serving, d->fp8};
            af_case_generate_edges(c, rng, &go, d->edges);
        }
        if (backward <= 0.0 && c->bwd.grads) { /* forward-only campaign */
            c->bwd.grads = 0;
            af_case_repair(c, o->exec.budget);
        }
        if (o->strategy != AF_STRATEGY_GENERATOR) break;
        af_case_cap_flops(c, max_flops, o->exec.budget);
        if (o->tiny) af_case_tiny(c, o->exec.budget);
        if (tries + 1 >= AF_DRAW_TRIES) break;
        if (!af_exec_would_run(d->x, c)) continue;
        size_t why[AF_EXEC_MAX_BACKENDS];
        uint32_t mask = af_known_gate_skip(d->gate, d->store, d->x, c, why);
        af_known_gate_count(d->gate, d->s, mask, why);
        if (!mask || af_known_gate_runs_unskipped(d->x, c, mask)) {
            *skip = mask;
            break;
        }
    }
}
