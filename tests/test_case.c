/* test_case.c - the case value: a total byte decoder (every input gives a valid case in
 * budget), the encode/decode and JSON round trips, locality of byte changes, repair and
 * validation, and the generator's distribution.
 *
 * Validity is checked field by field here against the ranges documented in case.h
 * (check_fields), not only through af_case_validate, so a lenient validator cannot hide a
 * bad decode. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/case.h"
#include "attnfuzz/rng.h"
#include "attnfuzz/tensor.h"

/* --- helpers --------------------------------------------------------------------- */

static size_t scaled(size_t n) { return scaled_at_least(n, 100); }

static void print_case(const char *what, const af_case *c) {
    char *j = af_case_to_json(c);
    print_error("%s:\n%s\n", what, j ? j : "(no json)");
    free(j);
}

/* Offsets of the byte form (the header comment of src/core/case_codec.c). */
enum {
    OFF_BATCH = 0,
    OFF_KV_HEADS = 1,
    OFF_GROUP = 2,
    OFF_Q_LEN = 3,
    OFF_KV_LEN = 5,
    OFF_HEAD_DIM = 7,
    OFF_V_HEAD_DIM = 9,
    OFF_DTYPE = 11,
    OFF_FLAGS = 12,
    OFF_PLACEMENT = 13,
    OFF_SCALE = 14,
    OFF_SOFTCAP = 22,
    OFF_DIAG = 30,
    OFF_DIAG_OFFSET = 31,
    OFF_WINDOW = 35,
    OFF_DROPOUT_P = 43,
    OFF_DROPOUT_SEED = 51,
    OFF_AMASK = 59,
    OFF_BMASK = 70,
    OFF_TQ = 81,
    OFF_TK = 92,
    OFF_TV = 103,
    OFF_KV_VALID = 114,
    /* the backward bytes follow the key padding lengths of every batch row: at
     * OFF_KV_VALID + 4 * B, grads (1), then dO's spec without its layout byte (10) */
    BWD_LEN = 11,
    INPUT_MAX = OFF_KV_VALID + 4 * AF_MAX_BATCH + BWD_LEN
};
static size_t off_bwd(const uint8_t *in) { return OFF_KV_VALID + 4u * (1u + in[OFF_BATCH] % AF_MAX_BATCH); }

static unsigned perm_count_by_hand(af_layout l) {
    switch (l) {
    case AF_LAYOUT_BHSD:
    case AF_LAYOUT_BSHD:
    case AF_LAYOUT_SBHD: return 24; /* 4 dims */
    case AF_LAYOUT_BSD:
    case AF_LAYOUT_CHANNELS_FIRST:
    case AF_LAYOUT_QKV_CHANNELS_FIRST: return 6; /* 3 dims */
    case AF_LAYOUT_QKV_BS3HD:
    case AF_LAYOUT_QKV_BSH3D: return 120; /* 5 dims */
    case AF_LAYOUT_COUNT: break;
    }
    return 0;
}

static bool folded(af_layout l) {
    return l == AF_LAYOUT_BSD || l == AF_LAYOUT_CHANNELS_FIRST || l == AF_LAYOUT_QKV_CHANNELS_FIRST;
}

/* Every field within the ranges of case.h; returns a description of the first problem. */
static const char *check_fields(const af_case *c, size_t budget) {
    if (c->batch < 1 || c->batch > AF_MAX_BATCH) return "batch";
    if (c->kv_heads < 1 || c->kv_heads > AF_MAX_KV_HEADS) return "kv_heads";
    if (c->q_heads < 1 || c->q_heads > AF_MAX_Q_HEADS || c->q_heads % c->kv_heads) return "q_heads";
    if (c->q_heads / c->kv_heads > AF_MAX_GROUP) return "group";
    if (c->q_len < 1 || c->q_len > AF_MAX_SEQ || c->kv_len < 1 || c->kv_len > AF_MAX_SEQ) return "lengths";
    if (c->head_dim < 1 || c->head_dim > AF_MAX_HEAD_DIM) return "head_dim";
    if (c->v_head_dim < 1 || c->v_head_dim > AF_MAX_HEAD_DIM) return "v_head_dim";
    if ((unsigned)c->dtype >= AF_CASE_DTYPE_COUNT) return "dtype";
    if (c->allow_tf32 && c->dtype != AF_F32) return "allow_tf32";
    if (c->scale_set && (!isfinite(c->scale) || fabs(c->scale) > AF_MAX_SCALE)) return "scale";
    if ((unsigned)c->placement >= AF_PLACE_COUNT) return "placement";
    if (!(c->softcap >= 0.0 && c->softcap <= AF_MAX_SOFTCAP)) return "softcap";
    if ((unsigned)c->diag >= AF_DIAG_COUNT) return "diag";
    if (c->diag_offset < -AF_MAX_SEQ || c->diag_offset > AF_MAX_SEQ) return "diag_offset";
    if (c->window_left < -1 || c->window_left > AF_MAX_SEQ) return "window_left";
    if (c->window_right < -1 || c->window_right > AF_MAX_SEQ) return "window_right";
    for (uint32_t b = 0; b < c->batch; b++)
        if (c->key_padding && c->kv_valid[b] > c->kv_len) return "kv_valid";
    if (!(c->dropout_p >= 0.0 && c->dropout_p <= 1.0)) return "dropout_p";
    const af_mask_spec *ms[2] = {&c->amask, &c->bmask};
    for (int k = 0; k < 2; k++) {
        const af_mask_spec *m = ms[k];
        if (!m->present) continue;
        if (m->dims > AF_MDIM_ALL) return "mask dims";
        if (m->rank2 && (m->dims & (AF_MDIM_B | AF_MDIM_H))) return "mask rank2";
        if (k == 0 && (unsigned)m->dtype >= AF_CASE_DTYPE_COUNT) return "additive mask dtype";
        if (k == 1 && m->dtype != AF_BOOL) return "bool mask dtype";
        if ((unsigned)m->pattern >= AF_MASK_PATTERN_COUNT) return "mask pattern";
        if ((unsigned)m->fill >= AF_FILL_COUNT) return "mask fill";
        if (m->mag_q4 < AF_MAG_Q4_MIN || m->mag_q4 > AF_MAG_Q4_MAX) return "mask magnitude";
    }
    for (int t = 0; t < AF_QKV_COUNT; t++) {
        const af_tensor_spec *s = &c->t[t];
        if ((unsigned)s->layout >= AF_LAYOUT_COUNT) return "layout";
        if (s->perm >= perm_count_by_hand(s->layout)) return "perm";
        if (s->pad > AF_MAX_PAD) return "pad";
        if ((unsigned)s->bcast >= AF_BCAST_COUNT) return "bcast";
        if (s->bcast == AF_BCAST_HEADS && folded(s->layout)) return "heads broadcast on a folded layout";
        if ((unsigned)s->dist >= AF_DIST_COUNT) return "dist";
        if (s->mag_q4 < AF_MAG_Q4_MIN || s->mag_q4 > AF_MAG_Q4_MAX) return "magnitude";
        if ((unsigned)s->special >= AF_SPECIAL_COUNT) return "special";
    }
    if (c->t[AF_Q].layout >= AF_LAYOUT_FIRST_PACKED) {
        if (c->q_len != c->kv_len || c->q_heads != c->kv_heads || c->head_dim != c->v_head_dim)
            return "packed layout with unequal shapes";
        for (int t = AF_K; t <= AF_V; t++)
            if (c->t[t].layout != c->t[AF_Q].layout || c->t[t].perm != c->t[AF_Q].perm ||
                c->t[t].pad != c->t[AF_Q].pad || c->t[t].bcast != c->t[AF_Q].bcast)
                return "packed K/V do not follow Q";
    } else {
        for (int t = AF_K; t <= AF_V; t++)
            if (c->t[t].layout >= AF_LAYOUT_FIRST_PACKED) return "K/V packed while Q is not";
    }
    const af_backward_spec *bw = &c->bwd;
    if (bw->grads & ~AF_GRAD_ALL) return "grads bits";
    if ((bw->grads & AF_GRAD_DMASK) && !c->amask.present) return "dmask without an additive mask";
    if (!bw->grads) {
        static const af_backward_spec zero;
        if (memcmp(bw, &zero, sizeof zero) != 0) return "a forward-only case with a dO spec";
    } else {
        const af_tensor_spec *s = &bw->dout;
        if (s->layout != af_out_layout(c->t[AF_Q].layout)) return "dO layout";
        if (s->layout >= AF_LAYOUT_FIRST_PACKED) return "dO in a packed layout";
        if (s->perm >= perm_count_by_hand(s->layout)) return "dO perm";
        if (s->pad > AF_MAX_PAD) return "dO pad";
        if ((unsigned)s->bcast >= AF_BCAST_COUNT || (s->bcast == AF_BCAST_HEADS && folded(s->layout))) return "dO bcast";
        if ((unsigned)s->dist >= AF_DIST_COUNT) return "dO dist";
        if (s->mag_q4 < AF_MAG_Q4_MIN || s->mag_q4 > AF_MAG_Q4_MAX) return "dO magnitude";
        if ((unsigned)s->special >= AF_SPECIAL_COUNT) return "dO special";
    }
    if (af_case_tensor_bytes(c) > budget) return "over budget";
    return NULL;
}

