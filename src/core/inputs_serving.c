/* inputs_serving.c - the physical tensors of a case's serving forms (tensor.h,
 * docs/design.md section 2 "Serving forms", docs/worker-protocol.md): THD copies of the
 * padded canonical tensors with their cu_seqlens, the page caches with their block table,
 * the sink logits and the ALiBi slopes. Everything is a pure function of the case and the
 * canonical values, mirrored by python/attnfuzz/serving.py:
 *
 *   poison       the null page and every slot of a row's pages past its kv_lens[b] (the
 *                unused tail of its last page) hold one non-finite value: word 0 of
 *                philox(page_seed, AF_STREAM_POISON, 0) % 8 is 0..5: NaN, 6: +Inf, 7: -Inf.
 *                An honest kernel never reads them (vLLM's null block, ROCm's V padding:
 *                docs/design.md section 2)
 *   block table  the cache's P pages (each row's own, shared ones once, the null page) take
 *                physical ids perm[0..P-1], a Fisher-Yates shuffle of 0..P-1 drawn from
 *                page_seed (step k swaps k with philox(page_seed, AF_STREAM_PAGES, k)[0] %
 *                (k + 1), k = P-1 .. 1); row b's fresh pages take them in order of (b, page),
 *                a shared page row 0's id, the null page the last; unused entries the null id
 *   sinks        z_h = sqrt(-2 ln(1 - u1)) cos(2 pi u2) * 10^(mag / 4), (u1, u2) the 53-bit
 *                uniforms of words (0, 1) and (2, 3) of philox(sink_seed, AF_STREAM_SINKS, h),
 *                rounded to the case dtype
 *   slopes       geometric: 2^(-8 (h + 1) / m) for h < m, then 2^(-4 (2 (h - m) + 1) / m), m the
 *                largest power of two <= Hq (the ALiBi paper's rule for any head count); random:
 *                u * 10^(mag / 4), u of philox(alibi_seed, AF_STREAM_ALIBI, h) words (0, 1);
 *                rounded to f32 */
#include "inputs_serving.h"

#include <math.h>
#include <string.h>

#include "attnfuzz/rng.h"
#include "case_serving.h"
#include "vmath.h"

enum {
    AF_STREAM_PAGES = 0x50414745u,
    AF_STREAM_SINKS = 0x53494e4bu,
    AF_STREAM_ALIBI = 0x414c4942u,
    AF_STREAM_POISON = 0x504f4953u
};

double af_serving_poison(const af_case *c) {
    uint32_t w[4];
    af_philox_at(c->serve.page_seed, AF_STREAM_POISON, 0, w);
    switch (w[0] % 8u) {
    case 6: return (double)INFINITY;
    case 7: return -(double)INFINITY;
    default: return (double)NAN;
    }
}

static size_t af_serving_align(size_t n) { return (n + 63u) & ~(size_t)63u; }

/* Places tensor t (shape and strides set) at *at from base; returns nothing, advances at. */
static void af_serving_put(af_tensor *t, void *base, size_t *at) {
    size_t span = af_tensor_span(t);
    t->data = base ? (unsigned char *)base + *at : NULL;
    *at += af_serving_align(span ? span : 1);
}

static void af_serving_vec(af_tensor *t, af_dtype dt, size_t n0, size_t n1) {
    size_t ne[2] = {n0, n1};
    af_tensor_contiguous(t, dt, n1 ? 2 : 1, ne);
}

