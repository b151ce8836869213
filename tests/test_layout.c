/* test_layout.c - the physical layouts of docs/design.md section 3 and the strides a tensor
 * spec gives them (perm, pad, stride-0 broadcast), checked against element offsets
 * written out by hand for each layout, and the mask tensors' broadcast storage. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/case.h"
#include "attnfuzz/tensor.h"

typedef struct shape {
    size_t B, Hq, Hkv, Sq, Sk, D, Dv;
} shape;

/* Shapes with distinct primes (a swapped pair of dims cannot go unnoticed), degenerate
 * sizes of 1, and GQA / cross / D != Dv for the unpacked layouts. */
static const shape shapes_all[] = {
    {2, 3, 3, 5, 5, 7, 7}, {1, 1, 1, 1, 1, 1, 1}, {3, 2, 2, 4, 4, 1, 1}, {1, 4, 4, 2, 2, 3, 3}, {2, 1, 1, 3, 3, 5, 5},
};
static const shape shapes_unpacked[] = {
    {2, 6, 3, 5, 4, 7, 2}, {3, 2, 1, 1, 7, 5, 3}, {1, 5, 5, 3, 2, 2, 11},
};

static size_t esize(af_dtype dt) { return dt == AF_F32 ? 4 : 2; }

static void tensor_dims(const shape *sh, int w, size_t *H, size_t *S, size_t *D) {
    *H = w == AF_Q ? sh->Hq : sh->Hkv;
    *S = w == AF_Q ? sh->Sq : sh->Sk;
    *D = w == AF_V ? sh->Dv : sh->D;
}

/* Element offset of canonical (b, h, s, d) of part `part` in a contiguous tensor of
 * layout l, written out per layout (docs/design.md section 3). */
static size_t hand_offset(af_layout l, size_t B, size_t H, size_t S, size_t D, size_t part, size_t b, size_t h,
                          size_t s, size_t d) {
    switch (l) {
    case AF_LAYOUT_BHSD: return ((b * H + h) * S + s) * D + d;
    case AF_LAYOUT_BSHD: return ((b * S + s) * H + h) * D + d;
    case AF_LAYOUT_SBHD: return ((s * B + b) * H + h) * D + d;
    case AF_LAYOUT_BSD: return (b * S + s) * (H * D) + h * D + d;
    case AF_LAYOUT_CHANNELS_FIRST: return (b * (H * D) + h * D + d) * S + s;
    case AF_LAYOUT_QKV_BS3HD: return ((b * S + s) * 3 + part) * H * D + h * D + d;
    case AF_LAYOUT_QKV_BSH3D: return (((b * S + s) * H + h) * 3 + part) * D + d;
    case AF_LAYOUT_QKV_CHANNELS_FIRST: return (b * 3 * H * D + part * H * D + h * D + d) * S + s;
    case AF_LAYOUT_COUNT: break;
    }
    return 0;
}

/* Physical index and extents of (b, h, s, d) in layout l (outermost first); returns ndim. */
static int hand_phys(af_layout l, size_t B, size_t H, size_t S, size_t D, size_t part, size_t b, size_t h, size_t s,
                     size_t d, size_t idx[5], size_t ne[5]) {
#define SET(n, ...)                                                                                \
    do {                                                                                           \
        size_t v_[] = {__VA_ARGS__};                                                               \
        memcpy(idx, v_, sizeof v_);                                                                \
    } while (0)
#define EXT(...)                                                                                   \
    do {                                                                                           \
        size_t v_[] = {__VA_ARGS__};                                                               \
        memcpy(ne, v_, sizeof v_);                                                                 \
    } while (0)
    switch (l) {
    case AF_LAYOUT_BHSD: SET(4, b, h, s, d); EXT(B, H, S, D); return 4;
    case AF_LAYOUT_BSHD: SET(4, b, s, h, d); EXT(B, S, H, D); return 4;
    case AF_LAYOUT_SBHD: SET(4, s, b, h, d); EXT(S, B, H, D); return 4;
    case AF_LAYOUT_BSD: SET(3, b, s, h * D + d); EXT(B, S, H * D); return 3;
    case AF_LAYOUT_CHANNELS_FIRST: SET(3, b, h * D + d, s); EXT(B, H * D, S); return 3;
    case AF_LAYOUT_QKV_BS3HD: SET(5, b, s, part, h, d); EXT(B, S, 3, H, D); return 5;
    case AF_LAYOUT_QKV_BSH3D: SET(5, b, s, h, part, d); EXT(B, S, H, 3, D); return 5;
    case AF_LAYOUT_QKV_CHANNELS_FIRST: SET(3, b, part * H * D + h * D + d, s); EXT(B, 3 * H * D, S); return 3;
    case AF_LAYOUT_COUNT: break;
    }
#undef SET
#undef EXT
    return 0;
}

