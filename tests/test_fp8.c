/* test_fp8.c - the FP8 case dtype (docs/design.md section 2, "FP8"; docs/case-json.md): the
 * e4m3fn and e5m2 conversions against a decoder written here from the formats' definitions
 * and hand values, rounding against a brute-force nearest search, generated inputs, the byte
 * record and JSON round trips, the total decoder on random bytes, the float64 reference
 * against an independent dequantize-then-float64 triple loop, and a bundle's inputs read
 * back bit for bit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/bundle.h"
#include "attnfuzz/case.h"
#include "attnfuzz/rng.h"
#include "attnfuzz/tensor.h"
#include "test_util.h"

/* --- an independent decoder -------------------------------------------------------- */

/* The value of FP8 byte b, from the formats' definitions: e4m3fn has sign, 4 exponent bits
 * (bias 7), 3 mantissa bits, subnormals at exponent 0 (m * 2^-9), no Inf, NaN only at
 * S.1111.111; e5m2 has sign, 5 exponent bits (bias 15), 2 mantissa bits, subnormals m * 2^-16,
 * Inf at S.11111.00 and NaN at S.11111.{01,10,11}. */
static double hand_fp8(uint8_t b, int e5m2) {
    double sign = (b & 0x80) ? -1.0 : 1.0;
    int e = e5m2 ? (b >> 2) & 0x1f : (b >> 3) & 0xf;
    int m = e5m2 ? b & 3 : b & 7;
    int mbits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
    if (!e5m2 && e == 15 && m == 7) return copysign((double)NAN, sign);
    if (e5m2 && e == 31) return m ? copysign((double)NAN, sign) : sign * HUGE_VAL;
    double frac = (double)m / (double)(1 << mbits);
    if (e == 0) return sign * frac * pow(2.0, 1 - bias);
    return sign * (1.0 + frac) * pow(2.0, e - bias);
}

static void test_fp8_hand_values(void **state) {
    (void)state;
    /* e4m3fn */
    assert_true(hand_fp8(0x7e, 0) == 448.0);
    assert_true(hand_fp8(0x01, 0) == 0x1p-9);
    assert_true(hand_fp8(0x08, 0) == 0x1p-6);
    assert_true(hand_fp8(0x38, 0) == 1.0);
    assert_true(hand_fp8(0xbe, 0) == -1.75);
    assert_true(isnan(hand_fp8(0x7f, 0)) && isnan(hand_fp8(0xff, 0)));
    assert_true(hand_fp8(0x78, 0) == 256.0); /* exponent 15 holds numbers, unlike IEEE */
    /* e5m2 */
    assert_true(hand_fp8(0x7b, 1) == 57344.0);
    assert_true(hand_fp8(0x01, 1) == 0x1p-16);
    assert_true(hand_fp8(0x04, 1) == 0x1p-14);
    assert_true(hand_fp8(0x3c, 1) == 1.0);
    assert_true(hand_fp8(0x7c, 1) == HUGE_VAL && hand_fp8(0xfc, 1) == -HUGE_VAL);
    assert_true(isnan(hand_fp8(0x7d, 1)) && isnan(hand_fp8(0x7e, 1)) && isnan(hand_fp8(0x7f, 1)));
    /* the library against the hand decoder on every byte, and its format constants */
    for (int f = 0; f < 2; f++) {
        af_dtype dt = f ? AF_E5M2 : AF_E4M3;
        for (unsigned b = 0; b < 256; b++) {
            double want = hand_fp8((uint8_t)b, f), got = af_fp8_to_f64((uint8_t)b, dt);
            if (!(got == want || (isnan(got) && isnan(want))) || signbit(got) != signbit(want))
                fail_msg("%s byte 0x%02x: %.17g, the definition says %.17g", af_dtype_names[dt], b, got, want);
            uint8_t p = (uint8_t)b;
            assert_true(af_dtype_load(dt, &p, 0) == got || isnan(got));
        }
        assert_true(af_dtype_size(dt) == 1);
    }
    assert_true(af_dtype_max(AF_E4M3) == 448.0 && af_dtype_max(AF_E5M2) == 57344.0);
    assert_true(af_dtype_min_subnormal(AF_E4M3) == 0x1p-9 && af_dtype_min_subnormal(AF_E5M2) == 0x1p-16);
    assert_true(af_dtype_min_normal(AF_E4M3) == 0x1p-6 && af_dtype_min_normal(AF_E5M2) == 0x1p-14);
    assert_int_equal(af_dtype_from_name("e4m3"), AF_E4M3);
    assert_int_equal(af_dtype_from_name("float8_e5m2"), AF_E5M2);
}