size_t af_serving_place(const af_case *c, af_serving_tensors *s, void *base) {
    memset(s, 0, sizeof *s);
    const af_serving_spec *sp = &c->serve;
    if (!sp->forms) return 0;
    size_t at = 0;
    bool packed = sp->forms & AF_SERVE_PACKED, paged = sp->forms & AF_SERVE_PAGED;
    if (packed) {
        af_serving_thd_layout(c, AF_Q, af_serving_total(c, false), &s->q);
        af_serving_put(&s->q, base, &at);
        af_serving_vec(&s->cu_seqlens_q, AF_I32, c->batch + 1u, 0);
        af_serving_put(&s->cu_seqlens_q, base, &at);
        af_serving_vec(&s->cu_seqlens_k, AF_I32, c->batch + 1u, 0);
        af_serving_put(&s->cu_seqlens_k, base, &at);
    }
    if (packed || paged) {
        af_serving_vec(&s->seqlens_k, AF_I32, c->batch, 0);
        af_serving_put(&s->seqlens_k, base, &at);
    }
    if (paged) {
        uint32_t widest;
        s->pages = af_serving_page_count(c, &widest);
        for (int w = AF_K; w <= AF_V; w++) {
            af_tensor *t = w == AF_K ? &s->k : &s->v;
            af_serving_cache_layout(c, (af_tensor_id)w, s->pages, t);
            af_serving_put(t, base, &at);
        }
        af_serving_vec(&s->block_table, AF_I32, c->batch, widest);
        af_serving_put(&s->block_table, base, &at);
        af_serving_vec(&s->page_ids, AF_I32, s->pages, 0);
        af_serving_put(&s->page_ids, base, &at);
    } else if (packed) {
        for (int w = AF_K; w <= AF_V; w++) {
            af_tensor *t = w == AF_K ? &s->k : &s->v;
            af_serving_thd_layout(c, (af_tensor_id)w, af_serving_total(c, true), t);
            af_serving_put(t, base, &at);
        }
    }
    if (sp->forms & AF_SERVE_SINKS) {
        af_serving_vec(&s->sinks, AF_F32, c->q_heads, 0);
        af_serving_put(&s->sinks, base, &at);
    }
    if (sp->forms & AF_SERVE_ALIBI) {
        af_serving_vec(&s->slopes, AF_F32, c->q_heads, 0);
        af_serving_put(&s->slopes, base, &at);
    }
    s->base = base;
    s->bytes = at;
    return at;
}

/* --- the tables ----------------------------------------------------------------------- */

static int32_t *af_i32(const af_tensor *t) { return (int32_t *)t->data; }

static void af_serving_tables(const af_case *c, af_serving_tensors *s) {
    const af_serving_spec *sp = &c->serve;
    if (sp->forms & AF_SERVE_PACKED) {
        int32_t *cq = af_i32(&s->cu_seqlens_q), *ck = af_i32(&s->cu_seqlens_k);
        cq[0] = ck[0] = 0;
        for (uint32_t b = 0; b < c->batch; b++) {
            cq[b + 1] = cq[b] + (int32_t)af_case_seg_q(c, b);
            ck[b + 1] = ck[b] + (int32_t)af_case_seg_k(c, b);
        }
    }
    if (af_case_has_lens(c))
        for (uint32_t b = 0; b < c->batch; b++) af_i32(&s->seqlens_k)[b] = (int32_t)af_case_seg_k(c, b);
    if (!(sp->forms & AF_SERVE_PAGED)) return;
    /* physical ids: a Fisher-Yates shuffle of 0..P-1 from the top */
    uint32_t P = s->pages, W = (uint32_t)s->block_table.ne[1];
    int32_t *ids = af_i32(&s->page_ids);
    for (uint32_t k = 0; k < P; k++) ids[k] = (int32_t)k;
    for (uint32_t k = P - 1; k >= 1; k--) {
        uint32_t w[4];
        af_philox_at(sp->page_seed, AF_STREAM_PAGES, k, w);
        uint32_t j = w[0] % (k + 1u);
        int32_t x = ids[k];
        ids[k] = ids[j];
        ids[j] = x;
    }
    s->null_page = (uint32_t)ids[P - 1];
    int32_t *tab = af_i32(&s->block_table);
    uint32_t fresh = 0;
    for (uint32_t b = 0; b < c->batch; b++) {
        uint32_t n = af_case_pages(c, b), shared = af_serving_shared(c, b);
        for (uint32_t p = 0; p < W; p++) {
            int32_t *e = tab + (size_t)b * W + p;
            if (p >= n) {
                *e = (int32_t)s->null_page;
            } else if (p < shared) {
                *e = tab[p]; /* row 0's page */
            } else {
                *e = ids[fresh++];
            }
        }
    }
    AF_ASSERT(fresh == P - 1);
}