/* Row-major offset with `pad` extra elements after each innermost row. */
static size_t padded_offset(int nd, const size_t *idx, const size_t *ne, size_t pad) {
    size_t off = 0, stride = 1;
    for (int k = nd - 1; k >= 0; k--) {
        off += idx[k] * stride;
        stride *= ne[k] + (k == nd - 1 ? pad : 0);
    }
    return off;
}

static void make_case(af_case *c, af_layout l, const shape *sh, af_dtype dt) {
    af_case_default(c);
    c->batch = (uint32_t)sh->B, c->q_heads = (uint32_t)sh->Hq, c->kv_heads = (uint32_t)sh->Hkv;
    c->q_len = (uint32_t)sh->Sq, c->kv_len = (uint32_t)sh->Sk;
    c->head_dim = (uint32_t)sh->D, c->v_head_dim = (uint32_t)sh->Dv;
    c->dtype = dt;
    for (int t = 0; t < AF_QKV_COUNT; t++) {
        c->t[t].layout = l;
        c->t[t].seed = 100u + (uint32_t)t;
    }
}

static const af_view *view_of(const af_case_tensors *t, int w) { return w == AF_Q ? &t->qv : w == AF_K ? &t->kv : &t->vv; }
static const af_tensor *tensor_of(const af_case_tensors *t, int w) { return w == AF_Q ? &t->q : w == AF_K ? &t->k : &t->v; }

/* A value unique to (w, b, h, s, d), exact in f32, f16 and bf16: (1 + m/128) 2^e. */
static double unique_value(size_t k) {
    return ldexp(1.0 + (double)(k % 128) / 128.0, (int)(k / 128) - 8) * ((k % 3) ? 1.0 : -1.0);
}

/* --- tests --------------------------------------------------------------------------- */

static void test_layout_shape_and_perm_count(void **state) {
    (void)state;
    size_t ne[AF_MAX_DIMS];
    assert_int_equal(af_layout_shape(AF_LAYOUT_BHSD, 2, 3, 5, 7, ne), 4);
    assert_true(ne[0] == 2 && ne[1] == 3 && ne[2] == 5 && ne[3] == 7);
    assert_int_equal(af_layout_shape(AF_LAYOUT_BSHD, 2, 3, 5, 7, ne), 4);
    assert_true(ne[0] == 2 && ne[1] == 5 && ne[2] == 3 && ne[3] == 7);
    assert_int_equal(af_layout_shape(AF_LAYOUT_SBHD, 2, 3, 5, 7, ne), 4);
    assert_true(ne[0] == 5 && ne[1] == 2 && ne[2] == 3 && ne[3] == 7);
    assert_int_equal(af_layout_shape(AF_LAYOUT_BSD, 2, 3, 5, 7, ne), 3);
    assert_true(ne[0] == 2 && ne[1] == 5 && ne[2] == 21);
    assert_int_equal(af_layout_shape(AF_LAYOUT_CHANNELS_FIRST, 2, 3, 5, 7, ne), 3);
    assert_true(ne[0] == 2 && ne[1] == 21 && ne[2] == 5);
    assert_int_equal(af_layout_shape(AF_LAYOUT_QKV_BS3HD, 2, 3, 5, 7, ne), 5);
    assert_true(ne[0] == 2 && ne[1] == 5 && ne[2] == 3 && ne[3] == 3 && ne[4] == 7);
    assert_int_equal(af_layout_shape(AF_LAYOUT_QKV_BSH3D, 2, 3, 5, 7, ne), 5);
    assert_true(ne[0] == 2 && ne[1] == 5 && ne[2] == 3 && ne[3] == 3 && ne[4] == 7);
    assert_int_equal(af_layout_shape(AF_LAYOUT_QKV_CHANNELS_FIRST, 2, 3, 5, 7, ne), 3);
    assert_true(ne[0] == 2 && ne[1] == 63 && ne[2] == 5);

    assert_int_equal(af_layout_perm_count(AF_LAYOUT_BHSD), 24);
    assert_int_equal(af_layout_perm_count(AF_LAYOUT_BSHD), 24);
    assert_int_equal(af_layout_perm_count(AF_LAYOUT_SBHD), 24);
    assert_int_equal(af_layout_perm_count(AF_LAYOUT_BSD), 6);
    assert_int_equal(af_layout_perm_count(AF_LAYOUT_CHANNELS_FIRST), 6);
    assert_int_equal(af_layout_perm_count(AF_LAYOUT_QKV_BS3HD), 120);
    assert_int_equal(af_layout_perm_count(AF_LAYOUT_QKV_BSH3D), 120);
    assert_int_equal(af_layout_perm_count(AF_LAYOUT_QKV_CHANNELS_FIRST), 6);
}

