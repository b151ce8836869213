/* test_case_serving.c - the serving part of a case (src/core/case_serving.c,
 * case_serving_gen.c) and its physical tensors (inputs_serving.c): the byte record after
 * the backward bytes (older inputs decode unchanged), repair and validation, JSON, the
 * per-segment derived values, the generator's share, and THD / page-cache / table / sink /
 * slope tensors checked against values worked out here from the canonical views. */
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

#include "attnfuzz/backend.h"
#include "attnfuzz/case.h"
#include "attnfuzz/rng.h"
#include "attnfuzz/tensor.h"

enum { OFF_BATCH = 0, OFF_FLAGS = 12, OFF_TQ = 81, OFF_TK = 92, OFF_TV = 103, OFF_KV_VALID = 114, BWD_LEN = 11 };
#define SERVE_FIXED 19

static size_t scaled(size_t n) { return scaled_at_least(n, 100); }

static void print_case(const char *what, const af_case *c) {
    char *j = af_case_to_json(c);
    print_error("%s:\n%s\n", what, j ? j : "(no json)");
    free(j);
}

/* Small shapes so nothing nears the budget (the record's lengths then decode as written). */
static void tame(xorshift *x, uint8_t *in, size_t n) {
    for (size_t k = 0; k < n; k++) in[k] = (uint8_t)xs_next(x);
    /* no FP8 record after the serving one (an FP8 case has no serving form: test_fp8.c) */
    size_t fp8 = OFF_KV_VALID + 4u * (1u + in[OFF_BATCH] % AF_MAX_BATCH) + BWD_LEN + SERVE_FIXED +
                 8u * (1u + in[OFF_BATCH] % AF_MAX_BATCH);
    if (fp8 < n) in[fp8] = 0;
    in[1] %= 4, in[2] %= 4;                           /* kv heads, group */
    in[3] = (uint8_t)(in[3] % 32), in[4] = 0;         /* q_len */
    in[5] = (uint8_t)(in[5] % 32), in[6] = 0;         /* kv_len */
    in[7] = (uint8_t)(in[7] % 16), in[8] = 0;         /* head dims */
    in[9] = (uint8_t)(in[9] % 16), in[10] = 0;
}

static size_t off_serve(const uint8_t *in) { return OFF_KV_VALID + 4u * (1u + in[OFF_BATCH] % AF_MAX_BATCH) + BWD_LEN; }

/* --- bytes ------------------------------------------------------------------------------ */

/* An input that ends before the serving record (every input written before it existed)
 * decodes without a serving form and encodes to the bytes it had; a record of forms 0 is
 * the same case; a record with forms decodes its fields as written, and the case encodes to
 * the dense part, eleven backward bytes and the record. */