/* Nearest byte to x by search over every finite value; a tie goes to the even mantissa (the
 * byte's lowest bit 0). Returns -1 past the largest finite value's rounding bound. */
static int nearest_fp8(double x, int e5m2) {
    int best = -1;
    double bd = HUGE_VAL;
    for (unsigned b = 0; b < 256; b++) {
        double v = hand_fp8((uint8_t)b, e5m2);
        if (!isfinite(v) || signbit(v) != signbit(x)) continue;
        double d = fabs(v - x);
        if (d < bd || (d == bd && best >= 0 && (best & 1) && !(b & 1))) bd = d, best = (int)b;
    }
    double max = e5m2 ? 57344.0 : 448.0, half_ulp = e5m2 ? 4096.0 : 16.0;
    if (fabs(x) > max + half_ulp || (e5m2 && fabs(x) == max + half_ulp)) return -1; /* e5m2's tie is to 2^16 */
    return best;
}

static void test_fp8_rounding(void **state) {
    (void)state;
    /* hand values: the top binade's ties, overflow, saturation, subnormal ties */
    assert_int_equal(af_fp8_from_f64(448.0, AF_E4M3, 0), 0x7e);
    assert_int_equal(af_fp8_from_f64(464.0, AF_E4M3, 0), 0x7e); /* the tie 448 | (480) goes to even 448 */
    assert_int_equal(af_fp8_from_f64(465.0, AF_E4M3, 0), 0x7f); /* past it: NaN, e4m3fn has no Inf */
    assert_int_equal(af_fp8_from_f64(-1e9, AF_E4M3, 0), 0xff);
    assert_int_equal(af_fp8_from_f64(-1e9, AF_E4M3, 1), 0xfe); /* saturating: -448 */
    assert_int_equal(af_fp8_from_f64(HUGE_VAL, AF_E4M3, 1), 0x7e);
    assert_int_equal(af_fp8_from_f64(HUGE_VAL, AF_E4M3, 0), 0x7f);
    assert_int_equal(af_fp8_from_f64(432.0, AF_E4M3, 0), 0x7e); /* 416 | 448 tie: even 448 */
    assert_int_equal(af_fp8_from_f64(424.0, AF_E4M3, 0), 0x7d); /* 416 */
    assert_int_equal(af_fp8_from_f64(0x1p-10, AF_E4M3, 0), 0x00); /* 0 | 2^-9 tie: even 0 */
    assert_int_equal(af_fp8_from_f64(3 * 0x1p-10, AF_E4M3, 0), 0x02);
    assert_int_equal(af_fp8_from_f64(-0.0, AF_E4M3, 0), 0x80);
    assert_int_equal(af_fp8_from_f64(NAN, AF_E4M3, 1), 0x7f);
    assert_int_equal(af_fp8_from_f64(57344.0, AF_E5M2, 0), 0x7b);
    assert_int_equal(af_fp8_from_f64(61439.0, AF_E5M2, 0), 0x7b);
    assert_int_equal(af_fp8_from_f64(61440.0, AF_E5M2, 0), 0x7c); /* to even 2^16: Inf */
    assert_int_equal(af_fp8_from_f64(-HUGE_VAL, AF_E5M2, 0), 0xfc);
    assert_int_equal(af_fp8_from_f64(1e30, AF_E5M2, 1), 0x7b);
    assert_int_equal(af_fp8_from_f64(0x1p-17, AF_E5M2, 0), 0x00);
    assert_int_equal(af_fp8_from_f64(0x1.8p-17, AF_E5M2, 0), 0x01);
    /* every finite value round-trips; random doubles round to the nearest by search */
    xorshift xs = {0x9e3779b97f4a7c15ull};
    for (int f = 0; f < 2; f++) {
        af_dtype dt = f ? AF_E5M2 : AF_E4M3;
        for (unsigned b = 0; b < 256; b++) {
            double v = hand_fp8((uint8_t)b, f);
            if (isfinite(v)) assert_int_equal(af_fp8_from_f64(v, dt, 0), b);
        }
        size_t n = scaled_at_least(200000, 5000);
        for (size_t i = 0; i < n; i++) {
            uint64_t r = xs_next(&xs);
            /* magnitudes across the whole range, subnormals and overflow included */
            double x = ldexp((double)(r >> 11) / 0x1p53, (int)(r % 48) - (f ? 26 : 14)) * ((r >> 7) & 1 ? -1.0 : 1.0);
            int want = nearest_fp8(x, f);
            int got = af_fp8_from_f64(x, dt, 0);
            if (want < 0) {
                if (!(f ? (got & 0x7f) == 0x7c : (got & 0x7f) == 0x7f)) fail_msg("%s %.17g: 0x%02x, want overflow", af_dtype_names[dt], x, got);
            } else if (got != want) {
                fail_msg("%s %.17g: 0x%02x, the nearest is 0x%02x", af_dtype_names[dt], x, got, want);
            }
            assert_true(af_round_f64(x, dt) == hand_fp8((uint8_t)got, f) || isnan(af_round_f64(x, dt)));
        }
    }
}