static void test_tensor_helpers(void **state) {
    (void)state;
    af_tensor t;
    size_t ne[3] = {2, 3, 4};
    af_tensor_contiguous(&t, AF_F32, 3, ne);
    assert_int_equal(t.ndim, 3);
    assert_int_equal(t.nb[0], 48);
    assert_int_equal(t.nb[1], 16);
    assert_int_equal(t.nb[2], 4);
    assert_int_equal(af_tensor_numel(&t), 24);
    assert_int_equal(af_tensor_span(&t), 96);
    size_t idx[3] = {1, 2, 3};
    assert_int_equal(af_tensor_offset(&t, idx), 48 + 32 + 12);
    t.nb[0] = 0; /* broadcast batch: the span covers one batch row */
    assert_int_equal(af_tensor_span(&t), 48);
    t.ne[1] = 0;
    assert_int_equal(af_tensor_span(&t), 0);
    assert_int_equal(af_tensor_numel(&t), 0);
    af_view v = {AF_F16, NULL, {2, 3, 4, 5}, {120, 40, 10, 2}, 1.0f};
    assert_int_equal(af_view_offset(&v, 1, 2, 3, 4), 120 + 80 + 30 + 8);
}

/* Contiguous tensors: the raw buffer at the hand-written offset holds what the canonical
 * view reads, for generated values and for a unique pattern written through the view. */
static void check_contiguous(af_layout l, const shape *sh, af_dtype dt, af_inputs *in) {
    af_case c;
    make_case(&c, l, sh, dt);
    af_error err = {0};
    if (af_case_validate(&c, 0, &err) != AF_OK) fail_msg("test case invalid: %s", err.msg);
    assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
    const af_case_tensors *t = af_inputs_get(in);
    bool packed = l >= AF_LAYOUT_FIRST_PACKED;
    size_t es = esize(dt);
    /* storage size by hand */
    for (int w = 0; w < AF_QKV_COUNT; w++) {
        size_t H, S, D;
        tensor_dims(sh, w, &H, &S, &D);
        size_t want = (packed ? 3 : 1) * sh->B * H * S * D * es;
        if (af_case_input_span(&c, (af_tensor_id)w) != want)
            fail_msg("%s %s: span %zu, expected %zu", af_layout_names[l], af_tensor_names[w],
                     af_case_input_span(&c, (af_tensor_id)w), want);
        const af_tensor *pt = tensor_of(t, w);
        size_t ne[5], pidx[5];
        int nd = hand_phys(l, sh->B, H, S, D, 0, 0, 0, 0, 0, pidx, ne);
        assert_int_equal(pt->ndim, nd);
        for (int k = 0; k < nd; k++) assert_int_equal(pt->ne[k], ne[k]);
        assert_int_equal(pt->dtype, dt);
    }
    if (packed) {
        assert_ptr_equal(t->q.data, t->k.data);
        assert_ptr_equal(t->q.data, t->v.data);
    }
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0: generated values; pass 1: a unique pattern written through the views */
        size_t k = 0;
        if (pass == 1)
            for (int w = 0; w < AF_QKV_COUNT; w++) {
                size_t H, S, D;
                tensor_dims(sh, w, &H, &S, &D);
                for (size_t b = 0; b < sh->B; b++)
                    for (size_t h = 0; h < H; h++)
                        for (size_t s = 0; s < S; s++)
                            for (size_t d = 0; d < D; d++) af_view_set(view_of(t, w), b, h, s, d, unique_value(k++));
            }
        k = 0;
        for (int w = 0; w < AF_QKV_COUNT; w++) {
            size_t H, S, D;
            tensor_dims(sh, w, &H, &S, &D);
            const unsigned char *base = tensor_of(t, w)->data;
            for (size_t b = 0; b < sh->B; b++)
                for (size_t h = 0; h < H; h++)
                    for (size_t s = 0; s < S; s++)
                        for (size_t d = 0; d < D; d++) {
                            size_t off = hand_offset(l, sh->B, H, S, D, (size_t)w, b, h, s, d) * es;
                            double raw = af_dtype_load(dt, base, off);
                            double viewed = af_view_get(view_of(t, w), b, h, s, d);
                            double want = pass ? unique_value(k++) : viewed;
                            if (!(raw == viewed && raw == want) || isnan(raw))
                                fail_msg("%s %s %s (%zu,%zu,%zu,%zu): raw %g at %zu, view %g, want %g",
                                         af_layout_names[l], af_dtype_names[dt], af_tensor_names[w], b, h, s, d, raw,
                                         off, viewed, want);
                        }
        }
    }
}