/* Decodes, checks validity, the byte round trip, and (optionally) repair's idempotence. */
static void check_decoded(const uint8_t *data, size_t size, af_case *out) {
    af_case c;
    af_case_decode(&c, data, size, 0);
    const char *bad = check_fields(&c, AF_DEFAULT_BUDGET);
    af_error err = {0};
    af_status st = af_case_validate(&c, 0, &err);
    if (bad || st != AF_OK) {
        print_case("decoded case", &c);
        fail_msg("decoded %zu bytes: field check: %s; validate: %s (%s)", size, bad ? bad : "ok",
                 af_status_str(st), err.msg);
    }
    uint8_t enc[AF_CASE_ENCODED_MAX], enc2[AF_CASE_ENCODED_MAX];
    size_t n = af_case_encode(&c, enc, sizeof enc);
    if (n == 0 || n > AF_CASE_ENCODED_MAX) fail_msg("encode returned %zu", n);
    af_case d;
    af_case_decode(&d, enc, n, 0);
    if (!af_case_equal(&c, &d)) {
        print_case("decoded", &c);
        print_case("after encode + decode", &d);
        fail_msg("decode(encode(c)) != c");
    }
    size_t n2 = af_case_encode(&d, enc2, sizeof enc2);
    if (n2 != n || memcmp(enc, enc2, n) != 0) fail_msg("encoding is not canonical");
    /* too small a buffer is refused, never overrun */
    if (af_case_encode(&c, enc2, n - 1) != 0) fail_msg("encode into %zu bytes did not fail", n - 1);
    /* repair leaves a valid case alone */
    af_case r = c;
    af_case_repair(&r, 0);
    if (!af_case_equal(&c, &r)) {
        print_case("decoded", &c);
        fail_msg("repair changed a decoded (valid) case");
    }
    if (out) *out = c;
}

static unsigned case_diff(const af_case *a, const af_case *b);

/* JSON round trip; returns false (after printing) on a mismatch. */
static bool json_round_trip(const af_case *c, bool verbose) {
    char *j = af_case_to_json(c);
    if (!j) fail_msg("to_json returned NULL");
    af_case d;
    af_error err = {0};
    af_status st = af_case_from_json(&d, j, &err);
    bool ok = st == AF_OK && af_case_equal(c, &d);
    if (!ok && verbose) {
        print_error("JSON round trip failed: %s (%s)\n%s\n", af_status_str(st), err.msg, j);
        if (st == AF_OK) {
            print_error("differing field groups: 0x%x (see case_diff)\n", case_diff(c, &d));
            if (memcmp(&c->scale, &d.scale, sizeof d.scale))
                print_error("scale %.17g -> %.17g\n", c->scale, d.scale);
            if (memcmp(&c->softcap, &d.softcap, sizeof d.softcap))
                print_error("softcap %.17g -> %.17g\n", c->softcap, d.softcap);
            if (memcmp(&c->dropout_p, &d.dropout_p, sizeof d.dropout_p))
                print_error("dropout_p %.17g -> %.17g\n", c->dropout_p, d.dropout_p);
        }
    }
    free(j);
    return ok;
}

static void put_f64(uint8_t *p, double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    for (int k = 0; k < 8; k++) p[k] = (uint8_t)(u >> (8 * k));
}

/* --- decoding ---------------------------------------------------------------------- */

static void test_decode_empty(void **state) {
    (void)state;
    af_case c, z;
    af_case_decode(&c, NULL, 0, 0);
    /* Missing bytes read as 0, so every field takes the value its zero byte encodes: the
     * 1x1x1x1 f32 BHSD case with no masks, default scale, no dropout. (Window fields are
     * plain i32, so zero bytes give the window (0, 0), not unbounded.) */
    assert_int_equal(c.batch, 1);
    assert_int_equal(c.q_heads, 1);
    assert_int_equal(c.kv_heads, 1);
    assert_int_equal(c.q_len, 1);
    assert_int_equal(c.kv_len, 1);
    assert_int_equal(c.head_dim, 1);
    assert_int_equal(c.v_head_dim, 1);
    assert_int_equal(c.dtype, AF_F32);
    assert_false(c.allow_tf32);
    assert_false(c.scale_set);
    assert_false(c.causal);
    assert_false(c.key_padding);
    assert_false(c.amask.present);
    assert_false(c.bmask.present);
    assert_true(c.dropout_p == 0.0);
    assert_true(c.softcap == 0.0);
    for (int t = 0; t < AF_QKV_COUNT; t++) {
        assert_int_equal(c.t[t].layout, AF_LAYOUT_BHSD);
        assert_int_equal(c.t[t].perm, 0);
        assert_int_equal(c.t[t].pad, 0);
        assert_int_equal(c.t[t].bcast, AF_BCAST_NONE);
    }
    uint8_t zeros[INPUT_MAX] = {0};
    af_case_decode(&z, zeros, sizeof zeros, 0);
    assert_true(af_case_equal(&c, &z)); /* no bytes and zero bytes are the same input */
    af_case_decode(&z, zeros, 1, 0);
    assert_true(af_case_equal(&c, &z));
    check_decoded(NULL, 0, NULL);
    check_decoded(zeros, sizeof zeros, NULL);
}

static void test_decode_random(void **state) {
    (void)state;
    xorshift x = {0xC0FFEE1234ull};
    size_t n = scaled(200000);
    uint8_t buf[401];
    for (size_t t = 0; t < n; t++) {
        size_t len = (size_t)(xs_next(&x) % 401);
        for (size_t k = 0; k < len; k++) buf[k] = (uint8_t)xs_next(&x);
        /* a third of the inputs with small shapes, so the budget does not decide everything */
        if (t % 3 == 0 && len > OFF_DTYPE) {
            buf[OFF_Q_LEN + 1] &= 0x01;
            buf[OFF_KV_LEN + 1] &= 0x01;
            buf[OFF_HEAD_DIM + 1] = 0;
            buf[OFF_V_HEAD_DIM + 1] = 0;
        }
        check_decoded(len ? buf : NULL, len, NULL);
    }
}