/* --- cases --------------------------------------------------------------------------- */

static void gen_fp8(af_case *c, af_rng *r, double max_flops) {
    af_gen_opts go = {0, max_flops, 0.0, 0.0, 1.0};
    af_case_generate_opts(c, r, &go);
}

static void test_fp8_case_round_trips(void **state) {
    (void)state;
    af_rng r;
    af_rng_init(&r, 33, 0);
    size_t n = scaled_at_least(3000, 300), fp8 = 0, e5 = 0, kv = 0;
    for (size_t i = 0; i < n; i++) {
        af_case c, d;
        gen_fp8(&c, &r, 2e6);
        if (i % 3 == 1) af_case_mutate(&c, &r, 0);
        af_error err = {0};
        if (af_case_validate(&c, 0, &err) != AF_OK) fail_msg("case %zu invalid: %s", i, err.msg);
        fp8 += c.fp8.fmt != AF_FP8_NONE, e5 += c.fp8.fmt == AF_FP8_E5M2, kv += c.fp8.kv_only;
        if (c.fp8.fmt != AF_FP8_NONE) {
            assert_true(c.dtype == AF_F16 || c.dtype == AF_BF16);
            assert_int_equal(c.bwd.grads, 0);
            assert_int_equal(c.serve.forms, 0);
            for (int t = 0; t < AF_QKV_COUNT; t++) assert_true(c.fp8.descale[t] > 0.0f);
            assert_int_equal(af_case_input_dtype(&c, AF_K), c.fp8.fmt == AF_FP8_E4M3 ? AF_E4M3 : AF_E5M2);
            assert_int_equal(af_case_input_dtype(&c, AF_Q), c.fp8.kv_only ? c.dtype : af_case_input_dtype(&c, AF_K));
            if (c.fp8.kv_only) assert_true(c.fp8.descale[AF_Q] == 1.0f && !af_case_is_packed(&c));
        }
        uint8_t buf[AF_CASE_ENCODED_MAX];
        size_t len = af_case_encode(&c, buf, sizeof buf);
        assert_true(len > 0);
        af_case_decode(&d, buf, len, 0);
        if (!af_case_equal(&c, &d)) fail_msg("case %zu: decode(encode) differs", i);
        char *j = af_case_to_json(&c);
        assert_non_null(j);
        if (af_case_from_json(&d, j, &err) != AF_OK) fail_msg("case %zu: %s\n%s", i, err.msg, j);
        if (!af_case_equal(&c, &d)) fail_msg("case %zu: JSON round trip differs\n%s", i, j);
        free(j);
    }
    assert_true(fp8 > n / 2); /* mutation turns some back into f16/bf16 ones */
    assert_true(e5 > n / 10);
    assert_true(kv > n / 10);
    /* the JSON a tool writes: descales default to 1, must be float32 values */
    af_case c;
    af_error err = {0};
    assert_int_equal(af_case_from_json(&c, "{\"dtype\": \"f16\", \"fp8\": {\"format\": \"e5m2\"}}", &err), AF_OK);
    assert_int_equal(c.fp8.fmt, AF_FP8_E5M2);
    assert_true(c.fp8.descale[0] == 1.0f && c.fp8.descale[2] == 1.0f);
    assert_int_equal(af_case_from_json(&c, "{\"dtype\": \"bf16\", \"fp8\": {\"format\": \"e4m3\", \"descale\": [0.1, 1, 1]}}", &err),
                     AF_ERR_INVALID);
    assert_int_equal(af_case_from_json(&c, "{\"dtype\": \"f32\", \"fp8\": {\"format\": \"e4m3\"}}", &err), AF_ERR_INVALID);
    assert_int_equal(af_case_from_json(&c, "{\"fp8\": {\"format\": \"e3m4\"}}", &err), AF_ERR_INVALID);
    assert_int_equal(af_case_from_json(&c, "{\"dtype\": \"f16\", \"fp8\": {\"format\": \"e4m3\", \"kv_only\": true, "
                                           "\"descale\": [0.5, 1, 1]}}", &err), AF_ERR_INVALID); /* q has no descale */
    assert_int_equal(af_case_from_json(&c, "{\"dtype\": \"f16\", \"fp8\": {\"format\": \"e4m3\", \"kv_only\": true}, "
                                           "\"q\": {\"layout\": \"qkv_bs3hd\"}}", &err), AF_ERR_INVALID);
    assert_int_equal(af_case_from_json(&c, "{\"dtype\": \"f16\", \"fp8\": {\"format\": \"e5m2\", \"kv_only\": true}}", &err), AF_OK);
    assert_int_equal(af_case_input_dtype(&c, AF_Q), AF_F16);
    assert_int_equal(af_case_input_dtype(&c, AF_V), AF_E5M2);
}