static void test_contiguous_offsets(void **state) {
    (void)state;
    af_inputs *in = af_inputs_create();
    assert_non_null(in);
    const af_dtype dts[3] = {AF_F32, AF_F16, AF_BF16};
    for (int l = 0; l < AF_LAYOUT_COUNT; l++)
        for (int k = 0; k < 3; k++) {
            for (size_t s = 0; s < sizeof shapes_all / sizeof shapes_all[0]; s++)
                check_contiguous((af_layout)l, &shapes_all[s], dts[k], in);
            if (l < AF_LAYOUT_FIRST_PACKED)
                for (size_t s = 0; s < sizeof shapes_unpacked / sizeof shapes_unpacked[0]; s++)
                    check_contiguous((af_layout)l, &shapes_unpacked[s], dts[k], in);
        }
    af_inputs_destroy(in);
}

/* Any perm / pad: the canonical elements of all three tensors land on distinct slots of
 * their buffers; with pad 0 they fill the buffer exactly (a bijection); slots no element
 * uses are padding and hold NaN; a pattern written through the views reads back. */
static void check_strided(af_layout l, const shape *sh, af_dtype dt, unsigned perm, unsigned pad, af_inputs *in,
                          size_t nb_out[3][AF_MAX_DIMS]) {
    af_case c;
    make_case(&c, l, sh, dt);
    for (int w = 0; w < AF_QKV_COUNT; w++) {
        c.t[w].perm = (uint8_t)((perm + (unsigned)w * 5u) % af_layout_perm_count(l));
        c.t[w].pad = (uint8_t)pad;
    }
    if (l >= AF_LAYOUT_FIRST_PACKED)
        for (int w = 1; w < 3; w++) c.t[w].perm = c.t[AF_Q].perm;
    af_error err = {0};
    if (af_case_validate(&c, 0, &err) != AF_OK) fail_msg("test case invalid: %s", err.msg);
    assert_int_equal(af_inputs_alloc(in, &c, &err), AF_OK);
    const af_case_tensors *t = af_inputs_get(in);
    bool packed = l >= AF_LAYOUT_FIRST_PACKED;
    size_t es = esize(dt);
    int nbuf = packed ? 1 : 3;
    for (int buf = 0; buf < nbuf; buf++) {
        const af_tensor *pt = tensor_of(t, buf);
        const unsigned char *base = pt->data;
        size_t span = af_case_input_span(&c, (af_tensor_id)buf);
        assert_int_equal(span, af_tensor_span(pt));
        if (nb_out) memcpy(nb_out[buf], pt->nb, sizeof pt->nb);
        size_t slots = span / es;
        assert_int_equal(span % es, 0);
        unsigned char *hit = calloc(slots, 1);
        assert_non_null(hit);
        size_t count = 0, k = 0;
        int w0 = packed ? 0 : buf, w1 = packed ? 2 : buf;
        for (int w = w0; w <= w1; w++) {
            size_t H, S, D;
            tensor_dims(sh, w, &H, &S, &D);
            const af_view *v = view_of(t, w);
            size_t vbase = (size_t)((const unsigned char *)v->data - base);
            for (size_t b = 0; b < sh->B; b++)
                for (size_t h = 0; h < H; h++)
                    for (size_t s = 0; s < S; s++)
                        for (size_t d = 0; d < D; d++) {
                            size_t off = vbase + af_view_offset(v, b, h, s, d);
                            if (off % es || off / es >= slots)
                                fail_msg("%s perm %u pad %u: offset %zu outside %zu bytes", af_layout_names[l], perm,
                                         pad, off, span);
                            if (hit[off / es]) fail_msg("%s perm %u pad %u: two elements at byte %zu",
                                                        af_layout_names[l], perm, pad, off);
                            hit[off / es] = 1;
                            count++;
                            af_view_set(v, b, h, s, d, unique_value(k++));
                            if (c.t[packed ? AF_Q : w].perm == 0) {
                                /* memory order = logical order: the hand formula with padded rows */
                                size_t idx[5], ne[5];
                                int nd = hand_phys(l, sh->B, H, S, D, (size_t)w, b, h, s, d, idx, ne);
                                size_t want = padded_offset(nd, idx, ne, pad) * es;
                                if (off != want)
                                    fail_msg("%s pad %u %s (%zu,%zu,%zu,%zu): offset %zu, expected %zu",
                                             af_layout_names[l], pad, af_tensor_names[w], b, h, s, d, off, want);
                            }
                        }
        }
        if (pad == 0 && count != slots)
            fail_msg("%s perm %u: %zu elements in %zu slots (not a bijection)", af_layout_names[l], perm, count, slots);
        /* read back: values where elements are, NaN in the padding */
        k = 0;
        for (int w = w0; w <= w1; w++) {
            size_t H, S, D;
            tensor_dims(sh, w, &H, &S, &D);
            const af_view *v = view_of(t, w);
            for (size_t b = 0; b < sh->B; b++)
                for (size_t h = 0; h < H; h++)
                    for (size_t s = 0; s < S; s++)
                        for (size_t d = 0; d < D; d++) {
                            double want = unique_value(k++);
                            size_t off = (size_t)((const unsigned char *)v->data - base) + af_view_offset(v, b, h, s, d);
                            if (af_dtype_load(dt, base, off) != want || af_view_get(v, b, h, s, d) != want)
                                fail_msg("%s perm %u: read-back mismatch", af_layout_names[l], perm);
                        }
        }
        for (size_t sl = 0; sl < slots; sl++)
            if (!hit[sl] && !isnan(af_dtype_load(dt, base, sl * es)))
                fail_msg("%s perm %u pad %u: padding slot %zu is not NaN", af_layout_names[l], perm, pad, sl);
        free(hit);
    }
}