/* A full-length input with small shapes (nothing near the budget). */
static void tame_input(xorshift *x, uint8_t *buf) {
    for (size_t k = 0; k < INPUT_MAX; k++) buf[k] = (uint8_t)xs_next(x);
    buf[OFF_KV_HEADS] = (uint8_t)(buf[OFF_KV_HEADS] % 4);
    buf[OFF_GROUP] = (uint8_t)(buf[OFF_GROUP] % 4);
    buf[OFF_Q_LEN] = (uint8_t)(buf[OFF_Q_LEN] % 32), buf[OFF_Q_LEN + 1] = 0;
    buf[OFF_KV_LEN] = (uint8_t)(buf[OFF_KV_LEN] % 32), buf[OFF_KV_LEN + 1] = 0;
    buf[OFF_HEAD_DIM] = (uint8_t)(buf[OFF_HEAD_DIM] % 16), buf[OFF_HEAD_DIM + 1] = 0;
    buf[OFF_V_HEAD_DIM] = (uint8_t)(buf[OFF_V_HEAD_DIM] % 16), buf[OFF_V_HEAD_DIM + 1] = 0;
    /* a serving record's page size (pages of up to 1024 slots for sequences of a few keys
     * would take the budget) */
    size_t sv = off_bwd(buf) + BWD_LEN + 1;
    if (sv + 1 < INPUT_MAX) buf[sv] = (uint8_t)(buf[sv] % 64), buf[sv + 1] = 0;
}

static void test_decode_adversarial(void **state) {
    (void)state;
    uint8_t buf[INPUT_MAX + 64];
    /* every length of constant strings */
    const uint8_t fills[] = {0xFF, 0x00, 0x80, 0x7F, 0x01};
    for (size_t f = 0; f < sizeof fills; f++)
        for (size_t len = 0; len <= 300; len++) {
            memset(buf, fills[f], len);
            check_decoded(len ? buf : NULL, len, NULL);
        }
    memset(buf, 0xFF, sizeof buf);
    check_decoded(buf, sizeof buf, NULL);

    /* non-finite, huge, tiny and signed-zero f64 values in scale, softcap and dropout_p */
    const double vals[] = {NAN,    -NAN,    INFINITY, -INFINITY, 1e308, -1e308, 0x1p-1074, -0x1p-1074, -0.0,
                           0.0,    1e4,     1e4 + 1,  -1e4 - 1,  2.0,   -1.0,   1.0,       0.5,        0.999,
                           1e-300, 12345.0, 0.125,    -0.5};
    xorshift x = {77};
    for (int base = 0; base < 40; base++) {
        uint8_t in[INPUT_MAX];
        if (base < 20) {
            tame_input(&x, in);
        } else {
            memset(in, base % 2 ? 0xFF : 0x00, sizeof in);
        }
        in[OFF_FLAGS] |= 2; /* scale_set */
        for (size_t v = 0; v < sizeof vals / sizeof vals[0]; v++) {
            double d = vals[v];
            af_case c;
            put_f64(in + OFF_SCALE, d);
            put_f64(in + OFF_SOFTCAP, d);
            put_f64(in + OFF_DROPOUT_P, d);
            check_decoded(in, sizeof in, &c);
            /* a finite in-range value decodes to itself, bit for bit */
            if (isfinite(d) && fabs(d) <= AF_MAX_SCALE) {
                assert_true(c.scale_set);
                assert_memory_equal(&c.scale, &d, sizeof d);
            } else if (!isnan(d) && !isinf(d)) {
                assert_true(c.scale_set && fabs(c.scale) == AF_MAX_SCALE && signbit(c.scale) == signbit(d));
            }
            if (d >= AF_MIN_SOFTCAP && d <= AF_MAX_SOFTCAP) assert_memory_equal(&c.softcap, &d, sizeof d);
            if (d > 0.0 && d < AF_MIN_SOFTCAP) assert_true(c.softcap == AF_MIN_SOFTCAP); /* clamped */
            if (!(d > 0.0)) assert_true(c.softcap == 0.0);
            if (d >= 0.0 && d <= 1.0) assert_true(c.dropout_p == d);
            if (!(d >= 0.0)) assert_true(c.dropout_p == 0.0);
            if (d > 1.0) assert_true(c.dropout_p == 1.0);
            assert_false(isnan(c.scale) || isnan(c.softcap) || isnan(c.dropout_p));
        }
        /* extreme integers: diagonal offset, window bounds, kv_valid */
        const uint32_t ints[] = {0x80000000u, 0x7fffffffu, 0xffffffffu, 0xfffffffeu, 65536u, 65537u};
        for (size_t v = 0; v < sizeof ints / sizeof ints[0]; v++) {
            for (int k = 0; k < 4; k++) {
                in[OFF_DIAG_OFFSET + k] = (uint8_t)(ints[v] >> (8 * k));
                in[OFF_WINDOW + k] = (uint8_t)(ints[v] >> (8 * k));
                in[OFF_WINDOW + 4 + k] = (uint8_t)(ints[(v + 1) % 6] >> (8 * k));
                for (int b = 0; b < AF_MAX_BATCH; b++) in[OFF_KV_VALID + 4 * b + k] = (uint8_t)(ints[v] >> (8 * k));
            }
            in[OFF_DIAG] = 3; /* explicit */
            in[OFF_FLAGS] |= 8; /* key padding */
            check_decoded(in, sizeof in, NULL);
        }
    }
}

/* --- the backward part --------------------------------------------------------------- */

/* The backward bytes come after the key padding lengths: an input that ends there (every
 * input written before cases had a backward part) decodes forward-only and re-encodes to
 * the same bytes; eleven more bytes ask for gradients. */
static void test_backward_bytes(void **state) {
    (void)state;
    xorshift x = {0xBAC4};
    size_t n = scaled(5000);
    for (size_t t = 0; t < n; t++) {
        uint8_t in[INPUT_MAX];
        tame_input(&x, in);
        if (t % 2) in[OFF_AMASK] |= 1; /* an additive mask: dmask can stay */
        size_t X = off_bwd(in);
        af_case old, c;
        af_case_decode(&old, in, X, 0);
        assert_int_equal(old.bwd.grads, 0);
        uint8_t enc[AF_CASE_ENCODED_MAX];
        size_t len = af_case_encode(&old, enc, sizeof enc);
        /* a forward-only case: exactly the bytes an old input had, the key padding last */
        assert_int_equal(len, OFF_KV_VALID + 4 * old.batch);
        uint8_t g = (uint8_t)(1 + t % AF_GRAD_ALL);
        in[X] = g;
        af_case_decode(&c, in, X + BWD_LEN, 0);
        uint8_t want = c.amask.present ? g : (uint8_t)(g & ~AF_GRAD_DMASK);
        assert_int_equal(c.bwd.grads, want);
        if (!want) continue;
        /* the byte fields of dO, in the order of case_codec.c (no layout byte) */
        assert_int_equal(c.bwd.dout.layout, af_out_layout(c.t[AF_Q].layout));
        assert_int_equal(c.bwd.dout.dist, in[X + 4] % AF_DIST_COUNT);
        uint32_t seed = (uint32_t)in[X + 7] | (uint32_t)in[X + 8] << 8 | (uint32_t)in[X + 9] << 16 |
                        (uint32_t)in[X + 10] << 24;
        assert_int_equal(c.bwd.dout.seed, seed);
        /* every other field is the old input's */
        af_case f = c;
        memset(&f.bwd, 0, sizeof f.bwd);
        if (!af_case_equal(&f, &old) && af_case_tensor_bytes(&c) < AF_DEFAULT_BUDGET / 2) {
            print_case("forward-only", &old);
            print_case("with backward bytes", &c);
            fail_msg("the backward bytes changed a forward field");
        }
        len = af_case_encode(&c, enc, sizeof enc);
        assert_int_equal(len, OFF_KV_VALID + 4 * c.batch + BWD_LEN);
        check_decoded(in, X + BWD_LEN, NULL);
    }
}

/* --- locality: one byte touches its own fields ----------------------------------- */