static void test_serving_bytes(void **state) {
    (void)state;
    xorshift x = {0x5E4F};
    size_t n = scaled(4000);
    for (size_t t = 0; t < n; t++) {
        uint8_t in[1024];
        tame(&x, in, sizeof in);
        size_t S = off_serve(in);
        af_case old, zero, c;
        af_case_decode(&old, in, S, 0);
        assert_int_equal(old.serve.forms, 0);
        uint8_t enc[AF_CASE_ENCODED_MAX];
        size_t len = af_case_encode(&old, enc, sizeof enc);
        assert_int_equal(len, old.bwd.grads ? S : S - BWD_LEN);
        in[S] = 0; /* forms 0: the rest of the record says nothing */
        af_case_decode(&zero, in, sizeof in, 0);
        if (!af_case_equal(&zero, &old)) fail_msg("a serving record of forms 0 changed the case");

        uint32_t B = 1u + in[OFF_BATCH] % AF_MAX_BATCH;
        in[S] = (uint8_t)(1 + t % 15);
        in[S + 1] = (uint8_t)(1 + t % 200), in[S + 2] = 0; /* page size */
        af_case_decode(&c, in, sizeof in, 0);
        assert_int_equal(c.serve.forms, in[S]);
        af_error err = {0};
        if (af_case_validate(&c, 0, &err) != AF_OK) {
            print_case("decoded", &c);
            fail_msg("decoded serving case invalid: %s", err.msg);
        }
        assert_int_equal(c.bwd.grads, 0); /* forward-only */
        if (c.serve.forms & AF_SERVE_PAGED) assert_int_equal(c.serve.page_size, in[S + 1]);
        if (c.serve.forms & AF_SERVE_SINKS) {
            uint32_t seed = (uint32_t)in[S + 9] | (uint32_t)in[S + 10] << 8 | (uint32_t)in[S + 11] << 16 |
                            (uint32_t)in[S + 12] << 24;
            assert_int_equal(c.serve.sink_seed, seed);
        }
        if (c.serve.forms & AF_SERVE_ALIBI) {
            assert_int_equal(c.serve.alibi_symmetric, in[S + 13] & 1);
            assert_int_equal(c.serve.alibi_random, (in[S + 13] >> 1) & 1);
        }
        for (uint32_t b = 0; b < c.batch && (c.serve.forms & AF_SERVE_PACKED); b++) {
            uint32_t raw = (uint32_t)in[S + SERVE_FIXED + 4 * b] | (uint32_t)in[S + SERVE_FIXED + 4 * b + 1] << 8 |
                           (uint32_t)in[S + SERVE_FIXED + 4 * b + 2] << 16 |
                           (uint32_t)in[S + SERVE_FIXED + 4 * b + 3] << 24;
            if (raw <= c.q_len) assert_int_equal(c.serve.q_lens[b], raw);
            assert_true(c.serve.q_lens[b] <= c.q_len);
        }
        len = af_case_encode(&c, enc, sizeof enc);
        assert_int_equal(len, S - 4u * B + 4u * c.batch + SERVE_FIXED + 8u * c.batch);
        af_case d;
        af_case_decode(&d, enc, len, 0);
        if (!af_case_equal(&c, &d)) {
            print_case("decoded", &c);
            print_case("after encode + decode", &d);
            fail_msg("a serving case does not round-trip through bytes");
        }
    }
}

/* --- repair and validation -------------------------------------------------------------- */

static void base(af_case *c) {
    af_case_default(c);
    c->batch = 2, c->q_heads = c->kv_heads = 2, c->q_len = 6, c->kv_len = 9, c->head_dim = c->v_head_dim = 8;
}