static void af_serving_heads(const af_case *c, af_serving_tensors *s) {
    const af_serving_spec *sp = &c->serve;
    uint32_t H = c->q_heads;
    if (sp->forms & AF_SERVE_SINKS) {
        double mag = pow(10.0, sp->sink_mag_q4 / 4.0);
        for (uint32_t h = 0; h < H; h++) {
            uint32_t w[4];
            af_philox_at(sp->sink_seed, AF_STREAM_SINKS, h, w);
            double u1 = af_u53(w[0], w[1]), u2 = af_u53(w[2], w[3]);
            double z = sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2) * mag;
            ((float *)s->sinks.data)[h] = (float)af_round_f64(z, c->dtype);
        }
    }
    if (sp->forms & AF_SERVE_ALIBI) {
        uint32_t m = 1;
        while (m * 2 <= H) m *= 2;
        double mag = pow(10.0, sp->alibi_mag_q4 / 4.0);
        for (uint32_t h = 0; h < H; h++) {
            double slope;
            if (sp->alibi_random) {
                uint32_t w[4];
                af_philox_at(sp->alibi_seed, AF_STREAM_ALIBI, h, w);
                slope = af_u53(w[0], w[1]) * mag;
            } else if (h < m) {
                slope = pow(2.0, -8.0 * (double)(h + 1) / (double)m);
            } else {
                slope = pow(2.0, -4.0 * (double)(2 * (h - m) + 1) / (double)m);
            }
            ((float *)s->slopes.data)[h] = (float)slope;
        }
    }
}

/* --- the physical K, V and Q ---------------------------------------------------------- */

/* Copies D elements (one dtype, which sizes them) from a canonical row to a physical one. */
static void af_serving_copy_row(unsigned char *dst, size_t dst_step, const af_view *v, size_t b, size_t h, size_t s) {
    size_t es = af_dtype_size(v->dtype);
    const unsigned char *src = (const unsigned char *)v->data + af_view_offset(v, b, h, s, 0);
    for (size_t d = 0; d < v->ne[3]; d++) memcpy(dst + d * dst_step, src + d * v->nb[3], es);
}

static void af_serving_fill_row(unsigned char *dst, size_t dst_step, size_t D, af_dtype dt, double x) {
    for (size_t d = 0; d < D; d++) af_dtype_store(dt, dst, d * dst_step, x);
}

const void *af_serving_key_row(const af_case_tensors *t, af_tensor_id which, uint32_t b, uint32_t g, uint32_t j) {
    const af_case *c = t->c;
    const af_tensor *x = which == AF_K ? &t->srv.k : &t->srv.v;
    const unsigned char *base = x->data;
    if (c->serve.forms & AF_SERVE_PAGED) {
        uint32_t ps = c->serve.page_size, W = (uint32_t)t->srv.block_table.ne[1];
        size_t page = (size_t)af_i32(&t->srv.block_table)[(size_t)b * W + j / ps];
        return base + page * x->nb[0] + (size_t)(j % ps) * x->nb[1] + (size_t)g * x->nb[2];
    }
    size_t tok = (size_t)af_i32(&t->srv.cu_seqlens_k)[b] + j;
    return base + tok * x->nb[0] + (size_t)g * x->nb[1];
}

const void *af_serving_query_row(const af_case_tensors *t, uint32_t b, uint32_t h, uint32_t i) {
    const af_tensor *x = &t->srv.q;
    size_t tok = (size_t)af_i32(&t->srv.cu_seqlens_q)[b] + i;
    return (const unsigned char *)x->data + tok * x->nb[0] + (size_t)h * x->nb[1];
}