enum {
    F_BATCH = 1 << 0, F_HEADS = 1 << 1, F_QLEN = 1 << 2, F_KVLEN = 1 << 3, F_DIM = 1 << 4, F_VDIM = 1 << 5,
    F_DTYPE = 1 << 6, F_TF32 = 1 << 7, F_SCALE = 1 << 8, F_PLACE = 1 << 9, F_SOFTCAP = 1 << 10,
    F_CAUSAL = 1 << 11, F_DIAG = 1 << 12, F_KP = 1 << 13, F_KVVALID = 1 << 14, F_WINDOW = 1 << 15,
    F_AMASK = 1 << 16, F_BMASK = 1 << 17, F_DROP = 1 << 18, F_DSEED = 1 << 19, F_TQ = 1 << 20,
    F_TK = 1 << 21, F_TV = 1 << 22, F_BWD = 1 << 23, F_SERVE = 1 << 24, F_FP8 = 1 << 25
};
/* A serving form (whose bytes follow the backward ones) repairs Q/K/V's layouts and
 * broadcasts, drops key padding and the backward part: what a change of it may change. */
#define F_SERVE_ALL (F_SERVE | F_TQ | F_TK | F_TV | F_KP | F_KVVALID | F_BWD)
/* The FP8 record (after the serving one) makes an f32 case bf16 without TF32, forward-only
 * and without a serving form; kv_only unpacks a packed QKV buffer (the shapes packing forced
 * are free again). */
#define F_FP8_ALL (F_FP8 | F_DTYPE | F_TF32 | F_BWD | F_SERVE | F_TQ | F_TK | F_TV | F_KVLEN | F_HEADS | F_VDIM | F_KVVALID)

static bool spec_eq(const af_tensor_spec *x, const af_tensor_spec *y) {
    return x->layout == y->layout && x->perm == y->perm && x->pad == y->pad && x->bcast == y->bcast &&
           x->dist == y->dist && x->mag_q4 == y->mag_q4 && x->special == y->special && x->seed == y->seed;
}

static bool mask_eq(const af_mask_spec *a, const af_mask_spec *b) {
    return a->present == b->present && a->rank2 == b->rank2 && a->expanded == b->expanded && a->dims == b->dims &&
           a->dtype == b->dtype && a->pattern == b->pattern && a->density == b->density && a->fill == b->fill &&
           a->mag_q4 == b->mag_q4 && a->live_zero == b->live_zero && a->seed == b->seed;
}

static unsigned case_diff(const af_case *a, const af_case *b) {
    unsigned f = 0;
    if (a->batch != b->batch) f |= F_BATCH;
    if (a->q_heads != b->q_heads || a->kv_heads != b->kv_heads) f |= F_HEADS;
    if (a->q_len != b->q_len) f |= F_QLEN;
    if (a->kv_len != b->kv_len) f |= F_KVLEN;
    if (a->head_dim != b->head_dim) f |= F_DIM;
    if (a->v_head_dim != b->v_head_dim) f |= F_VDIM;
    if (a->dtype != b->dtype) f |= F_DTYPE;
    if (a->allow_tf32 != b->allow_tf32) f |= F_TF32;
    if (a->scale_set != b->scale_set || memcmp(&a->scale, &b->scale, sizeof a->scale)) f |= F_SCALE;
    if (a->placement != b->placement) f |= F_PLACE;
    if (memcmp(&a->softcap, &b->softcap, sizeof a->softcap)) f |= F_SOFTCAP;
    if (a->causal != b->causal) f |= F_CAUSAL;
    if (a->diag != b->diag || a->diag_offset != b->diag_offset) f |= F_DIAG;
    if (a->key_padding != b->key_padding) f |= F_KP;
    if (memcmp(a->kv_valid, b->kv_valid, sizeof a->kv_valid)) f |= F_KVVALID;
    if (a->window_left != b->window_left || a->window_right != b->window_right) f |= F_WINDOW;
    if (!mask_eq(&a->amask, &b->amask)) f |= F_AMASK;
    if (!mask_eq(&a->bmask, &b->bmask)) f |= F_BMASK;
    if (memcmp(&a->dropout_p, &b->dropout_p, sizeof a->dropout_p)) f |= F_DROP;
    if (a->dropout_seed != b->dropout_seed) f |= F_DSEED;
    if (!spec_eq(&a->t[AF_Q], &b->t[AF_Q])) f |= F_TQ;
    if (!spec_eq(&a->t[AF_K], &b->t[AF_K])) f |= F_TK;
    if (!spec_eq(&a->t[AF_V], &b->t[AF_V])) f |= F_TV;
    if (a->bwd.grads != b->bwd.grads || !spec_eq(&a->bwd.dout, &b->bwd.dout)) f |= F_BWD;
    if (memcmp(&a->serve, &b->serve, sizeof a->serve)) f |= F_SERVE;
    if (a->fp8.fmt != b->fp8.fmt || a->fp8.kv_only != b->fp8.kv_only || memcmp(a->fp8.descale, b->fp8.descale, sizeof a->fp8.descale)) f |= F_FP8;
    return f;
}

/* in: the input before the flip (the batch byte places the backward bytes). The backward
 * part depends on the batch byte (its position), Q's layout (dO's) and the additive mask
 * (dmask needs one). */
static unsigned allowed_fields(size_t off, const uint8_t *in, const af_case *a, const af_case *b) {
    bool packed = af_case_is_packed(a) || af_case_is_packed(b);
    bool serve = a->serve.forms || b->serve.forms;
    /* the batch byte places the serving bytes and the FP8 record too */
    if (off == OFF_BATCH) return F_BATCH | F_KVVALID | F_BWD | (serve ? F_SERVE_ALL : 0) | F_FP8_ALL;
    if (off >= off_bwd(in) + BWD_LEN) return F_SERVE_ALL | F_FP8_ALL;
    /* a planted special of K or V ends shared pages */
    if (serve && off >= OFF_TK && off < OFF_TV) return F_TK | F_SERVE;
    if (serve && off >= OFF_TV && off < OFF_KV_VALID) return F_TV | F_SERVE;
    if (off == OFF_DTYPE) return F_DTYPE | F_TF32;
    if (off == OFF_FLAGS) return F_TF32 | F_SCALE | F_CAUSAL | F_KP | F_KVVALID;
    if (off == OFF_PLACEMENT) return F_PLACE;
    if (off >= OFF_SCALE && off < OFF_SOFTCAP) return F_SCALE;
    if (off >= OFF_SOFTCAP && off < OFF_DIAG) return F_SOFTCAP;
    if (off >= OFF_DIAG && off < OFF_WINDOW) return F_DIAG;
    if (off >= OFF_WINDOW && off < OFF_DROPOUT_P) return F_WINDOW;
    if (off >= OFF_DROPOUT_P && off < OFF_DROPOUT_SEED) return F_DROP;
    if (off >= OFF_DROPOUT_SEED && off < OFF_AMASK) return F_DSEED;
    if (off >= OFF_AMASK && off < OFF_BMASK) return F_AMASK | F_BWD;
    if (off >= OFF_BMASK && off < OFF_TQ) return F_BMASK;
    if (off >= OFF_TQ && off < OFF_TK) {
        /* Q's layout decides packing, which ties K/V's layout and the K/V shapes to Q */
        /* (a packed or paged serving form turns a packed QKV buffer into three bshd tensors,
         * so neither case may look packed; the lengths follow the shapes packing forced) */
        return (packed || serve ? F_TQ | F_TK | F_TV | F_KVLEN | F_HEADS | F_VDIM | F_KVVALID : F_TQ) | F_BWD |
               (serve ? F_SERVE : 0);
    }
    if (off >= OFF_TK && off < OFF_TV) return F_TK;
    if (off >= OFF_TV && off < OFF_KV_VALID) return F_TV;
    if (off >= off_bwd(in) && off < off_bwd(in) + BWD_LEN) return F_BWD;
    return F_KVVALID;
}

