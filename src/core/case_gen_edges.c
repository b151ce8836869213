/* case_gen_edges.c - the generator's edges distribution (af_gen_opts.edges; docs/design.md
 * section 2, "The generator"). Fused kernels choose a path on the shape: head-size buckets
 * (FlashAttention's 32/64/96/128/192/256 instantiations, multiples of 8 for vectorized
 * loads, 256 as the ceiling), sequence lengths at the tile sizes (multiples of 64 and 128;
 * 512/513 for TensorRT's INT8 MHA fusion), the GQA group ratio, and 16-byte aligned rows.
 * Bugs sit on both sides of each switch, so every field drawn here is drawn below, at and
 * above its switch points with equal weight. Which fields of a case go on an edge is drawn
 * by weights a campaign raises for the fields a backend's refusals cluster on
 * (af_edge_weights): a target that refuses head size 257 gets more head sizes near 256. */
#include "attnfuzz/case.h"
#include "attnfuzz/rng.h"

const char *const af_edge_field_names[AF_EDGE_COUNT] = {"head_dim", "seq", "gqa", "align"};
_Static_assert(sizeof af_edge_field_names / sizeof af_edge_field_names[0] == AF_EDGE_COUNT, "every edge field named");

/* A head dim: 5/6 of the draws a power of two from 8 to 256 minus one, itself or plus one
 * (a third each), else a multiple of 8 between them or 288 (past the 256 ceiling). */
static uint32_t af_edges_head_dim(af_rng *r) {
    static const uint32_t pow2[] = {8, 16, 32, 64, 128, 256};
    static const uint32_t between[] = {24, 40, 80, 96, 160, 192, 224, 288};
    if (af_rng_chance(r, 1, 6)) return between[af_rng_below(r, sizeof between / sizeof between[0])];
    return pow2[af_rng_below(r, sizeof pow2 / sizeof pow2[0])] + (uint32_t)af_rng_below(r, 3) - 1u;
}

/* A sequence length: 5/6 of the draws a tile switch 64, 128, 256, 512 minus one, itself or
 * plus one (a third each), else 192 or 384 (multiples of 64 that are not of 128). */
static uint32_t af_edges_seq(af_rng *r) {
    static const uint32_t tiles[] = {64, 128, 256, 512};
    if (af_rng_chance(r, 1, 6)) return af_rng_chance(r, 1, 2) ? 192u : 384u;
    return tiles[af_rng_below(r, sizeof tiles / sizeof tiles[0])] + (uint32_t)af_rng_below(r, 3) - 1u;
}

static bool af_edges_packed(const af_case *c) { return c->t[AF_Q].layout >= AF_LAYOUT_FIRST_PACKED; }

/* Shrinks c to max_flops keeping the edge fields: batch first, then what is not on an edge
 * (heads, lengths, head dims), then q_len down to 1 (kv_len carries the sequence edge). */
static void af_edges_cap(af_case *c, unsigned fields, double max_flops, size_t budget) {
    for (int guard = 0; guard < 64 && af_case_flops(c) > max_flops; guard++) {
        uint32_t group = c->q_heads / c->kv_heads;
        if (c->batch > 1) {
            c->batch = (c->batch + 1) / 2;
        } else if (c->kv_heads > 1) { /* the ratio is the GQA edge, not the head count */
            c->kv_heads = (c->kv_heads + 1) / 2;
            c->q_heads = c->kv_heads * group;
        } else if (!(fields & (1u << AF_EDGE_GQA)) && group > 1) {
            c->q_heads = c->kv_heads;
        } else if (c->q_len > 1) {
            c->q_len = (c->q_len + 1) / 2;
        } else if (!(fields & (1u << AF_EDGE_SEQ)) && c->kv_len > 1) {
            c->kv_len = (c->kv_len + 1) / 2;
        } else if (!(fields & (1u << AF_EDGE_HEAD_DIM)) && (c->head_dim > 8 || c->v_head_dim > 8)) {
            if (c->head_dim > 8) c->head_dim = (c->head_dim + 1) / 2;
            if (c->v_head_dim > 8) c->v_head_dim = (c->v_head_dim + 1) / 2;
        } else {
            break;
        }
        af_case_repair(c, budget);
    }
    if (max_flops > 0 && af_case_flops(c) > max_flops) af_case_cap_flops(c, max_flops, budget); /* an edge gives way */
}