static void test_serving_repair(void **state) {
    (void)state;
    af_case c;
    af_error err = {0};
    /* packed: three bshd tensors without broadcast, lengths within the view, key padding
     * and the backward part gone */
    base(&c);
    for (int t = 0; t < AF_QKV_COUNT; t++) c.t[t].layout = AF_LAYOUT_QKV_BSH3D, c.t[t].bcast = AF_BCAST_BATCH;
    c.key_padding = true, c.kv_valid[0] = 3, c.kv_valid[1] = 2;
    c.bwd.grads = AF_GRAD_DQ;
    c.serve.forms = AF_SERVE_PACKED;
    c.serve.q_lens[0] = 4, c.serve.q_lens[1] = 11, c.serve.kv_lens[0] = 1, c.serve.kv_lens[1] = 20;
    c.serve.q_lens[5] = 7; /* past the batch */
    af_case_repair(&c, 0);
    for (int t = 0; t < AF_QKV_COUNT; t++) {
        assert_int_equal(c.t[t].layout, AF_LAYOUT_BSHD);
        assert_int_equal(c.t[t].bcast, AF_BCAST_NONE);
    }
    assert_false(c.key_padding);
    assert_int_equal(c.kv_valid[0], 0);
    assert_int_equal(c.bwd.grads, 0);
    assert_int_equal(c.serve.q_lens[0], 4);
    assert_true(c.serve.q_lens[1] <= c.q_len);
    assert_true(c.serve.kv_lens[1] <= c.kv_len);
    assert_int_equal(c.serve.q_lens[5], 0);
    assert_int_equal(af_case_validate(&c, 0, &err), AF_OK);
    /* paged: K and V unbroadcast, Q keeps its own; a page size of 0 becomes 1; a planted
     * special of K ends page sharing */
    base(&c);
    c.t[AF_Q].bcast = AF_BCAST_BATCH, c.t[AF_K].bcast = AF_BCAST_HEADS;
    c.t[AF_K].special = AF_SPECIAL_NAN_MASKED;
    c.serve.forms = AF_SERVE_PAGED, c.serve.shared_pages = 3, c.serve.kv_lens[0] = 9, c.serve.kv_lens[1] = 9;
    af_case_repair(&c, 0);
    assert_int_equal(c.t[AF_Q].bcast, AF_BCAST_BATCH);
    assert_int_equal(c.t[AF_K].bcast, AF_BCAST_NONE);
    assert_int_equal(c.serve.page_size, 1);
    assert_int_equal(c.serve.shared_pages, 0);
    assert_int_equal(af_case_validate(&c, 0, &err), AF_OK);
    /* sinks and ALiBi alone: no lengths, no pages; unused fields zeroed */
    base(&c);
    c.serve.forms = AF_SERVE_SINKS | AF_SERVE_ALIBI, c.serve.page_size = 7, c.serve.kv_lens[0] = 3;
    c.serve.sink_mag_q4 = 99, c.serve.alibi_mag_q4 = 9;
    af_case_repair(&c, 0);
    assert_int_equal(c.serve.page_size, 0);
    assert_int_equal(c.serve.kv_lens[0], 0);
    assert_int_equal(c.serve.sink_mag_q4, AF_MAG_Q4_MAX);
    assert_int_equal(c.serve.alibi_mag_q4, 0); /* geometric slopes have no magnitude */
    /* validation names the field */
    base(&c);
    for (int t = 0; t < AF_QKV_COUNT; t++) c.t[t].layout = AF_LAYOUT_BSHD;
    c.serve.forms = AF_SERVE_PACKED, c.serve.q_lens[1] = 7;
    assert_int_equal(af_case_validate(&c, 0, &err), AF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "q_lens[1]"));
    c.serve.q_lens[1] = 6, c.key_padding = true;
    assert_int_equal(af_case_validate(&c, 0, &err), AF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "key_padding"));
    c.key_padding = false, c.bwd.grads = AF_GRAD_DV, c.bwd.dout.layout = AF_LAYOUT_BSHD;
    assert_int_equal(af_case_validate(&c, 0, &err), AF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "forward-only"));
}

/* --- derived values per segment ----------------------------------------------------------- */

static void test_serving_derived(void **state) {
    (void)state;
    af_case c;
    base(&c);
    c.serve.forms = AF_SERVE_PACKED;
    c.serve.q_lens[0] = 2, c.serve.kv_lens[0] = 7, c.serve.q_lens[1] = 6, c.serve.kv_lens[1] = 0;
    c.causal = true, c.diag = AF_DIAG_BOTTOM_RIGHT;
    af_case_repair(&c, 0);
    /* each segment is its own attention: bottom-right counts from its own lengths */
    assert_int_equal(af_case_diag_offset(&c, 0), 5);
    assert_int_equal(af_case_diag_offset(&c, 1), -6);
    assert_int_equal(af_case_valid_keys(&c, 0), 7);
    int64_t lo, hi;
    af_mask_row_bounds(&c, 0, 1, &lo, &hi);
    assert_true(lo == 0 && hi == 6);
    af_mask_row_bounds(&c, 0, 2, &lo, &hi); /* past the segment's 2 queries */
    assert_true(hi < lo);
    af_mask_row_bounds(&c, 1, 0, &lo, &hi); /* a segment without keys */
    assert_true(hi < lo);
    uint32_t caps = af_case_required_caps(&c);
    assert_true(caps & AF_CAP_PACKED);
    assert_true(caps & AF_CAP_CROSS);
    /* self-attention segments in a padded view of Sq != Sk: not cross */
    c.serve.q_lens[0] = 3, c.serve.kv_lens[0] = 3, c.serve.q_lens[1] = 6, c.serve.kv_lens[1] = 6;
    assert_false(af_case_required_caps(&c) & AF_CAP_CROSS);
    /* pages: ceil(kv / ps); rows share full pages of row 0 */
    base(&c);
    c.kv_len = 40;
    c.serve.forms = AF_SERVE_PAGED, c.serve.page_size = 8, c.serve.shared_pages = 3;
    c.serve.kv_lens[0] = 20, c.serve.kv_lens[1] = 40;
    af_case_repair(&c, 0);
    assert_int_equal(af_case_pages(&c, 0), 3);
    assert_int_equal(af_case_pages(&c, 1), 5);
    assert_true(af_case_required_caps(&c) & AF_CAP_PAGED);
    /* decode: at most 16 queries, a row over 256 keys */
    base(&c);
    c.q_len = 16, c.kv_len = 257;
    af_case_repair(&c, 0);
    assert_true(af_case_split_kv(&c));
    c.q_len = 17;
    assert_false(af_case_split_kv(&c));
    c.q_len = 1, c.serve.forms = AF_SERVE_PAGED, c.serve.page_size = 16, c.serve.kv_lens[0] = 256;
    c.serve.kv_lens[1] = 256;
    assert_false(af_case_split_kv(&c)); /* rows of 256 keys: one split */
}