static void test_byte_locality(void **state) {
    (void)state;
    xorshift x = {0xBEEF};
    static const size_t offs[] = {OFF_BATCH,       OFF_DTYPE,        OFF_FLAGS,      OFF_PLACEMENT,
                                  OFF_SCALE,       OFF_SCALE + 3,    OFF_SCALE + 7,  OFF_SOFTCAP + 6,
                                  OFF_SOFTCAP + 7, OFF_DIAG,         OFF_DIAG_OFFSET, OFF_WINDOW + 2,
                                  OFF_WINDOW + 4,  OFF_DROPOUT_P + 7, OFF_DROPOUT_P + 6, OFF_DROPOUT_SEED + 3,
                                  OFF_AMASK,       OFF_AMASK + 1,    OFF_AMASK + 6,  OFF_BMASK,
                                  OFF_BMASK + 4,   OFF_TQ,           OFF_TQ + 1,     OFF_TQ + 2,
                                  OFF_TQ + 3,      OFF_TQ + 8,       OFF_TK,         OFF_TK + 2,
                                  OFF_TK + 4,      OFF_TV,           OFF_TV + 5,     OFF_TV + 9,
                                  OFF_KV_VALID,    OFF_KV_VALID + 5, OFF_KV_VALID + 4 * 63,
                                  INPUT_MAX - 1,   INPUT_MAX - BWD_LEN};
    size_t n = scaled(20000);
    for (size_t t = 0; t < n; t++) {
        uint8_t in[INPUT_MAX];
        tame_input(&x, in);
        size_t off = offs[t % (sizeof offs / sizeof offs[0])];
        /* a third of the flips land in the backward bytes of the input's own batch */
        if (t % 3 == 1) off = off_bwd(in) + (size_t)(xs_next(&x) % BWD_LEN);
        af_case a, b;
        uint8_t before[INPUT_MAX];
        memcpy(before, in, sizeof in);
        af_case_decode(&a, in, sizeof in, 0);
        in[off] ^= (uint8_t)(1 + xs_next(&x) % 255);
        af_case_decode(&b, in, sizeof in, 0);
        unsigned diff = case_diff(&a, &b), ok = allowed_fields(off, before, &a, &b);
        if (diff & ~ok) {
            print_case("before", &a);
            print_case("after", &b);
            fail_msg("flipping byte %zu changed fields 0x%x, allowed 0x%x", off, diff, ok);
        }
    }
}

/* --- packed layouts, validation, repair ---------------------------------------------- */

static void test_packed_repair(void **state) {
    (void)state;
    for (int l = AF_LAYOUT_FIRST_PACKED; l < AF_LAYOUT_COUNT; l++) {
        af_case c;
        af_case_default(&c);
        c.batch = 2, c.q_heads = 6, c.kv_heads = 3, c.q_len = 5, c.kv_len = 9, c.head_dim = 8, c.v_head_dim = 4;
        c.t[AF_Q].layout = (af_layout)l;
        c.t[AF_K].layout = AF_LAYOUT_BSHD;
        c.t[AF_K].pad = 3;
        af_error err = {0};
        assert_int_equal(af_case_validate(&c, 0, &err), AF_ERR_INVALID);
        assert_non_null(strstr(err.msg, "packed"));
        af_case_repair(&c, 0);
        assert_null(check_fields(&c, AF_DEFAULT_BUDGET));
        assert_int_equal(af_case_validate(&c, 0, &err), AF_OK);
        assert_int_equal(c.q_len, c.kv_len);
        assert_int_equal(c.q_heads, c.kv_heads);
        assert_int_equal(c.head_dim, c.v_head_dim);
        assert_int_equal(c.t[AF_K].layout, l);
        assert_int_equal(c.t[AF_V].layout, l);
        assert_int_equal(c.t[AF_K].pad, c.t[AF_Q].pad);
    }
    /* K packed while Q is not: K leaves the packed layout */
    af_case c;
    af_case_default(&c);
    c.t[AF_K].layout = AF_LAYOUT_QKV_BSH3D;
    af_error err = {0};
    assert_int_equal(af_case_validate(&c, 0, &err), AF_ERR_INVALID);
    af_case_repair(&c, 0);
    assert_true(c.t[AF_K].layout < AF_LAYOUT_FIRST_PACKED);
    assert_int_equal(af_case_validate(&c, 0, NULL), AF_OK);
}

