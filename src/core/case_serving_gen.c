/* case_serving_gen.c - the serving part in the generator, the mutator and compile-key
 * redraws (case_gen.c, case_mutate.c and case_key.c call these).
 *
 * What serving bugs need (docs/design.md section 1): segments of length 0 and 1 next to full
 * ones, queries and keys of different lengths per segment, page sizes of 1, odd ones and
 * ones over 128, a partly filled last page, shared prefix pages, decode steps (1 to 16
 * queries against thousands of keys, bottom-right) that take a split-KV path, batches over
 * 1 (a combine that folds sequences together shows only there), sinks and ALiBi slopes. */
#include <string.h>

#include "attnfuzz/rng.h"
#include "case_serving.h"


static uint16_t af_sgen_page_size(af_rng *r) {
    static const uint16_t sizes[] = {1, 2, 3, 5, 8, 16, 16, 16, 32, 64, 64, 128, 129, 256, 512, 1024};
    return sizes[af_rng_below(r, sizeof sizes / sizeof sizes[0])];
}

/* A segment length within 0..cap: empty, one, full, or anywhere. */
static uint32_t af_sgen_len(af_rng *r, uint32_t cap) {
    switch (AF_RNG_PICK(r, 7, 12, 33, 48)) {
    case 0: return 0;
    case 1: return 1 < cap ? 1 : cap;
    case 2: return cap;
    default: return (uint32_t)af_rng_range(r, 0, cap);
    }
}

static void af_sgen_lens(af_case *c, af_rng *r) {
    af_serving_spec *s = &c->serve;
    bool packed = s->forms & AF_SERVE_PACKED;
    for (uint32_t b = 0; b < c->batch; b++) {
        s->q_lens[b] = packed ? af_sgen_len(r, c->q_len) : 0;
        /* self-attention segments (prefill) half the time: as many keys as queries */
        if (packed && af_rng_chance(r, 1, 2))
            s->kv_lens[b] = s->q_lens[b] < c->kv_len ? s->q_lens[b] : c->kv_len;
        else
            s->kv_lens[b] = af_sgen_len(r, c->kv_len);
    }
    /* the padded view is tight more often than not: some segment takes the whole of it */
    if (packed && af_rng_chance(r, 2, 3)) s->q_lens[af_rng_below(r, c->batch)] = c->q_len;
}

/* Values a decode step draws, at most: a cache costs its values to draw, and a decode step
 * has few flops per value (one query per key); a sixth of the steps get the large cap. */
#define AF_DECODE_VALUES (1u << 17)
#define AF_DECODE_VALUES_LARGE (1u << 21)