/* --- JSON ----------------------------------------------------------------------------- */

static void test_serving_json(void **state) {
    (void)state;
    af_rng r;
    af_rng_init(&r, 77, 1);
    af_gen_opts o = {0, 2e7, 0.0, 1.0, 0.0};
    for (size_t t = 0; t < scaled(3000); t++) {
        af_case c, d;
        af_case_generate_opts(&c, &r, &o);
        char *j = af_case_to_json(&c);
        assert_non_null(j);
        af_error err = {0};
        if (af_case_from_json(&d, j, &err) != AF_OK) fail_msg("%s\n%s", err.msg, j);
        if (!af_case_equal(&c, &d)) fail_msg("JSON round trip changed the case:\n%s", j);
        free(j);
    }
    /* what another tool writes: defaults for what it leaves out */
    af_case c;
    af_error err = {0};
    const char *ok = "{\"batch\": 2, \"q_len\": 5, \"kv_len\": 9, \"head_dim\": 4, \"q\": {\"layout\": \"bshd\"},"
                     " \"k\": {\"layout\": \"bshd\"}, \"v\": {\"layout\": \"bshd\"},"
                     " \"serving\": {\"forms\": [\"packed\", \"paged\", \"sinks\"], \"q_lens\": [5, 0],"
                     " \"kv_lens\": [9, 3]}}";
    assert_int_equal(af_case_from_json(&c, ok, &err), AF_OK);
    assert_int_equal(c.serve.forms, AF_SERVE_PACKED | AF_SERVE_PAGED | AF_SERVE_SINKS);
    assert_int_equal(c.serve.page_size, 16);
    assert_int_equal(c.serve.kv_lens[1], 3);
    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"{\"batch\": 2, \"serving\": {\"forms\": [\"packed\"], \"q_lens\": [1]}}", "q_lens"},
        {"{\"serving\": {\"forms\": [\"tiled\"]}}", "forms"},
        {"{\"serving\": {\"forms\": []}}", "forms"},
        {"{\"q_len\": 4, \"serving\": {\"forms\": [\"packed\"], \"q_lens\": [5], \"kv_lens\": [1]}}", "q_lens"},
        {"{\"serving\": {\"forms\": [\"paged\"], \"kv_lens\": [1], \"page_size\": 0}}", "page_size"},
        {"{\"serving\": {\"forms\": [\"alibi\"], \"alibi_slopes\": \"sloped\"}}", "alibi_slopes"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        if (af_case_from_json(&c, bad[k].json, &err) == AF_OK) fail_msg("accepted %s", bad[k].json);
        if (!strstr(err.msg, bad[k].msg)) fail_msg("%s: message \"%s\" does not name %s", bad[k].json, err.msg, bad[k].msg);
    }
}

/* --- the generator's share ------------------------------------------------------------ */