static void test_validate_rejects(void **state) {
    (void)state;
    af_case base;
    af_case_default(&base);
    base.batch = 2, base.q_heads = 4, base.kv_heads = 2, base.q_len = 3, base.kv_len = 5, base.head_dim = 8;
    base.v_head_dim = 8;
    assert_int_equal(af_case_validate(&base, 0, NULL), AF_OK);
    af_case c;
    af_error err;
#define REJECT(mutation)                                                                           \
    do {                                                                                           \
        c = base;                                                                                  \
        mutation;                                                                                  \
        memset(&err, 0, sizeof err);                                                               \
        if (af_case_validate(&c, 0, &err) != AF_ERR_INVALID || !err.msg[0])                        \
            fail_msg("validate accepted: %s", #mutation);                                          \
        af_case_repair(&c, 0);                                                                     \
        const char *bad_ = check_fields(&c, AF_DEFAULT_BUDGET);                                    \
        if (bad_ || af_case_validate(&c, 0, &err) != AF_OK)                                        \
            fail_msg("repair did not fix %s: %s %s", #mutation, bad_ ? bad_ : "", err.msg);       \
    } while (0)
    REJECT(c.batch = 0);
    REJECT(c.batch = 65);
    REJECT(c.q_heads = 3);
    REJECT(c.kv_heads = 0);
    REJECT((c.q_heads = 34, c.kv_heads = 2)); /* group 17 */
    REJECT((c.q_heads = 130, c.kv_heads = 65));
    REJECT(c.q_len = 0);
    REJECT(c.kv_len = 65537);
    REJECT(c.head_dim = 513);
    REJECT(c.v_head_dim = 0);
    REJECT(c.dtype = AF_F64);
    REJECT((c.dtype = AF_F16, c.allow_tf32 = true));
    REJECT((c.scale_set = true, c.scale = NAN));
    REJECT((c.scale_set = true, c.scale = -2e4));
    REJECT(c.softcap = -1.0);
    REJECT(c.softcap = NAN);
    REJECT(c.softcap = 1e5);
    REJECT(c.dropout_p = 1.5);
    REJECT(c.dropout_p = NAN);
    REJECT(c.window_left = -2);
    REJECT(c.window_right = 70000);
    REJECT(c.diag_offset = 70000);
    REJECT((c.key_padding = true, c.kv_valid[1] = 6));
    REJECT(c.t[AF_V].pad = 65);
    REJECT(c.t[AF_Q].perm = 24);
    REJECT((c.t[AF_K].layout = AF_LAYOUT_BSD, c.t[AF_K].bcast = AF_BCAST_HEADS));
    REJECT(c.t[AF_K].mag_q4 = 17);
    REJECT((c.amask.present = true, c.amask.dims = AF_MDIM_B | AF_MDIM_Q | AF_MDIM_K, c.amask.rank2 = true));
    REJECT((c.amask.present = true, c.amask.dtype = AF_BOOL));
    REJECT((c.bwd.grads = AF_GRAD_DQ | AF_GRAD_DMASK)); /* dmask without an additive mask */
    REJECT((c.bwd.grads = 16 | AF_GRAD_DK));
    REJECT((c.bwd.grads = AF_GRAD_DV, c.bwd.dout.layout = AF_LAYOUT_BSHD)); /* Q is bhsd */
    REJECT((c.bwd.grads = AF_GRAD_DV, c.bwd.dout.mag_q4 = 20));
    REJECT((c.bwd.grads = AF_GRAD_DQ, c.t[AF_Q].layout = AF_LAYOUT_BSD, c.t[AF_K].layout = AF_LAYOUT_BSD,
            c.bwd.dout.layout = AF_LAYOUT_BSD, c.bwd.dout.bcast = AF_BCAST_HEADS));
#undef REJECT
    /* repair: dmask goes without an additive mask, dO follows Q's layout */
    c = base;
    c.bwd.grads = AF_GRAD_DMASK;
    c.bwd.dout.seed = 5;
    af_case_repair(&c, 0);
    assert_int_equal(c.bwd.grads, 0);
    assert_int_equal(c.bwd.dout.seed, 0); /* forward-only: zeros */
    c = base;
    c.t[AF_Q].layout = AF_LAYOUT_QKV_CHANNELS_FIRST;
    c.bwd.grads = AF_GRAD_DQ | AF_GRAD_DMASK;
    af_case_repair(&c, 0);
    assert_int_equal(c.bwd.grads, AF_GRAD_DQ);
    assert_int_equal(c.bwd.dout.layout, AF_LAYOUT_CHANNELS_FIRST);
    /* the messages name the problem */
    c = base;
    c.q_heads = 6, c.kv_heads = 4;
    assert_int_equal(af_case_validate(&c, 0, &err), AF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "multiple"));
}

static void test_budget_clamp(void **state) {
    (void)state;
    af_case c;
    af_case_default(&c);
    c.batch = 64, c.kv_heads = 64, c.q_heads = 128, c.q_len = 65536, c.kv_len = 65536, c.head_dim = 512;
    c.v_head_dim = 512;
    c.amask.present = true, c.amask.dims = AF_MDIM_ALL;
    c.bmask.present = true, c.bmask.dims = AF_MDIM_ALL;
    for (int t = 0; t < 3; t++) c.t[t].pad = 64;
    af_error err = {0};
    assert_int_equal(af_case_validate(&c, 0, &err), AF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "budget"));
    af_case_repair(&c, 0);
    assert_null(check_fields(&c, AF_DEFAULT_BUDGET));
    assert_int_equal(af_case_validate(&c, 0, NULL), AF_OK);
    /* smaller budgets */
    const size_t budgets[] = {1u << 20, 1u << 16, 4096};
    for (size_t k = 0; k < 3; k++) {
        af_case d;
        af_case_default(&d);
        d.batch = 64, d.kv_heads = 8, d.q_heads = 64, d.q_len = 4000, d.kv_len = 30000, d.head_dim = 300;
        d.v_head_dim = 100;
        af_case_repair(&d, budgets[k]);
        assert_null(check_fields(&d, budgets[k]));
        assert_int_equal(af_case_validate(&d, budgets[k], NULL), AF_OK);
    }
    /* the same through JSON: accepted as written (no budget), then repaired to fit */
    const char *json = "{\"batch\": 64, \"q_heads\": 128, \"kv_heads\": 8, \"q_len\": 65536, \"kv_len\": 65536,"
                       " \"head_dim\": 512, \"dtype\": \"f32\"}";
    af_case j;
    assert_int_equal(af_case_from_json(&j, json, &err), AF_OK);
    assert_int_equal(j.q_len, 65536);
    af_case_repair(&j, 0);
    assert_null(check_fields(&j, AF_DEFAULT_BUDGET));
    /* tensor bytes by hand: B=2, Hq=4, Hkv=2, Sq=3, Sk=5, D=7, Dv=6, f16, contiguous:
     * Q 2*4*3*7*2 = 336, K 2*2*5*7*2 = 280, V 2*2*5*6*2 = 240, out 2*4*3*6*2 = 288 */
    af_case h;
    af_case_default(&h);
    h.batch = 2, h.q_heads = 4, h.kv_heads = 2, h.q_len = 3, h.kv_len = 5, h.head_dim = 7, h.v_head_dim = 6;
    h.dtype = AF_F16;
    assert_int_equal(af_case_tensor_bytes(&h), 336 + 280 + 240 + 288);
    h.amask.present = true, h.amask.dtype = AF_F32, h.amask.dims = AF_MDIM_Q | AF_MDIM_K; /* 3*5*4 */
    assert_int_equal(af_case_tensor_bytes(&h), 1144 + 60);
    h.bmask.present = true, h.bmask.dtype = AF_BOOL, h.bmask.dims = AF_MDIM_ALL; /* 2*4*3*5 */
    assert_int_equal(af_case_tensor_bytes(&h), 1204 + 120);
    /* flops: 2 * B * Hq * Sq * Sk * (D + Dv) */
    assert_true(af_case_flops(&h) == 2.0 * 2 * 4 * 3 * 5 * 13);
    /* a backward case adds dO (2*4*3*6*2 = 288; with rows padded by 2 it spans 2*4*3*(6+2)*2
     * bytes less the last row's padding, 380) and each gradient asked for: dq 336, dk 280,
     * dv 240 at f16, dmask 60 at the mask's f32 */
    h.bwd.grads = AF_GRAD_ALL;
    assert_int_equal(af_case_tensor_bytes(&h), 1324 + 288 + 336 + 280 + 240 + 60);
    h.bwd.dout.pad = 2;
    h.bwd.grads = AF_GRAD_DK;
    assert_int_equal(af_case_tensor_bytes(&h), 1324 + 380 + 280);
    assert_true(af_case_flops(&h) == 3.5 * 2.0 * 2 * 4 * 3 * 5 * 13);
}

static void test_derived(void **state) {
    (void)state;
    af_case c;
    af_case_default(&c);
    c.head_dim = 16;
    assert_true(af_case_scale(&c) == 0.25);
    c.scale_set = true, c.scale = -3.0;
    assert_true(af_case_scale(&c) == -3.0);
    c.batch = 2, c.q_len = 3, c.kv_len = 7;
    c.key_padding = true, c.kv_valid[0] = 5, c.kv_valid[1] = 0;
    c.diag = AF_DIAG_TOP_LEFT;
    assert_int_equal(af_case_diag_offset(&c, 0), 0);
    c.diag = AF_DIAG_BOTTOM_RIGHT;
    assert_int_equal(af_case_diag_offset(&c, 0), 4);
    c.diag = AF_DIAG_BOTTOM_RIGHT_VALID;
    assert_int_equal(af_case_diag_offset(&c, 0), 2);
    assert_int_equal(af_case_diag_offset(&c, 1), -3);
    c.diag = AF_DIAG_EXPLICIT, c.diag_offset = -9;
    assert_int_equal(af_case_diag_offset(&c, 1), -9);
    assert_int_equal(af_case_valid_keys(&c, 0), 5);
    c.key_padding = false;
    assert_int_equal(af_case_valid_keys(&c, 0), 7);
    assert_false(af_case_has_window(&c));
    c.window_right = 0;
    assert_true(af_case_has_window(&c));
    assert_false(af_case_is_packed(&c));
    c.t[AF_Q].layout = AF_LAYOUT_QKV_BS3HD;
    assert_true(af_case_is_packed(&c));
    /* af_case_equal sees every field, including kv_valid past the batch */
    af_case a, b;
    af_case_default(&a);
    b = a;
    assert_true(af_case_equal(&a, &b));
    b.kv_valid[63] = 1;
    assert_false(af_case_equal(&a, &b));
    b = a, b.t[AF_V].seed = 1;
    assert_false(af_case_equal(&a, &b));
    b = a, b.bmask.seed = 1;
    assert_false(af_case_equal(&a, &b));
    b = a, b.scale = -0.0;
    assert_false(af_case_equal(&a, &b)); /* bitwise: -0.0 is another value */
}

/* --- JSON ---------------------------------------------------------------------------- */