/* Any byte string decodes to a valid case; its encoding decodes to the same case. Bytes long
 * enough to reach the FP8 record give FP8 cases a third of the time. */
static void test_fp8_total_decoder(void **state) {
    (void)state;
    xorshift xs = {12345};
    size_t n = scaled_at_least(20000, 2000), fp8 = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t in[AF_CASE_ENCODED_MAX], out[AF_CASE_ENCODED_MAX];
        size_t len = (size_t)(xs_next(&xs) % sizeof in);
        for (size_t k = 0; k < len; k++) in[k] = (uint8_t)xs_next(&xs);
        if (i % 2) in[0] = 0; /* batch 1: the FP8 record starts at byte 114 + 4 + 11 + 27 = 156 */
        af_case c, d;
        af_case_decode(&c, in, len, (size_t)1 << 20);
        af_error err = {0};
        if (af_case_validate(&c, (size_t)1 << 20, &err) != AF_OK) fail_msg("bytes %zu: %s", i, err.msg);
        fp8 += c.fp8.fmt != AF_FP8_NONE;
        size_t m = af_case_encode(&c, out, sizeof out);
        assert_true(m > 0);
        af_case_decode(&d, out, m, (size_t)1 << 20);
        if (!af_case_equal(&c, &d)) fail_msg("bytes %zu: decode(encode(decode)) differs", i);
    }
    assert_true(fp8 > n / 10);
}

/* --- inputs -------------------------------------------------------------------------- */

static uint8_t stored_at(const af_view *v, size_t b, size_t h, size_t s, size_t d) {
    return *af_view_fp8_at(v, b, h, s, d);
}

