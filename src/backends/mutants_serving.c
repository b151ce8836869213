/* mutants_serving.c - the deviations of the serving-form mutants (mutants.c's table names
 * them): what a buggy kernel reads through a block table or past a segment's end, and
 * what a buggy split-KV combine or varlen kernel writes. Each is the reference computation
 * bent at one place; see docs/mutants.md. */
#include "mutants_serving.h"

#include <math.h>
#include <string.h>

#include "attnfuzz/mem.h"
#include "inputs_serving.h"

/* A float64 [B, H, S, D] buffer as a canonical view. */
static void af_mutant_f64_view(af_view *v, double *buf, size_t B, size_t H, size_t S, size_t D) {
    v->dtype = AF_F64;
    v->data = buf;
    v->ne[0] = B, v->ne[1] = H, v->ne[2] = S, v->ne[3] = D;
    v->nb[3] = sizeof(double);
    v->nb[2] = D * sizeof(double);
    v->nb[1] = S * D * sizeof(double);
    v->nb[0] = H * S * D * sizeof(double);
}

bool af_mutant_block_table_applies(const af_case *c) {
    if (!(c->serve.forms & AF_SERVE_PAGED)) return false;
    for (uint32_t b = 0; b < c->batch; b++)
        if (af_case_pages(c, b) > 1) return true;
    return false;
}

af_status af_mutant_block_table_misread(const af_case_tensors *in, af_scratch *ws, af_view views[3], af_error *err) {
    const af_case *c = in->c;
    const af_serving_tensors *s = &in->srv;
    uint32_t ps = c->serve.page_size, W = (uint32_t)s->block_table.ne[1];
    const int32_t *tab = s->block_table.data;
    for (int w = AF_K; w <= AF_V; w++) {
        const af_view *src = w == AF_K ? &in->kv : &in->vv;
        const af_tensor *cache = w == AF_K ? &s->k : &s->v;
        size_t B = src->ne[0], H = src->ne[1], S = src->ne[2], D = src->ne[3];
        double *buf = AF_SCRATCH(ws, w, double, B * H * S * D, err);
        if (!buf) return AF_ERR_NOMEM;
        for (size_t b = 0; b < B; b++) {
            uint32_t n = af_case_seg_k(c, (uint32_t)b);
            for (size_t h = 0; h < H; h++)
                for (size_t j = 0; j < S; j++) {
                    double *dst = buf + ((b * H + h) * S + j) * D;
                    if (j >= n) { /* a masked key: whatever the padded view holds */
                        for (size_t d = 0; d < D; d++) dst[d] = af_view_get(src, b, h, j, d);
                        continue;
                    }
                    /* the bug: every table entry after a row's first read one page on */
                    size_t page = (size_t)tab[b * W + j / ps];
                    if (j / ps >= 1) page = (page + 1) % s->pages;
                    const unsigned char *row =
                        (const unsigned char *)cache->data + page * cache->nb[0] + (j % ps) * cache->nb[1] + h * cache->nb[2];
                    for (size_t d = 0; d < D; d++) dst[d] = af_dtype_load(cache->dtype, row, d * cache->nb[3]);
                }
        }
        af_mutant_f64_view(&views[w], buf, B, H, S, D);
    }
    return AF_OK;
}

bool af_mutant_segment_leak_applies(const af_case *c) {
    /* the leaked keys follow the segment's own in the key axis: only where no mask or
     * position (causal, window, ALiBi, dropout's indices, tensor masks) would tell them apart */
    if (!(c->serve.forms & AF_SERVE_PACKED) || c->batch < 2 || c->causal || af_case_has_window(c) ||
        (c->serve.forms & AF_SERVE_ALIBI) || c->amask.present || c->bmask.present || c->dropout_p > 0.0)
        return false;
    for (uint32_t b = 0; b + 1 < c->batch; b++)
        if (af_case_seg_q(c, b) && af_case_seg_k(c, b + 1)) return true;
    return false;
}