unsigned af_gen_edges(af_case *c, af_rng *r, const uint8_t *weights, double max_flops, size_t budget) {
    /* field f on an edge with probability w / (w + 1) (w 0 or 1: 1/2); none: one by weight */
    unsigned w[AF_EDGE_COUNT];
    unsigned fields = 0;
    for (int f = 0; f < AF_EDGE_COUNT; f++) {
        w[f] = weights && weights[f] > 1 ? weights[f] : 1u;
        if (af_rng_below(r, w[f] + 1u) < w[f]) fields |= 1u << f;
    }
    if (!fields) fields = 1u << af_rng_pick(r, w, AF_EDGE_COUNT);

    if (fields & (1u << AF_EDGE_HEAD_DIM)) {
        c->head_dim = af_edges_head_dim(r);
        c->v_head_dim = af_rng_chance(r, 3, 4) ? c->head_dim : af_edges_head_dim(r);
    }
    if (fields & (1u << AF_EDGE_SEQ)) {
        c->kv_len = af_edges_seq(r);
        /* the same length (prefill), or a few queries against it (decode, chunked prefill) */
        c->q_len = af_rng_chance(r, 1, 2) ? c->kv_len : (uint32_t)af_rng_range(r, 1, 16);
        c->key_padding = false;
    }
    if (fields & (1u << AF_EDGE_GQA)) {
        static const uint32_t ratios[] = {1, 2, 4, 8, 3, 5, 7}, kv[] = {1, 2, 4};
        c->kv_heads = kv[af_rng_below(r, 3)];
        c->q_heads = c->kv_heads * ratios[af_rng_below(r, sizeof ratios / sizeof ratios[0])];
        if (c->q_heads != c->kv_heads && af_edges_packed(c)) /* packed QKV has one head count */
            for (int t = 0; t < AF_QKV_COUNT; t++) c->t[t].layout = AF_LAYOUT_BHSD;
    }
    if (fields & (1u << AF_EDGE_ALIGN)) {
        static const uint8_t aligned[] = {0, 8}, off[] = {1, 3, 7};
        for (int t = 0; t < AF_QKV_COUNT; t++)
            c->t[t].pad = af_rng_chance(r, 1, 2) ? aligned[af_rng_below(r, 2)] : off[af_rng_below(r, 3)];
    }
    af_case_repair(c, budget);
    if (max_flops > 0) af_edges_cap(c, fields, max_flops, budget);
    return fields;
}

void af_edge_tally_note(af_edge_tally *t, unsigned fields, bool refused) {
    t->cases++;
    t->refused_cases += refused;
    for (int f = 0; f < AF_EDGE_COUNT; f++)
        if (fields & (1u << f)) {
            t->drawn[f]++;
            t->refused[f] += refused;
        }
}

void af_edge_weights(const af_edge_tally *t, uint8_t w[AF_EDGE_COUNT]) {
    double rate = t->cases ? (double)t->refused_cases / (double)t->cases : 0.0;
    for (int f = 0; f < AF_EDGE_COUNT; f++) {
        uint8_t x = 1;
        if (t->drawn[f] >= 16 && rate < 1.0) {
            double rf = (double)t->refused[f] / (double)t->drawn[f];
            double k = rf > rate ? 1.0 + 3.0 * (rf - rate) / (1.0 - rate) : 1.0;
            x = (uint8_t)(k > 4.0 ? 4.0 : k);
        }
        if (x > w[f]) w[f] = x;
    }
}