static void af_serving_fill_thd(const af_case_tensors *t, af_tensor_id which) {
    const af_case *c = t->c;
    const af_view *v = which == AF_Q ? &t->qv : which == AF_K ? &t->kv : &t->vv;
    const af_tensor *x = which == AF_Q ? &t->srv.q : which == AF_K ? &t->srv.k : &t->srv.v;
    for (uint32_t b = 0; b < c->batch; b++) {
        uint32_t n = which == AF_Q ? af_case_seg_q(c, b) : af_case_seg_k(c, b);
        for (uint32_t h = 0; h < v->ne[1]; h++)
            for (uint32_t i = 0; i < n; i++) {
                const void *row = which == AF_Q ? af_serving_query_row(t, b, h, i) : af_serving_key_row(t, which, b, h, i);
                af_serving_copy_row((unsigned char *)(uintptr_t)row, x->nb[2], v, b, h, i);
            }
    }
}

static void af_serving_fill_cache(const af_case_tensors *t, af_tensor_id which) {
    const af_case *c = t->c;
    const af_view *v = which == AF_K ? &t->kv : &t->vv;
    const af_tensor *x = which == AF_K ? &t->srv.k : &t->srv.v;
    uint32_t ps = c->serve.page_size, Hkv = c->kv_heads;
    size_t D = x->ne[3];
    unsigned char *base = x->data;
    double poison = af_serving_poison(c);
    for (uint32_t g = 0; g < Hkv; g++)
        for (uint32_t s = 0; s < ps; s++)
            af_serving_fill_row(base + (size_t)t->srv.null_page * x->nb[0] + (size_t)s * x->nb[1] + (size_t)g * x->nb[2],
                                x->nb[3], D, x->dtype, poison);
    for (uint32_t b = 0; b < c->batch; b++) {
        uint32_t slots = af_case_pages(c, b) * ps, n = af_case_seg_k(c, b);
        for (uint32_t g = 0; g < Hkv; g++)
            for (uint32_t j = 0; j < slots; j++) {
                unsigned char *row = (unsigned char *)(uintptr_t)af_serving_key_row(t, which, b, g, j);
                if (j < n) {
                    af_serving_copy_row(row, x->nb[3], v, b, g, j);
                } else { /* the last page's unused tail */
                    af_serving_fill_row(row, x->nb[3], D, x->dtype, poison);
                }
            }
    }
}

void af_serving_share(af_case_tensors *t) {
    const af_case *c = t->c;
    if (!(c->serve.forms & AF_SERVE_PAGED)) return;
    const af_view *views[2] = {&t->kv, &t->vv};
    /* the last page's unused slots hold the poison in the padded views too: a kernel that
     * reads them reads a masked key's non-finite value (the oracle's masked_value_leak) */
    double poison = af_serving_poison(c);
    for (uint32_t b = 0; b < c->batch; b++) {
        uint32_t end = af_case_pages(c, b) * c->serve.page_size;
        if (end > c->kv_len) end = c->kv_len;
        for (int w = 0; w < 2; w++)
            for (uint32_t g = 0; g < c->kv_heads; g++)
                for (uint32_t j = af_case_seg_k(c, b); j < end; j++)
                    for (size_t d = 0; d < views[w]->ne[3]; d++)
                        af_dtype_store(views[w]->dtype, (unsigned char *)(uintptr_t)views[w]->data,
                                       af_view_offset(views[w], b, g, j, d), poison);
    }
    for (uint32_t b = 1; b < c->batch; b++) {
        uint32_t n = af_serving_shared(c, b) * c->serve.page_size;
        for (int w = 0; w < 2; w++)
            for (uint32_t g = 0; g < c->kv_heads; g++)
                for (uint32_t j = 0; j < n; j++)
                    for (size_t d = 0; d < views[w]->ne[3]; d++) {
                        const unsigned char *src = (const unsigned char *)views[w]->data +
                                                   af_view_offset(views[w], 0, g, j, d);
                        unsigned char *dst = (unsigned char *)(uintptr_t)views[w]->data +
                                             af_view_offset(views[w], b, g, j, d);
                        memmove(dst, src, af_dtype_size(views[w]->dtype));
                    }
    }
}