static void test_perm_pad_bijection(void **state) {
    (void)state;
    af_inputs *in = af_inputs_create();
    /* distinct extents in every physical dim, so distinct memory orders have distinct strides */
    const shape sh4 = {2, 3, 3, 5, 5, 7, 7};
    const shape sh5 = {2, 4, 4, 5, 5, 7, 7}; /* packed 5-D: [2, 5, 3, 4, 7] */
    const shape gqa = {2, 6, 3, 5, 4, 7, 2};
    for (int l = 0; l < AF_LAYOUT_COUNT; l++) {
        unsigned n = af_layout_perm_count((af_layout)l);
        const shape *sh = l == AF_LAYOUT_QKV_BS3HD || l == AF_LAYOUT_QKV_BSH3D ? &sh5 : &sh4;
        size_t (*nbs)[AF_MAX_DIMS] = calloc(n, sizeof *nbs);
        assert_non_null(nbs);
        for (unsigned p = 0; p < n; p++) {
            size_t nb3[3][AF_MAX_DIMS];
            check_strided((af_layout)l, sh, AF_F32, p, 0, in, nb3);
            memcpy(nbs[p], nb3[0], sizeof nbs[p]);
            check_strided((af_layout)l, sh, p % 2 ? AF_F16 : AF_BF16, p, 3, in, NULL);
            if (p % 7 == 0) check_strided((af_layout)l, sh, AF_F32, p, 64, in, NULL);
            if (l < AF_LAYOUT_FIRST_PACKED) check_strided((af_layout)l, &gqa, AF_F16, p, p % 4, in, NULL);
        }
        /* every perm is a different memory order */
        for (unsigned p = 0; p < n; p++)
            for (unsigned q = p + 1; q < n; q++)
                if (!memcmp(nbs[p], nbs[q], sizeof nbs[p]))
                    fail_msg("%s: perms %u and %u give the same strides", af_layout_names[l], p, q);
        free(nbs);
    }
    af_inputs_destroy(in);
}

/* Stride-0 broadcast: every copy along the broadcast dim reads the same element, and the
 * storage shrinks by that dim's extent. */
