/* case_key.c - compile keys: which fields of a case a compiled artifact depends on
 * (case_key.h, docs/worker-protocol.md "compile_key"), and redrawing everything else so a
 * campaign can reuse one compiled structure for many value draws. */
#include "attnfuzz/case_key.h"

#include <string.h>

#include "attnfuzz/rng.h"
#include "case_fp8.h"
#include "case_serving.h"

const char *const af_key_names[AF_KEY_COUNT_] = {"shapes", "dtype", "layouts", "masks",
                                                 "causal", "scale", "softcap", "dropout"};
_Static_assert(sizeof(af_key_names) / sizeof(af_key_names[0]) == AF_KEY_COUNT_, "names");

typedef struct af_key_hasher {
    uint64_t h;
} af_key_hasher;

static void af_key_mix(af_key_hasher *k, uint64_t v) {
    /* splitmix64 finalizer over a running sum: order-sensitive, cheap */
    uint64_t z = k->h + v + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    k->h = z ^ (z >> 31);
}

static uint64_t af_key_double(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

uint64_t af_case_key_hash(const af_case *c, uint32_t key) {
    af_key_hasher k = {key};
    if (key & AF_KEY_SHAPES) {
        uint32_t s[7] = {c->batch, c->q_heads, c->kv_heads, c->q_len, c->kv_len, c->head_dim, c->v_head_dim};
        for (int i = 0; i < 7; i++) af_key_mix(&k, s[i]);
    }
    if (key & AF_KEY_DTYPE) af_key_mix(&k, (uint64_t)c->dtype * 2 + c->allow_tf32);
    if (key & AF_KEY_LAYOUTS)
        for (int t = 0; t <= AF_QKV_COUNT; t++) {
            if (t == AF_QKV_COUNT && !c->bwd.grads) break;
            const af_tensor_spec *s = t < AF_QKV_COUNT ? &c->t[t] : &c->bwd.dout;
            af_key_mix(&k, (uint64_t)s->layout | (uint64_t)s->perm << 8 | (uint64_t)s->pad << 16 |
                               (uint64_t)s->bcast << 24);
        }
    /* a compiled backward graph is another artifact, whatever the key names */
    if (c->bwd.grads) af_key_mix(&k, 0x6772616400ull | c->bwd.grads);
    if (key & AF_KEY_MASKS) {
        const af_mask_spec *ms[2] = {&c->amask, &c->bmask};
        for (int m = 0; m < 2; m++)
            af_key_mix(&k, ms[m]->present ? 1 | (uint64_t)ms[m]->rank2 << 1 | (uint64_t)ms[m]->expanded << 2 |
                                                (uint64_t)ms[m]->dims << 3 | (uint64_t)ms[m]->dtype << 8
                                          : 0);
    }
    if (key & AF_KEY_CAUSAL) {
        af_key_mix(&k, (uint64_t)c->causal | (uint64_t)c->diag << 1 | (uint64_t)c->key_padding << 4);
        af_key_mix(&k, c->diag == AF_DIAG_EXPLICIT ? (uint64_t)(uint32_t)c->diag_offset : 0);
        af_key_mix(&k, (uint64_t)(uint32_t)c->window_left << 32 | (uint32_t)c->window_right);
    }
    if (key & AF_KEY_SCALE)
        af_key_mix(&k, (c->scale_set ? af_key_double(c->scale) : 1) ^ (uint64_t)c->placement << 62);
    if (key & AF_KEY_SOFTCAP) af_key_mix(&k, af_key_double(c->softcap));
    if (key & AF_KEY_DROPOUT) af_key_mix(&k, af_key_double(c->dropout_p));
    /* a serving form is another artifact whatever the key names (none: nothing mixed) */
    if (c->serve.forms) af_key_mix(&k, af_serving_key(c, key & AF_KEY_SHAPES, key & AF_KEY_CAUSAL));
    /* so is an FP8 one, per format; descales are values (none: nothing mixed) */
    if (c->fp8.fmt) af_key_mix(&k, 0x66703800ull | (uint64_t)c->fp8.fmt);
    return k.h;
}

static void af_revalue_tensor(af_tensor_spec *t, af_rng *r) {
    t->seed = af_rng_u32(r);
    /* mostly the usual distributions; the corners stay reachable */
    t->dist = af_rng_chance(r, 3, 4) ? (af_dist)af_rng_below(r, 2) : (af_dist)af_rng_below(r, AF_DIST_COUNT);
    t->mag_q4 = af_rng_chance(r, 1, 2) ? 0 : (int8_t)af_rng_range(r, AF_MAG_Q4_MIN, AF_MAG_Q4_MAX);
    t->special = af_rng_chance(r, 7, 8) ? AF_SPECIAL_NONE : (af_special)af_rng_below(r, AF_SPECIAL_COUNT);
}

static void af_revalue_mask(af_mask_spec *m, af_rng *r, bool additive) {
    if (!m->present) return;
    m->pattern = (af_mask_pattern)af_rng_below(r, AF_MASK_PATTERN_COUNT);
    m->density = (uint8_t)af_rng_below(r, 256);
    m->seed = af_rng_u32(r);
    if (additive) {
        m->fill = (af_mask_fill)af_rng_below(r, AF_FILL_COUNT);
        m->mag_q4 = (int8_t)af_rng_range(r, AF_MAG_Q4_MIN, AF_MAG_Q4_MAX);
        m->live_zero = af_rng_chance(r, 1, 2);
    }
}

void af_case_revalue(af_case *c, af_rng *r, uint32_t key, size_t budget) {
    for (int t = 0; t < AF_QKV_COUNT; t++) af_revalue_tensor(&c->t[t], r);
    if (c->bwd.grads) af_revalue_tensor(&c->bwd.dout, r);
    af_revalue_mask(&c->amask, r, true);
    af_revalue_mask(&c->bmask, r, false);
    c->dropout_seed = af_rng_u64(r);
    if (c->key_padding)
        for (uint32_t b = 0; b < c->batch && b < AF_MAX_BATCH; b++) c->kv_valid[b] = (uint32_t)af_rng_range(r, 0, c->kv_len);
    if (!(key & AF_KEY_SCALE) && c->scale_set) {
        double s = af_rng_chance(r, 1, 2) ? 1.0 / (double)af_rng_range(r, 1, 64) : (double)af_rng_range(r, 1, 100);
        c->scale = af_rng_chance(r, 1, 8) ? -s : s;
        c->placement = (af_placement)af_rng_below(r, AF_PLACE_COUNT);
    }
    if (!(key & AF_KEY_SOFTCAP) && c->softcap > 0.0) c->softcap = (double)af_rng_range(r, 1, 50);
    if (!(key & AF_KEY_DROPOUT) && c->dropout_p > 0.0) c->dropout_p = (double)af_rng_range(r, 1, 99) / 100.0;
    af_serving_revalue(c, r);
    af_fp8_revalue(c, r);
    af_case_repair(c, budget);
}