void af_serving_fill(af_case_tensors *t) {
    const af_case *c = t->c;
    if (!c->serve.forms) return;
    af_serving_tables(c, &t->srv);
    af_serving_heads(c, &t->srv);
    if (c->serve.forms & AF_SERVE_PACKED) af_serving_fill_thd(t, AF_Q);
    for (int w = AF_K; w <= AF_V; w++) {
        if (c->serve.forms & AF_SERVE_PAGED) {
            af_serving_fill_cache(t, (af_tensor_id)w);
        } else if (c->serve.forms & AF_SERVE_PACKED) {
            af_serving_fill_thd(t, (af_tensor_id)w);
        }
    }
}

void af_serving_gather_f32(const af_case_tensors *t, af_tensor_id which, uint32_t b, uint32_t h, float *dst,
                           size_t ld) {
    const af_case *c = t->c;
    const af_view *v = which == AF_Q ? &t->qv : which == AF_K ? &t->kv : &t->vv;
    const af_tensor *x = which == AF_Q ? &t->srv.q : which == AF_K ? &t->srv.k : &t->srv.v;
    bool physical = which == AF_Q ? (c->serve.forms & AF_SERVE_PACKED) != 0 : af_case_has_lens(c);
    if (!physical) {
        af_gather_f32(v, b, h, dst, ld);
        return;
    }
    size_t S = v->ne[2], D = v->ne[3], step = x->nb[x->ndim - 1];
    uint32_t n = which == AF_Q ? af_case_seg_q(c, b) : af_case_seg_k(c, b);
    for (size_t s = 0; s < S; s++) {
        float *o = dst + s * ld;
        if (s >= n) {
            memset(o, 0, D * sizeof *o);
            continue;
        }
        const unsigned char *row = which == AF_Q ? af_serving_query_row(t, b, h, (uint32_t)s)
                                                 : af_serving_key_row(t, which, b, h, (uint32_t)s);
        for (size_t d = 0; d < D; d++) o[d] = (float)af_dtype_load(x->dtype, row, d * step);
    }
}

/* --- per-row semantics ---------------------------------------------------------------- */

float af_serving_sink(const af_case_tensors *t, uint32_t h) { return ((const float *)t->srv.sinks.data)[h]; }

void af_serving_alibi_row(const af_case_tensors *t, uint32_t b, uint32_t h, uint32_t i, uint32_t j0, uint32_t n,
                          int32_t shift, double *bias) {
    const af_case *c = t->c;
    double slope = (double)((const float *)t->srv.slopes.data)[h];
    int64_t d = (int64_t)i + af_case_diag_offset(c, b) + shift;
    for (uint32_t k = 0; k < n; k++) {
        double dist = (double)(d - (int64_t)(j0 + k));
        bias[k] = -slope * (c->serve.alibi_symmetric ? fabs(dist) : dist);
    }
}

void af_serving_alibi_row_f32(const af_case_tensors *t, uint32_t b, uint32_t h, uint32_t i, uint32_t j0, uint32_t n,
                              float *bias) {
    const af_case *c = t->c;
    float slope = ((const float *)t->srv.slopes.data)[h];
    int64_t d = (int64_t)i + af_case_diag_offset(c, b);
    for (uint32_t k = 0; k < n; k++) {
        float dist = (float)(d - (int64_t)(j0 + k));
        bias[k] = -(slope * (c->serve.alibi_symmetric ? fabsf(dist) : dist));
    }
}