static void test_broadcast(void **state) {
    (void)state;
    af_inputs *in = af_inputs_create();
    const shape sh = {3, 4, 2, 5, 6, 7, 3};
    const shape shp = {3, 4, 4, 5, 5, 7, 7};
    for (int l = 0; l < AF_LAYOUT_COUNT; l++) {
        bool packed = l >= AF_LAYOUT_FIRST_PACKED;
        bool fold = l == AF_LAYOUT_BSD || l == AF_LAYOUT_CHANNELS_FIRST || l == AF_LAYOUT_QKV_CHANNELS_FIRST;
        for (int bc = AF_BCAST_BATCH; bc <= AF_BCAST_HEADS; bc++) {
            af_case c;
            make_case(&c, (af_layout)l, packed ? &shp : &sh, AF_F32);
            int w = packed ? AF_Q : AF_K;
            c.t[w].bcast = (af_bcast)bc;
            if (packed) c.t[AF_K].bcast = c.t[AF_V].bcast = (af_bcast)bc;
            if (bc == AF_BCAST_HEADS && fold) {
                /* heads are folded into one dim there: no stride can repeat a head */
                assert_int_equal(af_case_validate(&c, 0, NULL), AF_ERR_INVALID);
                af_case_repair(&c, 0);
                assert_int_equal(c.t[w].bcast, AF_BCAST_NONE);
                continue;
            }
            af_error err = {0};
            if (af_case_validate(&c, 0, &err) != AF_OK) fail_msg("invalid: %s", err.msg);
            af_case full = c;
            for (int k = 0; k < 3; k++) full.t[k].bcast = AF_BCAST_NONE;
            size_t extent = bc == AF_BCAST_BATCH ? c.batch : (packed ? c.q_heads : c.kv_heads);
            size_t span_full = af_case_input_span(&full, (af_tensor_id)w);
            size_t span_bc = af_case_input_span(&c, (af_tensor_id)w);
            if (span_bc * extent != span_full)
                fail_msg("%s bcast %s: span %zu, full %zu, extent %zu", af_layout_names[l], af_bcast_names[bc], span_bc,
                         span_full, extent);
            assert_int_equal(af_inputs_generate(in, &c, &err), AF_OK);
            const af_case_tensors *t = af_inputs_get(in);
            int w0 = packed ? 0 : w, w1 = packed ? 2 : w;
            for (int ww = w0; ww <= w1; ww++) {
                const af_view *v = view_of(t, ww);
                assert_int_equal(v->nb[bc == AF_BCAST_BATCH ? 0 : 1], 0);
                for (size_t b = 0; b < v->ne[0]; b++)
                    for (size_t h = 0; h < v->ne[1]; h++)
                        for (size_t s = 0; s < v->ne[2]; s++)
                            for (size_t d = 0; d < v->ne[3]; d++) {
                                double x = af_view_get(v, b, h, s, d);
                                double y = bc == AF_BCAST_BATCH ? af_view_get(v, 0, h, s, d) : af_view_get(v, b, 0, s, d);
                                if (isnan(x)) fail_msg("NaN in a broadcast tensor");
                                if (x != y) fail_msg("%s: broadcast copies differ", af_layout_names[l]);
                            }
            }
            /* the other tensors are untouched */
            if (!packed) {
                assert_true(t->qv.nb[0] != 0 && t->qv.nb[1] != 0);
                assert_int_equal(af_case_input_span(&c, AF_Q), af_case_input_span(&full, AF_Q));
            }
        }
    }
    af_inputs_destroy(in);
}

/* Masks: [B, Hq, Sq, Sk] views over storage of only the full dims, for every broadcast
 * pattern, 2-D or 4-D, compact or expanded (stride 0). */