static void test_json_rejects(void **state) {
    (void)state;
    af_case c;
    af_error err;
    memset(&err, 0, sizeof err);
    assert_int_equal(af_case_from_json(&c, "{\"q_heads\": 6, \"kv_heads\": 4}", &err), AF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "multiple"));

    memset(&err, 0, sizeof err);
    assert_int_equal(af_case_from_json(&c, "{\"q\": {\"layout\": \"bhds\"}}", &err), AF_ERR_INVALID);
    for (int l = 0; l < AF_LAYOUT_COUNT; l++)
        if (!strstr(err.msg, af_layout_names[l])) fail_msg("message does not list %s: %s", af_layout_names[l], err.msg);
    assert_non_null(strstr(err.msg, "bhds"));

    const char *malformed[] = {"{", "", "{\"batch\": }", "[1, 2]", "{\"batch\": 1,}", "nul", "{\"batch\" 1}", "42"};
    for (size_t k = 0; k < sizeof malformed / sizeof malformed[0]; k++) {
        memset(&err, 0, sizeof err);
        af_status st = af_case_from_json(&c, malformed[k], &err);
        if (st != AF_ERR_FORMAT) fail_msg("\"%s\" gave %s, expected format", malformed[k], af_status_str(st));
        assert_true(err.msg[0] != 0);
    }
    /* wrong types are format errors, impossible values invalid */
    assert_int_equal(af_case_from_json(&c, "{\"batch\": \"two\"}", &err), AF_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "batch"));
    assert_int_equal(af_case_from_json(&c, "{\"causal\": 1}", &err), AF_ERR_FORMAT);
    assert_int_equal(af_case_from_json(&c, "{\"batch\": 0}", &err), AF_ERR_INVALID);
    assert_int_equal(af_case_from_json(&c, "{\"batch\": 1.5}", &err), AF_ERR_INVALID);
    assert_int_equal(af_case_from_json(&c, "{\"dtype\": \"f64\"}", &err), AF_ERR_INVALID);
    assert_int_equal(af_case_from_json(&c, "{\"dropout_p\": 2}", &err), AF_ERR_INVALID);
    assert_int_equal(af_case_from_json(&c, "{\"batch\": 2, \"key_padding\": [1]}", &err), AF_ERR_INVALID);
    assert_int_equal(af_case_from_json(&c, "{\"kv_len\": 4, \"key_padding\": [5]}", &err), AF_ERR_INVALID);
    assert_int_equal(af_case_from_json(&c, "{\"window\": [1]}", &err), AF_ERR_FORMAT);
    assert_int_equal(
        af_case_from_json(&c, "{\"q_len\": 4, \"kv_len\": 5, \"q\": {\"layout\": \"qkv_bs3hd\"}}", &err),
        AF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "packed"));
    assert_int_equal(af_case_from_json(&c, "{\"additive_mask\": {\"full_dims\": \"bxq\"}}", &err), AF_ERR_INVALID);

    /* the backward object */
    const char *bad_bwd[][2] = {
        {"{\"backward\": 3}", "backward"},
        {"{\"backward\": {\"grads\": []}}", "grads"},
        {"{\"backward\": {}}", "grads"},
        {"{\"backward\": {\"grads\": [\"dq\", \"dx\"]}}", "grads"},
        {"{\"backward\": {\"grads\": [\"dmask\"]}}", "dmask"},
        {"{\"backward\": {\"grads\": [\"dq\"], \"do\": {\"pad\": 65}}}", "backward.do"},
    };
    for (size_t k = 0; k < sizeof bad_bwd / sizeof bad_bwd[0]; k++) {
        memset(&err, 0, sizeof err);
        if (af_case_from_json(&c, bad_bwd[k][0], &err) == AF_OK || !strstr(err.msg, bad_bwd[k][1]))
            fail_msg("%s: accepted or a message without \"%s\": %s", bad_bwd[k][0], bad_bwd[k][1], err.msg);
    }
    assert_int_equal(af_case_from_json(&c, "{\"q\": {\"layout\": \"qkv_bsh3d\"}, \"additive_mask\": {},"
                                           " \"backward\": {\"grads\": [\"dmask\", \"dk\"],"
                                           " \"do\": {\"dist\": \"one_hot\", \"seed\": 9}}}",
                                       &err),
                     AF_OK);
    assert_int_equal(c.bwd.grads, AF_GRAD_DMASK | AF_GRAD_DK);
    assert_int_equal(c.bwd.dout.layout, AF_LAYOUT_BSHD);
    assert_int_equal(c.bwd.dout.dist, AF_DIST_ONE_HOT);
    assert_int_equal(c.bwd.dout.seed, 9);
    assert_int_equal(af_case_from_json(&c, "{\"backward\": null}", &err), AF_OK);
    assert_int_equal(c.bwd.grads, 0);

    /* a minimal case from another tool: defaults fill in */
    assert_int_equal(af_case_from_json(&c, "{\"batch\": 2, \"q_heads\": 8, \"kv_heads\": 2, \"q_len\": 3,"
                                           " \"kv_len\": 9, \"head_dim\": 64, \"dtype\": \"bf16\", \"causal\": true,"
                                           " \"diagonal\": \"bottom_right\", \"dropout_seed\": \"18446744073709551615\"}",
                                       &err),
                     AF_OK);
    assert_int_equal(c.batch, 2);
    assert_int_equal(c.q_heads, 8);
    assert_int_equal(c.kv_heads, 2);
    assert_int_equal(c.v_head_dim, 64); /* defaults to head_dim */
    assert_int_equal(c.dtype, AF_BF16);
    assert_true(c.causal);
    assert_int_equal(c.diag, AF_DIAG_BOTTOM_RIGHT);
    assert_true(c.dropout_seed == UINT64_MAX);
    assert_false(c.scale_set);
    assert_int_equal(c.window_left, -1);
    assert_int_equal(c.window_right, -1);
    assert_int_equal(c.bwd.grads, 0); /* no backward object: forward-only */
}

static void test_json_round_trip_decoded(void **state) {
    (void)state;
    xorshift x = {0x51};
    size_t n = scaled(20000), failures = 0;
    uint8_t buf[INPUT_MAX];
    for (size_t t = 0; t < n; t++) {
        size_t len = (size_t)(xs_next(&x) % (INPUT_MAX + 1));
        for (size_t k = 0; k < len; k++) buf[k] = (uint8_t)xs_next(&x);
        af_case c;
        af_case_decode(&c, buf, len, 0);
        if (!json_round_trip(&c, failures < 3)) failures++;
    }
    /* hand-picked values: signed zero, a subnormal, 17-digit doubles */
    const double vals[] = {-0.0, 0x1p-1074, 0.1, 1.0 / 3.0, 0.44477898328394794, 9999.999999999998, 1e-300};
    for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) {
        af_case c;
        af_case_default(&c);
        c.scale_set = true, c.scale = vals[k];
        if (vals[k] >= AF_MIN_SOFTCAP) c.softcap = vals[k]; /* valid cases only */
        if (vals[k] >= 0 && vals[k] <= 1) c.dropout_p = vals[k];
        if (!json_round_trip(&c, failures < 6)) failures++;
    }
    if (failures) fail_msg("%zu of %zu cases did not round-trip through JSON", failures, n + 7);
}

/* --- the generator ------------------------------------------------------------------- */

static void test_generate_valid(void **state) {
    (void)state;
    af_rng r;
    af_rng_init(&r, 1234, 0);
    size_t n = scaled(20000);
    for (size_t t = 0; t < n; t++) {
        af_case c;
        double max_flops = t % 2 ? 2e6 : 0.0;
        size_t budget = t % 3 == 0 ? (size_t)1 << 20 : 0;
        af_case_generate(&c, &r, budget, max_flops);
        const char *bad = check_fields(&c, budget ? budget : AF_DEFAULT_BUDGET);
        af_error err = {0};
        if (bad || af_case_validate(&c, budget, &err) != AF_OK) {
            print_case("generated", &c);
            fail_msg("generated case invalid: %s %s", bad ? bad : "", err.msg);
        }
        if (max_flops > 0 && af_case_flops(&c) > max_flops) {
            print_case("generated", &c);
            fail_msg("flops %g over the limit %g", af_case_flops(&c), max_flops);
        }
        uint8_t enc[AF_CASE_ENCODED_MAX];
        size_t len = af_case_encode(&c, enc, sizeof enc);
        assert_true(len > 0);
        af_case d;
        af_case_decode(&d, enc, len, budget);
        if (!af_case_equal(&c, &d)) {
            print_case("generated", &c);
            print_case("decoded", &d);
            fail_msg("decode(encode(generated)) differs");
        }
    }
}

static void test_json_round_trip_generated(void **state) {
    (void)state;
    af_rng r;
    af_rng_init(&r, 99, 0);
    size_t n = scaled(20000), failures = 0;
    for (size_t t = 0; t < n; t++) {
        af_case c;
        af_case_generate(&c, &r, 0, 0);
        if (!json_round_trip(&c, failures < 3)) failures++;
    }
    if (failures) fail_msg("%zu of %zu generated cases did not round-trip through JSON", failures, n);
}