int af_serving_generate(af_case *c, af_rng *r) {
    af_serving_spec *s = &c->serve;
    memset(s, 0, sizeof *s);
    bool decode = af_rng_chance(r, 1, 3), large = false;
    switch (AF_RNG_PICK(r, 30, 25, 15, 30)) {
    case 0: s->forms = AF_SERVE_PACKED; break;
    case 1: s->forms = AF_SERVE_PAGED; break;
    case 2: s->forms = AF_SERVE_PACKED | AF_SERVE_PAGED; break;
    default: break; /* dense: a decode step, sinks or ALiBi alone */
    }
    if (af_rng_chance(r, 1, 4)) s->forms |= AF_SERVE_SINKS;
    if (af_rng_chance(r, 1, 4)) s->forms |= AF_SERVE_ALIBI;
    if (decode) {
        /* one query (plain decode) or a few (speculative decoding) against a long cache */
        c->q_len = af_rng_chance(r, 1, 2) ? 1u : (uint32_t)af_rng_range(r, 2, AF_DECODE_MAX_Q);
        if (c->batch == 1 && af_rng_chance(r, 2, 3)) c->batch = (uint32_t)af_rng_range(r, 2, 8);
        large = af_rng_chance(r, 1, 6);
        uint32_t e = (uint32_t)af_rng_range(r, 8, 15);
        c->kv_len = (uint32_t)af_rng_range(r, (int64_t)1 << e, ((int64_t)1 << (e + 1)) - 1);
        if (af_rng_chance(r, 1, 8)) c->kv_len = AF_MAX_SEQ;
        /* within the values cap: fewer rows, heads and dims first, then fewer keys */
        uint64_t cap = large ? AF_DECODE_VALUES_LARGE : AF_DECODE_VALUES;
        while ((uint64_t)c->batch * c->kv_heads * c->kv_len * (c->head_dim + c->v_head_dim) > cap) {
            if (c->batch > 2) {
                c->batch = (c->batch + 1) / 2;
            } else if (c->kv_heads > 1) {
                uint32_t group = c->q_heads / c->kv_heads;
                c->kv_heads = (c->kv_heads + 1) / 2;
                c->q_heads = c->kv_heads * group;
            } else if (c->head_dim + c->v_head_dim > 32) {
                c->head_dim = (c->head_dim + 1) / 2, c->v_head_dim = (c->v_head_dim + 1) / 2;
            } else {
                c->kv_len = (c->kv_len + 1) / 2;
            }
        }
        c->causal = af_rng_chance(r, 4, 5);
        c->diag = af_rng_chance(r, 1, 2) ? AF_DIAG_BOTTOM_RIGHT : AF_DIAG_BOTTOM_RIGHT_VALID;
    } else if (s->forms & AF_SERVE_PACKED) {
        if (af_rng_chance(r, 1, 2)) c->kv_len = c->q_len;
        if (c->batch == 1 && af_rng_chance(r, 3, 4)) c->batch = (uint32_t)af_rng_range(r, 2, 6);
    }
    if (s->forms & (AF_SERVE_PACKED | AF_SERVE_PAGED)) af_sgen_lens(c, r);
    if (s->forms & AF_SERVE_PAGED) {
        s->page_size = af_sgen_page_size(r);
        s->shared_pages = af_rng_chance(r, 1, 3) ? (uint8_t)af_rng_range(r, 1, 4) : 0;
        s->page_seed = af_rng_u32(r);
    }
    if (s->forms & AF_SERVE_SINKS) {
        s->sink_mag_q4 = (int8_t)(AF_RNG_PICK(r, 70, 30) == 0 ? af_rng_range(r, -4, 4) : af_rng_range(r, 4, AF_MAG_Q4_MAX));
        s->sink_seed = af_rng_u32(r);
    }
    if (s->forms & AF_SERVE_ALIBI) {
        s->alibi_symmetric = af_rng_chance(r, 1, 3);
        s->alibi_random = af_rng_chance(r, 1, 3);
        if (s->alibi_random) {
            s->alibi_mag_q4 = (int8_t)af_rng_range(r, -12, 4);
            s->alibi_seed = af_rng_u32(r);
        }
    }
    return decode ? (large ? 2 : 1) : 0;
}

void af_serving_mutate(af_case *c, af_rng *r) {
    af_serving_spec *s = &c->serve;
    uint32_t b = af_rng_below(r, c->batch);
    bool had_lens = af_case_has_lens(c);
    switch (af_rng_below(r, 7)) {
    case 0:
        s->forms ^= (uint8_t)(1u << af_rng_below(r, AF_SERVE_FORM_COUNT)); /* repair fits the rest */
        if (!had_lens && af_case_has_lens(c))
            for (uint32_t k = 0; k < c->batch; k++) s->q_lens[k] = c->q_len, s->kv_lens[k] = c->kv_len;
        if ((s->forms & AF_SERVE_PAGED) && !s->page_size) s->page_size = af_sgen_page_size(r);
        break;
    case 1: s->q_lens[b] = af_sgen_len(r, c->q_len); break;
    case 2: s->kv_lens[b] = af_sgen_len(r, c->kv_len); break;
    case 3:
        s->page_size = af_sgen_page_size(r);
        s->shared_pages = (uint8_t)af_rng_range(r, 0, 4);
        break;
    case 4: s->alibi_symmetric = !s->alibi_symmetric; break;
    case 5:
        s->alibi_random = !s->alibi_random;
        s->alibi_mag_q4 = (int8_t)af_rng_range(r, -12, 4);
        s->alibi_seed = af_rng_u32(r);
        break;
    default:
        s->sink_mag_q4 = (int8_t)af_rng_range(r, AF_MAG_Q4_MIN, AF_MAG_Q4_MAX);
        s->page_seed = af_rng_u32(r);
        s->sink_seed = af_rng_u32(r);
        break;
    }
}

void af_serving_revalue(af_case *c, af_rng *r) {
    af_serving_spec *s = &c->serve;
    if (s->forms & AF_SERVE_PAGED) s->page_seed = af_rng_u32(r); /* the table's values, not its shape */
    if (s->forms & AF_SERVE_SINKS) {
        s->sink_seed = af_rng_u32(r);
        s->sink_mag_q4 = (int8_t)af_rng_range(r, -4, AF_MAG_Q4_MAX);
    }
    if ((s->forms & AF_SERVE_ALIBI) && s->alibi_random) s->alibi_seed = af_rng_u32(r);
}