static void test_mask_layouts(void **state) {
    (void)state;
    af_inputs *in = af_inputs_create();
    const size_t full[4] = {2, 3, 4, 5};
    for (int additive = 0; additive < 2; additive++)
        for (unsigned dims = 0; dims <= AF_MDIM_ALL; dims++)
            for (int rank2 = 0; rank2 < 2; rank2++)
                for (int expanded = 0; expanded < 2; expanded++) {
                    if (rank2 && (dims & (AF_MDIM_B | AF_MDIM_H))) continue;
                    af_case c;
                    shape sh = {2, 3, 3, 4, 5, 2, 2};
                    make_case(&c, AF_LAYOUT_BHSD, &sh, AF_F32);
                    af_mask_spec *m = additive ? &c.amask : &c.bmask;
                    m->present = true;
                    m->dims = (uint8_t)dims;
                    m->rank2 = rank2;
                    m->expanded = expanded;
                    m->dtype = additive ? AF_F16 : AF_BOOL;
                    af_error err = {0};
                    if (af_case_validate(&c, 0, &err) != AF_OK) fail_msg("invalid: %s", err.msg);
                    assert_int_equal(af_inputs_alloc(in, &c, &err), AF_OK);
                    const af_case_tensors *t = af_inputs_get(in);
                    const af_tensor *mt = additive ? &t->amask : &t->bmask;
                    const af_view *mv = additive ? &t->am : &t->bm;
                    size_t stored[4], nstored = 1;
                    for (int d = 0; d < 4; d++) {
                        stored[d] = (dims >> d & 1u) ? full[d] : 1;
                        nstored *= stored[d];
                        assert_int_equal(mv->ne[d], full[d]);
                        if (stored[d] == 1) assert_int_equal(mv->nb[d], 0);
                    }
                    /* the physical tensor: 2-D or 4-D, broadcast dims of extent 1 or stride 0 */
                    assert_int_equal(mt->ndim, rank2 ? 2 : 4);
                    for (int k = 0; k < mt->ndim; k++) {
                        int d = k + (rank2 ? 2 : 0);
                        assert_int_equal(mt->ne[k], expanded ? full[d] : stored[d]);
                        if (stored[d] == 1) assert_int_equal(mt->nb[k], 0);
                    }
                    assert_int_equal(af_tensor_span(mt), nstored * af_dtype_size(m->dtype));
                    /* write through the view a value that depends only on the stored index */
                    for (size_t b = 0; b < full[0]; b++)
                        for (size_t h = 0; h < full[1]; h++)
                            for (size_t i = 0; i < full[2]; i++)
                                for (size_t j = 0; j < full[3]; j++) {
                                    size_t si[4] = {b, h, i, j};
                                    for (int d = 0; d < 4; d++)
                                        if (stored[d] == 1) si[d] = 0;
                                    size_t lin = ((si[0] * stored[1] + si[1]) * stored[2] + si[2]) * stored[3] + si[3];
                                    double val = additive ? (double)lin - 50.0 : (double)((lin * 7) % 3 != 0);
                                    af_view_set(mv, b, h, i, j, val);
                                }
                    /* read every view element back from the raw storage at its row-major
                     * offset over the stored extents */
                    for (size_t b = 0; b < full[0]; b++)
                        for (size_t h = 0; h < full[1]; h++)
                            for (size_t i = 0; i < full[2]; i++)
                                for (size_t j = 0; j < full[3]; j++) {
                                    size_t si[4] = {b, h, i, j};
                                    for (int d = 0; d < 4; d++)
                                        if (stored[d] == 1) si[d] = 0;
                                    size_t lin = ((si[0] * stored[1] + si[1]) * stored[2] + si[2]) * stored[3] + si[3];
                                    double want = additive ? (double)lin - 50.0 : (double)((lin * 7) % 3 != 0);
                                    double raw = af_dtype_load(m->dtype, mt->data, lin * af_dtype_size(m->dtype));
                                    double viewed = af_view_get(mv, b, h, i, j);
                                    if (raw != want || viewed != want)
                                        fail_msg("mask dims 0x%x rank2 %d expanded %d (%zu,%zu,%zu,%zu): raw %g view %g "
                                                 "want %g",
                                                 dims, rank2, expanded, b, h, i, j, raw, viewed, want);
                                }
                }
    af_inputs_destroy(in);
}

/* Generated values are a pure function of the case: the same element in two layouts
 * holds the same value (the layout relation relies on it). */
static void test_values_layout_independent(void **state) {
    (void)state;
    af_inputs *a = af_inputs_create(), *b = af_inputs_create();
    const shape sh = {2, 3, 3, 5, 5, 7, 7};
    af_case ca;
    make_case(&ca, AF_LAYOUT_BHSD, &sh, AF_BF16);
    af_error err = {0};
    assert_int_equal(af_inputs_generate(a, &ca, &err), AF_OK);
    for (int l = 1; l < AF_LAYOUT_FIRST_PACKED; l++)
        for (unsigned perm = 0; perm < 6; perm += 5) {
            af_case cb = ca;
            for (int w = 0; w < 3; w++) {
                cb.t[w].layout = (af_layout)l;
                cb.t[w].perm = (uint8_t)perm;
                cb.t[w].pad = (uint8_t)(w + 1);
            }
            assert_int_equal(af_inputs_generate(b, &cb, &err), AF_OK);
            const af_case_tensors *ta = af_inputs_get(a), *tb = af_inputs_get(b);
            for (int w = 0; w < 3; w++) {
                const af_view *va = view_of(ta, w), *vb = view_of(tb, w);
                for (size_t i0 = 0; i0 < va->ne[0]; i0++)
                    for (size_t i1 = 0; i1 < va->ne[1]; i1++)
                        for (size_t i2 = 0; i2 < va->ne[2]; i2++)
                            for (size_t i3 = 0; i3 < va->ne[3]; i3++)
                                if (af_view_get(va, i0, i1, i2, i3) != af_view_get(vb, i0, i1, i2, i3))
                                    fail_msg("layout %s changes the value of %s", af_layout_names[l], af_tensor_names[w]);
            }
        }
    af_inputs_destroy(a);
    af_inputs_destroy(b);
    af_inputs_destroy(NULL);
}

/* dO of a backward case: stored in the output layout of Q's layout (packed layouts give
 * bshd or channels_first), with its own perm, pad and broadcast; its canonical values do
 * not depend on where it lives, and a stride-0 dimension holds one copy. */