static void test_generate_distribution(void **state) {
    (void)state;
    af_rng r;
    af_rng_init(&r, 777, 0);
    size_t n = scaled(20000);
    size_t small = 0, packed = 0, causal_br_cross = 0, kp_zero = 0, bmask = 0, amask_lowest = 0, dropout = 0;
    size_t bcast = 0, nan_special = 0, inf_special = 0, dtypes[3] = {0}, layouts[AF_LAYOUT_COUNT] = {0};
    for (size_t t = 0; t < n; t++) {
        af_case c;
        af_case_generate(&c, &r, 0, 0);
        small += (c.q_len > c.kv_len ? c.q_len : c.kv_len) <= 16;
        packed += af_case_is_packed(&c);
        causal_br_cross += c.causal && c.diag == AF_DIAG_BOTTOM_RIGHT && c.q_len != c.kv_len;
        bool zero = false;
        for (uint32_t b = 0; b < c.batch; b++) zero |= c.key_padding && c.kv_valid[b] == 0;
        kp_zero += zero;
        bmask += c.bmask.present;
        amask_lowest += c.amask.present && c.amask.fill == AF_FILL_LOWEST;
        dropout += c.dropout_p > 0.0;
        bool bc = false, sn = false, si = false;
        for (int k = 0; k < AF_QKV_COUNT; k++) {
            bc |= c.t[k].bcast != AF_BCAST_NONE;
            sn |= c.t[k].special == AF_SPECIAL_NAN_MASKED || c.t[k].special == AF_SPECIAL_NAN_LIVE;
            si |= c.t[k].special == AF_SPECIAL_INF_MASKED || c.t[k].special == AF_SPECIAL_INF_LIVE;
        }
        bcast += bc, nan_special += sn, inf_special += si;
        dtypes[c.dtype]++;
        layouts[c.t[AF_Q].layout]++;
    }
    double dn = (double)n;
    print_message("small %.3f packed %.3f causal_br_cross %.3f kp_zero %.3f bmask %.3f amask_lowest %.3f "
                  "dropout %.3f bcast %.3f nan %.3f inf %.3f\n",
                  (double)small / dn, (double)packed / dn, (double)causal_br_cross / dn, (double)kp_zero / dn,
                  (double)bmask / dn, (double)amask_lowest / dn, (double)dropout / dn, (double)bcast / dn,
                  (double)nan_special / dn, (double)inf_special / dn);
    int bad = 0;
#define AT_LEAST(count, frac)                                                                      \
    do {                                                                                           \
        if ((double)(count) < (frac) * dn) {                                                       \
            print_error("%s: %.4f of the cases, expected at least %.2f\n", #count, (double)(count) / dn, frac); \
            bad = 1;                                                                               \
        }                                                                                          \
    } while (0)
    AT_LEAST(small, 0.5);
    AT_LEAST(packed, 0.01);
    AT_LEAST(causal_br_cross, 0.01);
    AT_LEAST(kp_zero, 0.01);
    AT_LEAST(bmask, 0.01);
    AT_LEAST(amask_lowest, 0.01);
    AT_LEAST(dropout, 0.01);
    AT_LEAST(bcast, 0.01);
    AT_LEAST(nan_special, 0.01);
    AT_LEAST(inf_special, 0.01);
    for (int d = 0; d < 3; d++) AT_LEAST(dtypes[d], 0.01);
    for (int l = 0; l < AF_LAYOUT_COUNT; l++) AT_LEAST(layouts[l], 0.01);
#undef AT_LEAST
    if (bad) fail_msg("the generator's distribution misses a corner (see above)");
}

/* The backward share: about the share asked, valid, round-tripping, gradients weighted
 * towards all of them, dO's corners reached; and the draw comes last, so with no flops
 * cap every forward field is what the forward-only generator draws from the same seed. */
static void test_generate_backward(void **state) {
    (void)state;
    af_rng r, f;
    af_rng_init(&r, 4242, 0);
    size_t n = scaled(20000);
    size_t bwd = 0, all = 0, with_mask = 0, dmask = 0, bcast = 0, special = 0, overflow = 0, denormal = 0;
    size_t single[AF_GRAD_COUNT] = {0};
    af_gen_opts o = {0, 0.0, 0.25, 0.0, 0.0};
    for (size_t t = 0; t < n; t++) {
        af_case c, fw;
        f = r; /* both from the same point of the stream */
        af_case_generate_opts(&c, &r, &o);
        af_case_generate(&fw, &f, 0, 0);
        af_case g = c;
        memset(&g.bwd, 0, sizeof g.bwd);
        /* (a case near the budget may shrink for dO's bytes) */
        if (af_case_tensor_bytes(&fw) < AF_DEFAULT_BUDGET / 4 && !af_case_equal(&g, &fw)) {
            print_case("with a backward share", &c);
            print_case("forward-only", &fw);
            fail_msg("case %zu: the backward draw changed a forward field", t);
        }
        const char *bad = check_fields(&c, AF_DEFAULT_BUDGET);
        if (bad || !json_round_trip(&c, true)) fail_msg("generated backward case: %s", bad ? bad : "JSON");
        if (!c.bwd.grads) continue;
        bwd++;
        with_mask += c.amask.present;
        all += c.bwd.grads == (c.amask.present ? AF_GRAD_ALL : (AF_GRAD_ALL & ~AF_GRAD_DMASK));
        dmask += (c.bwd.grads & AF_GRAD_DMASK) != 0;
        for (int k = 0; k < AF_GRAD_COUNT; k++) single[k] += c.bwd.grads == (1u << k);
        bcast += c.bwd.dout.bcast != AF_BCAST_NONE;
        special += c.bwd.dout.special != AF_SPECIAL_NONE;
        overflow += c.bwd.dout.dist == AF_DIST_NEAR_OVERFLOW;
        denormal += c.bwd.dout.dist == AF_DIST_DENORMAL;
    }
    double dn = (double)n, db = (double)bwd;
    print_message("backward %.3f (all %.3f, dmask %.3f of %.3f with a mask) dO: bcast %.3f special %.3f "
                  "near_overflow %.3f denormal %.3f\n",
                  (double)bwd / dn, (double)all / db, (double)dmask / db, (double)with_mask / db, (double)bcast / db,
                  (double)special / db, (double)overflow / db, (double)denormal / db);
    assert_true(fabs((double)bwd / dn - 0.25) < 0.02);
    assert_true((double)all / db > 0.5);
    assert_true(dmask > 0 && dmask <= with_mask);
    for (int k = 0; k < AF_GRAD_COUNT; k++) assert_true(single[k] > 0);
    assert_true((double)bcast / db > 0.1);
    assert_true((double)special / db > 0.04 && (double)overflow / db > 0.03 && (double)denormal / db > 0.03);
    /* share 0 draws nothing more; share 1 makes every case ask for gradients */
    o.backward = 1.0;
    for (size_t t = 0; t < 200; t++) {
        af_case c;
        af_case_generate_opts(&c, &r, &o);
        assert_true(c.bwd.grads != 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_empty),
        cmocka_unit_test(test_decode_random),
        cmocka_unit_test(test_decode_adversarial),
        cmocka_unit_test(test_byte_locality),
        cmocka_unit_test(test_packed_repair),
        cmocka_unit_test(test_validate_rejects),
        cmocka_unit_test(test_budget_clamp),
        cmocka_unit_test(test_derived),
        cmocka_unit_test(test_json_rejects),
        cmocka_unit_test(test_json_round_trip_decoded),
        cmocka_unit_test(test_generate_valid),
        cmocka_unit_test(test_json_round_trip_generated),
        cmocka_unit_test(test_generate_distribution),
        cmocka_unit_test(test_generate_backward),
        cmocka_unit_test(test_backward_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