static void test_serving_generate(void **state) {
    (void)state;
    af_rng r, f;
    af_rng_init(&r, 9090, 0);
    /* share 0 draws exactly what the generator always drew */
    for (size_t t = 0; t < scaled(2000); t++) {
        af_case a, b;
        af_gen_opts z = {0, 2e7, 0.0, 0.0, 0.0};
        f = r;
        af_case_generate_opts(&a, &r, &z);
        af_case_generate(&b, &f, 0, 2e7);
        assert_true(af_case_equal(&a, &b));
    }
    size_t n = scaled(20000), forms[16] = {0}, decode = 0, decode_long = 0, zero_q = 0, zero_k = 0, cross_seg = 0,
           big_page = 0, partial_page = 0, shared = 0, sym = 0, random_slopes = 0, batch2 = 0;
    af_gen_opts o = {0, 2e7, 0.0, 1.0, 0.0};
    for (size_t t = 0; t < n; t++) {
        af_case c;
        af_case_generate_opts(&c, &r, &o);
        af_case_cap_flops(&c, 2e7, 0); /* as the campaign does */
        af_error err = {0};
        if (af_case_validate(&c, 0, &err) != AF_OK) {
            print_case("generated", &c);
            fail_msg("generated serving case invalid: %s", err.msg);
        }
        assert_true(af_case_flops(&c) <= 2e7);
        forms[c.serve.forms]++;
        if (af_case_split_kv(&c)) {
            decode++;
            for (uint32_t b = 0; b < c.batch; b++)
                if (af_case_seg_k(&c, b) >= 32768) decode_long++;
        }
        batch2 += c.batch >= 2;
        for (uint32_t b = 0; b < c.batch; b++) {
            if (c.serve.forms & AF_SERVE_PACKED) {
                zero_q += af_case_seg_q(&c, b) == 0;
                cross_seg += af_case_seg_q(&c, b) != af_case_seg_k(&c, b);
            }
            if (af_case_has_lens(&c)) zero_k += af_case_seg_k(&c, b) == 0;
            if ((c.serve.forms & AF_SERVE_PAGED) && af_case_seg_k(&c, b) % c.serve.page_size) partial_page++;
        }
        big_page += (c.serve.forms & AF_SERVE_PAGED) && c.serve.page_size > 128;
        for (uint32_t b = 1; b < c.batch; b++)
            if ((c.serve.forms & AF_SERVE_PAGED) && c.serve.shared_pages && af_case_seg_k(&c, 0) >= c.serve.page_size &&
                af_case_seg_k(&c, b) >= c.serve.page_size) {
                shared++;
                break;
            }
        sym += c.serve.alibi_symmetric;
        random_slopes += c.serve.alibi_random;
    }
    double dn = (double)n;
    print_message("decode %.3f (of them a row of 32k+ keys %zu), zero q %zu, zero k %zu, big pages %.3f, shared %.3f\n",
                  (double)decode / dn, decode_long, zero_q, zero_k, (double)big_page / dn, (double)shared / dn);
    int bad = 0;
#define AT_LEAST(count, frac)                                                                                          \
    do {                                                                                                               \
        if ((double)(count) < (frac) * dn) {                                                                           \
            print_error("%s: %.4f of the cases, expected at least %.3f\n", #count, (double)(count) / dn, frac);         \
            bad = 1;                                                                                                   \
        }                                                                                                              \
    } while (0)
    for (int fm = 0; fm < 16; fm++) AT_LEAST(forms[fm], 0.005); /* every combination of forms */
    AT_LEAST(decode, 0.1);
    AT_LEAST(decode_long, 0.001);
    AT_LEAST(zero_q, 0.01);
    AT_LEAST(zero_k, 0.01);
    AT_LEAST(cross_seg, 0.05);
    AT_LEAST(big_page, 0.02);
    AT_LEAST(partial_page, 0.05);
    AT_LEAST(shared, 0.01);
    AT_LEAST(sym, 0.02);
    AT_LEAST(random_slopes, 0.02);
    AT_LEAST(batch2, 0.5);
#undef AT_LEAST
    if (bad) fail_msg("the serving share misses a corner (see above)");
}

/* Mutation and crossover keep serving cases valid; a dense forward case never gains one. */
static void test_serving_mutate(void **state) {
    (void)state;
    af_rng r;
    af_rng_init(&r, 31337, 2);
    af_gen_opts o = {0, 2e7, 0.0, 0.5, 0.0};
    af_case pool[2];
    af_case_generate_opts(&pool[0], &r, &o);
    af_case_generate_opts(&pool[1], &r, &o);
    for (size_t t = 0; t < scaled(20000); t++) {
        af_case c = pool[t % 2];
        bool dense = !c.serve.forms;
        af_case_mutate(&c, &r, 0);
        if (dense) assert_int_equal(c.serve.forms, 0);
        af_error err = {0};
        if (af_case_validate(&c, 0, &err) != AF_OK) {
            print_case("mutated", &c);
            fail_msg("mutated case invalid: %s", err.msg);
        }
        af_case x;
        af_case_crossover(&pool[0], &c, &x, &r, 0);
        if (af_case_validate(&x, 0, &err) != AF_OK) fail_msg("crossover invalid: %s", err.msg);
        pool[t % 2] = af_rng_chance(&r, 1, 8) ? (af_case_generate_opts(&c, &r, &o), c) : x;
    }
}

/* --- the physical tensors ---------------------------------------------------------------- */

static double at(const af_tensor *t, size_t i0, size_t i1, size_t i2, size_t i3) {
    size_t idx[4] = {i0, i1, i2, i3};
    return af_dtype_load(t->dtype, t->data, af_tensor_offset(t, idx));
}

static int32_t i32_at(const af_tensor *t, size_t i, size_t j) {
    return ((const int32_t *)t->data)[i * (t->ndim > 1 ? t->ne[1] : 1) + j];
}

/* The poison of docs/design.md section 2, worked out from the rule: word 0 of
 * philox(page_seed, "POIS", 0) % 8 is 0..5: NaN, 6: +Inf, 7: -Inf. */
static double want_poison(const af_case *c) {
    uint32_t w[4];
    af_philox_at(c->serve.page_seed, 0x504f4953u, 0, w);
    return w[0] % 8u == 6u ? (double)INFINITY : w[0] % 8u == 7u ? -(double)INFINITY : (double)NAN;
}

static bool same_value(double got, double want) { return got == want || (isnan(got) && isnan(want)); }

/* THD rows, cu_seqlens, the block table and the caches against the canonical views, with
 * the offsets and page ids worked out here. */
static void check_tensors(const af_case *c) {
    af_inputs *in = af_inputs_create();
    af_error err = {0};
    assert_int_equal(af_inputs_generate(in, c, &err), AF_OK);
    const af_case_tensors *t = af_inputs_get(in);
    const af_serving_tensors *s = &t->srv;
    const af_view *views[3] = {&t->qv, &t->kv, &t->vv};
    uint32_t tq = 0, tk = 0;
    for (uint32_t b = 0; b < c->batch; b++) {
        uint32_t nq = (c->serve.forms & AF_SERVE_PACKED) ? c->serve.q_lens[b] : c->q_len;
        uint32_t nk = af_case_has_lens(c) ? c->serve.kv_lens[b] : c->kv_len;
        if (c->serve.forms & AF_SERVE_PACKED) {
            assert_int_equal(i32_at(&s->cu_seqlens_q, b, 0), tq);
            assert_int_equal(i32_at(&s->cu_seqlens_k, b, 0), tk);
            for (uint32_t i = 0; i < nq; i++)
                for (uint32_t h = 0; h < c->q_heads; h++)
                    for (uint32_t d = 0; d < c->head_dim; d++)
                        if (!(at(&s->q, tq + i, h, d, 0) == af_view_get(views[0], b, h, i, d)) &&
                            !(isnan(at(&s->q, tq + i, h, d, 0)) && isnan(af_view_get(views[0], b, h, i, d))))
                            fail_msg("THD q row %u (segment %u query %u) head %u dim %u: %g, the padded view has %g",
                                     tq + i, b, i, h, d, at(&s->q, tq + i, h, d, 0), af_view_get(views[0], b, h, i, d));
        }
        if (af_case_has_lens(c)) assert_int_equal(i32_at(&s->seqlens_k, b, 0), nk);
        for (int w = AF_K; w <= AF_V; w++) {
            const af_tensor *x = w == AF_K ? &s->k : &s->v;
            size_t D = w == AF_K ? c->head_dim : c->v_head_dim;
            for (uint32_t j = 0; j < nk; j++)
                for (uint32_t g = 0; g < c->kv_heads; g++)
                    for (size_t d = 0; d < D; d++) {
                        double want = af_view_get(views[w], b, g, j, d), got;
                        if (c->serve.forms & AF_SERVE_PAGED) {
                            uint32_t ps = c->serve.page_size;
                            int32_t page = i32_at(&s->block_table, b, j / ps);
                            got = at(x, (size_t)page, j % ps, g, d);
                        } else if (c->serve.forms & AF_SERVE_PACKED) {
                            got = at(x, tk + j, g, d, 0);
                        } else {
                            continue;
                        }
                        if (!(got == want || (isnan(got) && isnan(want))))
                            fail_msg("%s row %u key %u head %u dim %zu: %g, the padded view has %g",
                                     w == AF_K ? "K" : "V", b, j, g, d, got, want);
                    }
        }
        tq += nq, tk += nk;
    }
    if (c->serve.forms & AF_SERVE_PACKED) {
        assert_int_equal(i32_at(&s->cu_seqlens_q, c->batch, 0), tq);
        assert_int_equal(s->q.ne[0], tq);
    }
    if (c->serve.forms & AF_SERVE_PAGED) {
        /* each fresh page used once, a shared one by row 0 and its sharers, unused entries
         * and nothing else the null page, which holds 64 / -64 */
        uint32_t P = s->pages, W = (uint32_t)s->block_table.ne[1], ps = c->serve.page_size;
        uint32_t *uses = calloc(P, sizeof *uses);
        for (uint32_t b = 0; b < c->batch; b++) {
            uint32_t np = (c->serve.kv_lens[b] + ps - 1) / ps;
            for (uint32_t p = 0; p < W; p++) {
                int32_t e = i32_at(&s->block_table, b, p);
                assert_true(e >= 0 && (uint32_t)e < P);
                if (p >= np) {
                    assert_int_equal(e, s->null_page);
                    continue;
                }
                assert_int_not_equal(e, s->null_page);
                bool is_shared = b > 0 && p < c->serve.shared_pages && (p + 1) * ps <= c->serve.kv_lens[0] &&
                                 (p + 1) * ps <= c->serve.kv_lens[b];
                if (is_shared) {
                    assert_int_equal(e, i32_at(&s->block_table, 0, p));
                } else {
                    uses[e]++;
                }
            }
        }
        for (uint32_t p = 0; p < P; p++) assert_int_equal(uses[p], p == s->null_page ? 0 : 1);
        free(uses);
        /* the null page and each row's last page past kv_lens[b]: the case's poison, never
         * a finite value */
        double poison = want_poison(c);
        for (uint32_t sl = 0; sl < ps; sl++) {
            assert_true(same_value(at(&s->k, s->null_page, sl, 0, 0), poison));
            assert_true(same_value(at(&s->v, s->null_page, sl, 0, 0), poison));
        }
        for (uint32_t b = 0; b < c->batch; b++) {
            uint32_t n = c->serve.kv_lens[b] < c->kv_len ? c->serve.kv_lens[b] : c->kv_len;
            for (uint32_t j = n; j % ps; j++) {
                int32_t page = i32_at(&s->block_table, b, j / ps);
                assert_true(same_value(at(&s->k, (size_t)page, j % ps, 0, 0), poison));
                assert_true(same_value(at(&s->v, (size_t)page, j % ps, c->kv_heads - 1, 0), poison));
            }
        }
    }
    if (c->serve.forms & AF_SERVE_SINKS)
        for (uint32_t h = 0; h < c->q_heads; h++) {
            double z = (double)af_serving_sink(t, h);
            assert_true(isfinite(z));
            assert_true(af_round_f64(z, c->dtype) == z); /* a value of the case dtype */
        }
    af_inputs_destroy(in);
}

static void test_serving_tensors(void **state) {
    (void)state;
    af_case c;
    base(&c);
    c.q_len = 5, c.kv_len = 11, c.batch = 3;
    c.t[AF_Q].perm = 3, c.t[AF_Q].pad = 2, c.t[AF_K].perm = 5, c.t[AF_V].pad = 1;
    for (int t = 0; t < AF_QKV_COUNT; t++) c.t[t].layout = AF_LAYOUT_BSHD, c.t[t].seed = 40u + (uint32_t)t;
    c.serve.forms = AF_SERVE_PACKED;
    c.serve.q_lens[0] = 5, c.serve.q_lens[1] = 0, c.serve.q_lens[2] = 2;
    c.serve.kv_lens[0] = 11, c.serve.kv_lens[1] = 3, c.serve.kv_lens[2] = 0;
    check_tensors(&c);
    c.serve.forms = AF_SERVE_PAGED | AF_SERVE_SINKS, c.serve.page_size = 4, c.serve.shared_pages = 2,
    c.serve.page_seed = 99;
    c.serve.kv_lens[0] = 9, c.serve.kv_lens[1] = 11, c.serve.kv_lens[2] = 5;
    c.dtype = AF_BF16;
    check_tensors(&c);
    c.serve.forms |= AF_SERVE_PACKED;
    c.serve.page_size = 1;
    check_tensors(&c);
    /* shared pages hold the same keys in every row sharing them */
    af_inputs *in = af_inputs_create();
    af_error err = {0};
    c.serve.page_size = 4;
    assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
    const af_case_tensors *t = af_inputs_get(in);
    for (uint32_t j = 0; j < 8; j++)
        for (uint32_t d = 0; d < c.head_dim; d++)
            assert_true(af_view_get(&t->kv, 1, 0, j, d) == af_view_get(&t->kv, 0, 0, j, d));
    af_inputs_destroy(in);
    /* generated serving cases */
    af_rng r;
    af_rng_init(&r, 4141, 0);
    af_gen_opts o = {32u << 20, 2e6, 0.0, 1.0, 0.0};
    for (size_t k = 0; k < scaled(300); k++) {
        af_case g;
        af_case_generate_opts(&g, &r, &o);
        check_tensors(&g);
    }
}

/* The geometric ALiBi slopes: the paper's sequence for powers of two, the interleave after
 * the largest power of two below Hq otherwise; random ones within their magnitude. */
static void test_serving_slopes(void **state) {
    (void)state;
    af_case c;
    base(&c);
    c.q_heads = c.kv_heads = 8;
    c.serve.forms = AF_SERVE_ALIBI;
    af_inputs *in = af_inputs_create();
    af_error err = {0};
    assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
    const float *sl = af_inputs_get(in)->srv.slopes.data;
    for (int h = 0; h < 8; h++) assert_true(sl[h] == ldexpf(1.0f, -(h + 1)));
    c.q_heads = c.kv_heads = 6; /* m = 4: 2^-2, 2^-4, 2^-6, 2^-8, then 2^-1, 2^-3 */
    assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
    sl = af_inputs_get(in)->srv.slopes.data;
    static const int exps[6] = {-2, -4, -6, -8, -1, -3};
    for (int h = 0; h < 6; h++) assert_true(sl[h] == ldexpf(1.0f, exps[h]));
    c.serve.alibi_random = true, c.serve.alibi_mag_q4 = -4, c.serve.alibi_seed = 5;
    assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
    sl = af_inputs_get(in)->srv.slopes.data;
    for (int h = 0; h < 6; h++) assert_true(sl[h] >= 0.0f && sl[h] < 0.1f);
    af_inputs_destroy(in);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serving_bytes),     cmocka_unit_test(test_serving_repair),
        cmocka_unit_test(test_serving_derived),   cmocka_unit_test(test_serving_json),
        cmocka_unit_test(test_serving_generate),  cmocka_unit_test(test_serving_mutate),
        cmocka_unit_test(test_serving_tensors),   cmocka_unit_test(test_serving_slopes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