static void test_fp8_inputs(void **state) {
    (void)state;
    af_inputs *in = af_inputs_create();
    af_error err = {0};
    for (int f = 0; f < 2; f++) {
        af_case c;
        af_case_default(&c);
        c.dtype = AF_BF16;
        c.fp8.fmt = f ? AF_FP8_E5M2 : AF_FP8_E4M3;
        c.q_len = c.kv_len = 64, c.head_dim = c.v_head_dim = 64;
        c.t[AF_Q].dist = AF_DIST_NEAR_OVERFLOW;
        c.t[AF_K].dist = AF_DIST_DENORMAL;
        c.t[AF_V].dist = AF_DIST_NORMAL, c.t[AF_V].special = AF_SPECIAL_NAN_LIVE;
        c.fp8.descale[0] = 0.5f, c.fp8.descale[1] = 3.0f, c.fp8.descale[2] = 0x1p-8f;
        for (int t = 0; t < 3; t++) c.t[t].seed = 7u + (uint32_t)t;
        assert_int_equal(af_case_validate(&c, 0, &err), AF_OK);
        assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
        const af_case_tensors *t = af_inputs_get(in);
        assert_int_equal(t->q.dtype, f ? AF_E5M2 : AF_E4M3);
        double max = f ? 57344.0 : 448.0;
        size_t at_max = 0, nan = 0;
        for (size_t s = 0; s < 64; s++)
            for (size_t d = 0; d < 64; d++) {
                uint8_t q = stored_at(&t->qv, 0, 0, s, d), k = stored_at(&t->kv, 0, 0, s, d), v = stored_at(&t->vv, 0, 0, s, d);
                double qx = hand_fp8(q, f);
                assert_true(fabs(qx) >= 0.25 * max * (1.0 - 1.0 / 8.0) && fabs(qx) <= max); /* saturated, finite */
                at_max += fabs(qx) == max;
                assert_true(af_view_get(&t->qv, 0, 0, s, d) == qx * 0.5); /* the view dequantizes */
                assert_true((k & 0x7f) <= (f ? 0x04 : 0x08)); /* subnormal, or rounded up to the smallest normal */
                if (isnan(hand_fp8(v, f))) {
                    nan++;
                    assert_true(f || (v & 0x7f) == 0x7f);
                    assert_true(!f || ((v & 0x7f) >= 0x7d));
                }
            }
        assert_true(at_max > 64); /* the values that round or clamp to the largest finite one */
        assert_int_equal(nan, 1);
    }
    af_inputs_destroy(in);
}

/* --- the reference against a dequantize-then-float64 triple loop --------------------- */

/* Independent of src/backends/ref.c: stored bytes through the hand decoder times the
 * descale, GQA by h / group, scores scaled, causal by the hand diagonal, a plain softmax over
 * the live keys (none: 0), P V over them. The case has no other mask, no softcap, no dropout,
 * no planted values. */
static void naive_attention(const af_case *c, const af_case_tensors *t, double *out) {
    size_t B = c->batch, Hq = c->q_heads, Sq = c->q_len, Sk = c->kv_len, D = c->head_dim, Dv = c->v_head_dim;
    size_t group = Hq / c->kv_heads;
    int e5 = c->fp8.fmt == AF_FP8_E5M2;
    double scale = c->scale_set ? c->scale : 1.0 / sqrt((double)D);
    long off = !c->causal ? 0 : c->diag == AF_DIAG_TOP_LEFT ? 0 : (long)Sk - (long)Sq;
    if (c->causal && c->diag == AF_DIAG_EXPLICIT) off = c->diag_offset;
    double *s = malloc(Sk * sizeof *s);
    assert_non_null(s);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hq; h++)
            for (size_t i = 0; i < Sq; i++) {
                double m = -HUGE_VAL;
                size_t live = 0;
                for (size_t j = 0; j < Sk; j++) {
                    s[j] = -HUGE_VAL;
                    if (c->causal && (long)j > (long)i + off) continue;
                    double acc = 0.0;
                    for (size_t d = 0; d < D; d++) {
                        /* kv_only: Q in the case dtype (f16 or bf16), exact in double */
                        double qx = c->fp8.kv_only ? af_dtype_load(t->qv.dtype, t->qv.data, af_view_offset(&t->qv, b, h, i, d))
                                                   : hand_fp8(stored_at(&t->qv, b, h, i, d), e5) * (double)c->fp8.descale[0];
                        acc += qx * (hand_fp8(stored_at(&t->kv, b, h / group, j, d), e5) * (double)c->fp8.descale[1]);
                    }
                    s[j] = acc * scale;
                    m = s[j] > m ? s[j] : m;
                    live++;
                }
                double sum = 0.0;
                for (size_t j = 0; j < Sk; j++) sum += isinf(s[j]) && s[j] < 0 ? 0.0 : exp(s[j] - m);
                for (size_t d = 0; d < Dv; d++) {
                    double o = 0.0;
                    for (size_t j = 0; live && j < Sk; j++) {
                        if (isinf(s[j]) && s[j] < 0) continue;
                        o += exp(s[j] - m) / sum * hand_fp8(stored_at(&t->vv, b, h / group, j, d), e5) *
                             (double)c->fp8.descale[2];
                    }
                    out[((b * Hq + h) * Sq + i) * Dv + d] = o;
                }
            }
    free(s);
}