af_status af_mutant_segment_leak(const af_case_tensors *in, af_case *bent, af_scratch *ws, af_view views[3],
                                 af_error *err) {
    const af_case *c = in->c;
    uint32_t S2 = 2 * c->kv_len;
    for (int w = AF_K; w <= AF_V; w++) {
        const af_view *src = w == AF_K ? &in->kv : &in->vv;
        size_t B = src->ne[0], H = src->ne[1], D = src->ne[3];
        double *buf = AF_SCRATCH(ws, w, double, B * H * S2 * D, err);
        if (!buf) return AF_ERR_NOMEM;
        memset(buf, 0, B * H * S2 * D * sizeof *buf);
        for (uint32_t b = 0; b < B; b++) {
            uint32_t own = af_case_seg_k(c, b), next = b + 1 < B ? af_case_seg_k(c, b + 1) : 0;
            for (size_t h = 0; h < H; h++)
                for (uint32_t j = 0; j < own + next; j++)
                    for (size_t d = 0; d < D; d++)
                        buf[((b * H + h) * S2 + j) * D + d] =
                            j < own ? af_view_get(src, b, h, j, d) : af_view_get(src, b + 1, h, j - own, d);
        }
        af_mutant_f64_view(&views[w], buf, B, H, S2, D);
    }
    /* the bug: segment b's keys end where segment b + 1's do (cu_seqlens_k[b + 2]) */
    bent->kv_len = S2;
    for (uint32_t b = 0; b < c->batch; b++)
        bent->serve.kv_lens[b] = af_case_seg_k(c, b) + (b + 1 < c->batch ? af_case_seg_k(c, b + 1) : 0);
    return AF_OK;
}

/* The keys row b's pages hold, the unused tail of its last page counted, within kv_len. */
static uint32_t af_mutant_page_end(const af_case *c, uint32_t b) {
    uint32_t end = af_case_pages(c, b) * c->serve.page_size;
    return end < c->kv_len ? end : c->kv_len;
}

bool af_mutant_page_tail_applies(const af_case *c) {
    if (!(c->serve.forms & AF_SERVE_PAGED)) return false;
    for (uint32_t b = 0; b < c->batch; b++)
        if (af_mutant_page_end(c, b) > af_case_seg_k(c, b)) return true;
    return false;
}

af_status af_mutant_page_tail_read(const af_case_tensors *in, af_case *bent, af_scratch *ws, af_view views[3],
                                   af_error *err) {
    const af_case *c = in->c;
    for (int w = AF_K; w <= AF_V; w++) {
        const af_view *src = w == AF_K ? &in->kv : &in->vv;
        size_t B = src->ne[0], H = src->ne[1], S = src->ne[2], D = src->ne[3];
        double *buf = AF_SCRATCH(ws, w, double, B * H * S * D, err);
        if (!buf) return AF_ERR_NOMEM;
        for (uint32_t b = 0; b < B; b++) {
            uint32_t n = af_case_seg_k(c, b), end = af_mutant_page_end(c, b);
            for (size_t h = 0; h < H; h++)
                for (uint32_t j = 0; j < S; j++) {
                    double *dst = buf + ((b * H + h) * S + j) * D;
                    if (j < n || j >= end) { /* a live key, or one past the pages: the padded view's */
                        for (size_t d = 0; d < D; d++) dst[d] = af_view_get(src, b, h, j, d);
                        continue;
                    }
                    /* the bug: the last page read to its end, its unused slots taken for keys */
                    const unsigned char *row = af_serving_key_row(in, (af_tensor_id)w, b, (uint32_t)h, j);
                    const af_tensor *cache = w == AF_K ? &in->srv.k : &in->srv.v;
                    for (size_t d = 0; d < D; d++) dst[d] = af_dtype_load(cache->dtype, row, d * cache->nb[3]);
                }
            bent->serve.kv_lens[b] = end > n ? end : n;
        }
        af_mutant_f64_view(&views[w], buf, B, H, S, D);
    }
    return AF_OK;
}

void af_mutant_splitkv_fold(const af_case *c, double *out) {
    if (!af_case_split_kv(c) || c->batch < 2) return;
    size_t row = (size_t)c->q_heads * c->q_len * c->v_head_dim;
    /* the combine's output batch stride is 0: every sequence gets sequence 0's result */
    for (uint32_t b = 1; b < c->batch; b++) memcpy(out + b * row, out, row * sizeof *out);
}

void af_mutant_zero_len_nan(const af_case *c, double *out) {
    if (!af_case_has_lens(c)) return;
    size_t Dv = c->v_head_dim;
    for (uint32_t b = 0; b < c->batch; b++) {
        if (af_case_seg_k(c, b)) continue;
        /* no keys: 0 / 0 in the normalization of every query of the segment */
        for (size_t h = 0; h < c->q_heads; h++)
            for (size_t i = 0; i < af_case_seg_q(c, b); i++)
                for (size_t d = 0; d < Dv; d++) out[((b * c->q_heads + h) * c->q_len + i) * Dv + d] = (double)NAN;
    }
}