static void test_dout_layouts(void **state) {
    (void)state;
    af_inputs *a = af_inputs_create(), *b = af_inputs_create();
    const shape sh = {2, 3, 3, 5, 5, 7, 7};
    /* by hand: the output layout of each Q layout, and the physical dO shape there */
    static const af_layout out_of[AF_LAYOUT_COUNT] = {AF_LAYOUT_BHSD, AF_LAYOUT_BSHD, AF_LAYOUT_SBHD, AF_LAYOUT_BSD,
                                                      AF_LAYOUT_CHANNELS_FIRST, AF_LAYOUT_BSHD, AF_LAYOUT_BSHD,
                                                      AF_LAYOUT_CHANNELS_FIRST};
    static const size_t phys[AF_LAYOUT_COUNT][4] = {{2, 3, 5, 7}, {2, 5, 3, 7}, {5, 2, 3, 7}, {2, 5, 21, 0},
                                                    {2, 21, 5, 0}, {2, 5, 3, 7}, {2, 5, 3, 7}, {2, 21, 5, 0}};
    af_case ca;
    make_case(&ca, AF_LAYOUT_BHSD, &sh, AF_F16);
    ca.bwd.grads = AF_GRAD_DQ | AF_GRAD_DV;
    ca.bwd.dout.seed = 77;
    ca.bwd.dout.dist = AF_DIST_UNIFORM;
    af_error err = {0};
    assert_int_equal(af_case_validate(&ca, 0, &err), AF_OK);
    assert_int_equal(af_inputs_generate(a, &ca, &err), AF_OK);
    const af_view *va = &af_inputs_get(a)->dov;
    for (int l = 0; l < AF_LAYOUT_COUNT; l++) {
        assert_int_equal(af_out_layout((af_layout)l), out_of[l]);
        for (unsigned perm = 0; perm < 6; perm += 5) {
            af_case cb = ca;
            for (int w = 0; w < 3; w++) cb.t[w].layout = (af_layout)l;
            cb.bwd.dout.layout = out_of[l];
            cb.bwd.dout.perm = (uint8_t)perm;
            cb.bwd.dout.pad = 3;
            assert_int_equal(af_case_validate(&cb, 0, &err), AF_OK);
            assert_int_equal(af_inputs_generate(b, &cb, &err), AF_OK);
            const af_case_tensors *tb = af_inputs_get(b);
            assert_int_equal(tb->dout.ndim, phys[l][3] ? 4 : 3);
            for (int d = 0; d < tb->dout.ndim; d++) assert_int_equal(tb->dout.ne[d], phys[l][d]);
            assert_true(af_tensor_span(&tb->dout) == af_case_dout_span(&cb));
            const af_view *vb = &tb->dov;
            for (size_t i0 = 0; i0 < 2; i0++)
                for (size_t i1 = 0; i1 < 3; i1++)
                    for (size_t i2 = 0; i2 < 5; i2++)
                        for (size_t i3 = 0; i3 < 7; i3++) {
                            double x = af_view_get(va, i0, i1, i2, i3);
                            if (x != af_view_get(vb, i0, i1, i2, i3) || !isfinite(x) || x == 0.0)
                                fail_msg("dO in layout %s perm %u: value moved", af_layout_names[l], perm);
                        }
        }
    }
    /* a stride-0 batch: one copy, the same values in both batch rows, drawn at index 0 */
    af_case cc = ca;
    cc.bwd.dout.bcast = AF_BCAST_BATCH;
    assert_int_equal(af_inputs_generate(b, &cc, &err), AF_OK);
    const af_case_tensors *tc = af_inputs_get(b);
    assert_int_equal(tc->dout.nb[0], 0);
    assert_true(af_case_dout_span(&cc) == (size_t)3 * 5 * 7 * 2);
    for (size_t i1 = 0; i1 < 3; i1++)
        for (size_t i3 = 0; i3 < 7; i3++)
            assert_true(af_view_get(&tc->dov, 1, i1, 4, i3) == af_view_get(va, 0, i1, 4, i3));
    /* a forward-only case has no dO */
    af_case cf = ca;
    cf.bwd.grads = 0;
    af_case_repair(&cf, 0);
    assert_int_equal(af_inputs_generate(b, &cf, &err), AF_OK);
    assert_null(af_inputs_get(b)->dout.data);
    assert_true(af_case_dout_span(&cf) == 0);
    af_inputs_destroy(a);
    af_inputs_destroy(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_shape_and_perm_count),
        cmocka_unit_test(test_tensor_helpers),
        cmocka_unit_test(test_contiguous_offsets),
        cmocka_unit_test(test_perm_pad_bijection),
        cmocka_unit_test(test_broadcast),
        cmocka_unit_test(test_mask_layouts),
        cmocka_unit_test(test_values_layout_independent),
        cmocka_unit_test(test_dout_layouts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