static void test_fp8_reference_independent(void **state) {
    (void)state;
    af_rng r;
    af_rng_init(&r, 8, 0);
    af_backend *ref = NULL;
    af_error err = {0};
    assert_int_equal(af_backend_open("ref", &ref, &err), AF_OK);
    af_inputs *in = af_inputs_create();
    size_t n = scaled_at_least(300, 30), compared = 0, kv_only = 0;
    for (size_t k = 0; k < n; k++) {
        af_case c;
        gen_fp8(&c, &r, 2e5);
        /* what the triple loop leaves out */
        c.amask.present = c.bmask.present = false;
        c.key_padding = false;
        c.window_left = c.window_right = -1;
        c.softcap = 0.0, c.dropout_p = 0.0;
        if (c.diag == AF_DIAG_BOTTOM_RIGHT_VALID) c.diag = AF_DIAG_BOTTOM_RIGHT;
        for (int t = 0; t < AF_QKV_COUNT; t++) c.t[t].special = AF_SPECIAL_NONE;
        af_case_repair(&c, 0);
        assert_int_equal(c.fp8.fmt != AF_FP8_NONE, 1);
        assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
        const af_case_tensors *t = af_inputs_get(in);
        af_tensor out;
        af_backend_out_shape(ref, &c, &out);
        size_t cnt = af_tensor_numel(&out);
        double *got = malloc(cnt * sizeof *got), *want = malloc(cnt * sizeof *want);
        assert_non_null(got);
        assert_non_null(want);
        out.data = got;
        assert_int_equal(af_backend_run(ref, t, &out, &err), AF_OK);
        naive_attention(&c, t, want);
        /* both in float64 on exact inputs: they differ by summation order only, relative to
         * the row's sum of |P| |v| (at most max |v|) */
        double vmax = 0.0;
        for (size_t b = 0; b < c.batch; b++)
            for (size_t g = 0; g < c.kv_heads; g++)
                for (size_t j = 0; j < c.kv_len; j++)
                    for (size_t d = 0; d < c.v_head_dim; d++) vmax = fmax(vmax, fabs(af_view_get(&t->vv, b, g, j, d)));
        for (size_t e = 0; e < cnt; e++) {
            if (isnan(want[e]) && isnan(got[e])) continue;
            if (!(fabs(got[e] - want[e]) <= 1e-11 * vmax + 1e-300)) {
                char *j = af_case_to_json(&c);
                fail_msg("case %zu element %zu: ref %.17g, dequantize-then-float64 %.17g (max |v| %g)\n%s", k, e,
                         got[e], want[e], vmax, j ? j : "");
            }
        }
        compared += cnt;
        kv_only += c.fp8.kv_only;
        free(got);
        free(want);
    }
    assert_true(compared > 1000);
    assert_true(kv_only > 0 && kv_only < n);
    af_inputs_destroy(in);
    af_backend_close(ref);
}

/* --- bundles --------------------------------------------------------------------------- */

/* A bundle of an FP8 case stores q, k, v as their bytes (uint8), and reading its inputs
 * back gives the same bytes, NaN patterns included. */
static void test_fp8_bundle_inputs(void **state) {
    (void)state;
    char dir[] = "/tmp/test_fp8_XXXXXX";
    assert_non_null(mkdtemp(dir));
    af_case c;
    af_case_default(&c);
    c.dtype = AF_F16;
    c.fp8.fmt = AF_FP8_E5M2;
    c.batch = 2, c.q_heads = 4, c.kv_heads = 2, c.q_len = 5, c.kv_len = 7, c.head_dim = 8, c.v_head_dim = 3;
    c.t[AF_K].layout = AF_LAYOUT_BSHD, c.t[AF_K].pad = 3;
    c.t[AF_V].special = AF_SPECIAL_NAN_LIVE, c.t[AF_V].seed = 2; /* an e5m2 NaN pattern to keep */
    c.t[AF_Q].dist = AF_DIST_DENORMAL;
    c.fp8.descale[0] = 0.75f, c.fp8.descale[1] = 1e-3f, c.fp8.descale[2] = 12.0f;
    af_error err = {0};
    assert_int_equal(af_case_validate(&c, 0, &err), AF_OK);
    af_inputs *in = af_inputs_create(), *back = af_inputs_create();
    assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
    const af_case_tensors *t = af_inputs_get(in);
    size_t nref = (size_t)c.batch * c.q_heads * c.q_len * c.v_head_dim;
    double *ref = calloc(nref, sizeof *ref);
    uint8_t enc[AF_CASE_ENCODED_MAX];
    size_t len = af_case_encode(&c, enc, sizeof enc);
    af_bundle_spec spec = {0};
    spec.c = &c, spec.input = enc, spec.input_len = len, spec.tensors = t, spec.ref = ref;
    spec.kind = AF_KIND_DIVERGE, spec.signature = 0xf8, spec.who = "test";
    char path[PATH_MAX];
    assert_int_equal(af_bundle_write(dir, &spec, path, sizeof path, &err), AF_OK);
    af_bundle *b = NULL;
    if (af_bundle_read(path, &b, &err) != AF_OK) fail_msg("%s", err.msg);
    assert_true(af_case_equal(af_bundle_case(b), &c));
    if (af_bundle_load_inputs(b, back, &err) != AF_OK) fail_msg("%s", err.msg);
    const af_case_tensors *u = af_inputs_get(back);
    const af_view *va[3] = {&t->qv, &t->kv, &t->vv}, *vb[3] = {&u->qv, &u->kv, &u->vv};
    size_t nan = 0;
    for (int w = 0; w < 3; w++)
        for (size_t i0 = 0; i0 < va[w]->ne[0]; i0++)
            for (size_t i1 = 0; i1 < va[w]->ne[1]; i1++)
                for (size_t i2 = 0; i2 < va[w]->ne[2]; i2++)
                    for (size_t i3 = 0; i3 < va[w]->ne[3]; i3++) {
                        uint8_t x = stored_at(va[w], i0, i1, i2, i3), y = stored_at(vb[w], i0, i1, i2, i3);
                        if (x != y) fail_msg("tensor %d element (%zu,%zu,%zu,%zu): 0x%02x read back as 0x%02x", w, i0, i1, i2, i3, x, y);
                        nan += isnan(hand_fp8(x, 1)) ? 1u : 0u;
                    }
    assert_int_equal(nan, 1);
    af_bundle_free(b);
    af_inputs_destroy(in);
    af_inputs_destroy(back);
    free(ref);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp8_hand_values),
        cmocka_unit_test(test_fp8_rounding),
        cmocka_unit_test(test_fp8_case_round_trips),
        cmocka_unit_test(test_fp8_total_decoder),
        cmocka_unit_test(test_fp8_inputs),
        cmocka_unit_test(test_fp8_reference_independent),
        cmocka_unit_test(test_fp8_bundle_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
