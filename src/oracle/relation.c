/* relation.c - metamorphic relations over one backend (docs/design.md section 4).
 *
 * Each relation builds a transformed case and its tensors from the source tensors by an
 * index map (values are copied, never redrawn, so both runs see identical numbers), runs
 * the backend on it, and compares the two outputs row by row through the oracle:
 *
 *   layout         same values, another layout, contiguous strides   rows identical
 *   placement      another scale placement                           rows identical
 *   batch_split    batch row b0 alone (B = 1)                        row (0,h,i) = (b0,h,i)
 *   head_perm      whole GQA groups and heads within them permuted   row (b,h',i) = (b,pi(h'),i)
 *   kv_perm        keys and values permuted together                 rows identical
 *   masked_values  fully masked keys get new K values and NaN in V   rows identical
 *
 * Choices (target layout, b0, permutations) are a deterministic function of the case. A
 * serving case's physical tensors are rebuilt from the transformed values (its lengths go
 * with batch_split, its sinks and slopes with head_perm; kv_perm needs no lengths and no
 * ALiBi, whose bias depends on the key's position; masked_values ends page sharing, which
 * would copy a rewritten key of row 0 into a row where it is live).
 *
 * A backward case on a backend that runs backward (af_relation_check_backward): dO is
 * carried like Q (its batch and query heads mapped), the transformed run is a backward
 * run, and each gradient is compared through its own rows: dQ's as the output's, dK's and
 * dV's (b, g, j) by the batch, key/value head and key maps, dmask's (b, h, i) by the batch
 * and head maps and its keys by the key map where the mask has those dims (a mask that
 * broadcasts over the batch sums its gradient over every batch row: batch_split skips it).
 * masked_values: dK and dV of the rewritten keys stay 0 (weight 0 everywhere); NaN in dQ,
 * dK and dmask may come through the planted NaN (0 * NaN in dP, delta): a leak. */
#include "attnfuzz/relation.h"

#include <math.h>
#include <string.h>

#include "attnfuzz/mem.h"
#include "attnfuzz/rng.h"
#include "scratch.h"

const char *const af_relation_names[AF_REL_COUNT] = {"layout",  "placement", "batch_split",
                                                     "head_perm", "kv_perm", "masked_values"};
_Static_assert(sizeof(af_relation_names) / sizeof(af_relation_names[0]) == AF_REL_COUNT, "names");

int af_relation_from_name(const char *name) {
    for (int i = 0; i < AF_REL_COUNT; i++)
        if (strcmp(name, af_relation_names[i]) == 0) return i;
    return -1;
}

enum { WS_OUT, WS_BMAP, WS_HMAP, WS_GMAP, WS_JMAP, WS_ROWMAP, WS_DEAD, WS_LEAK, WS_GRAD0, WS_GMAP0 = WS_GRAD0 + AF_GRAD_COUNT };

struct af_relation_ctx {
    af_inputs *in;
    af_scratch ws;
    af_tensor out;
    af_grads grads; /* the transformed backward run's (data NULL: not run or not asked) */
    uint32_t *bmap, *hmap, *gmap, *jmap, *rowmap; /* new index -> source index */
};

af_relation_ctx *af_relation_ctx_create(void) {
    af_relation_ctx *x = af_calloc(1, sizeof *x);
    if (!x) return NULL;
    x->in = af_inputs_create();
    if (!x->in) {
        af_free(x);
        return NULL;
    }
    return x;
}

void af_relation_ctx_destroy(af_relation_ctx *x) {
    if (!x) return;
    af_inputs_destroy(x->in);
    af_scratch_release(&x->ws);
    af_free(x);
}

const af_case_tensors *af_relation_tensors(const af_relation_ctx *x) { return af_inputs_get(x->in); }

static bool af_dropout_pins_indices(const af_case *c) { return c->dropout_p > 0.0 && c->dropout_p < 1.0; }

bool af_relation_applies(af_relation r, const af_case *c) {
    switch (r) {
    case AF_REL_LAYOUT: return true;
    case AF_REL_PLACEMENT: return true;
    case AF_REL_BATCH_SPLIT: return c->batch > 1 && !af_dropout_pins_indices(c);
    case AF_REL_HEAD_PERM: return c->q_heads > 1 && !af_dropout_pins_indices(c);
    case AF_REL_KV_PERM:
        return c->kv_len > 1 && !c->causal && !c->key_padding && !af_case_has_window(c) &&
               !af_dropout_pins_indices(c) && !af_case_has_lens(c) && !(c->serve.forms & AF_SERVE_ALIBI);
    case AF_REL_MASKED_VALUES:
        return c->causal || c->key_padding || af_case_has_window(c) || c->bmask.present;
    case AF_REL_COUNT: break;
    }
    return false;
}

/* A seed for the relation's choices, from the case's own seeds. */
static uint64_t af_relation_seed(const af_case *c, af_relation r) {
    return ((uint64_t)c->t[AF_Q].seed << 32 | c->t[AF_K].seed) ^ ((uint64_t)r * 0x9e3779b97f4a7c15ull);
}

static void af_shuffle(uint32_t *p, uint32_t n, af_rng *rng) {
    for (uint32_t i = 0; i < n; i++) p[i] = i;
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = af_rng_below(rng, i);
        uint32_t t = p[i - 1];
        p[i - 1] = p[j];
        p[j] = t;
    }
    if (n > 1) {
        /* never the identity: a permutation that moves nothing tests nothing */
        bool ident = true;
        for (uint32_t i = 0; i < n && ident; i++) ident = p[i] == i;
        if (ident) {
            uint32_t t = p[0];
            p[0] = p[1];
            p[1] = t;
        }
    }
}

/* dst(b, h, s, d) = src(bm[b], hm[h], sm[s], d) over dst's canonical shape; NULL maps are
 * identities. A dim of size 1 that broadcasts maps to 0. */
static void af_copy_view(const af_view *dst, const af_view *src, const uint32_t *bm, const uint32_t *hm,
                         const uint32_t *sm) {
    for (size_t b = 0; b < dst->ne[0]; b++)
        for (size_t h = 0; h < dst->ne[1]; h++)
            for (size_t s = 0; s < dst->ne[2]; s++)
                for (size_t d = 0; d < dst->ne[3]; d++) {
                    size_t sb = bm ? bm[b] : b, sh = hm ? hm[h] : h, ss = sm ? sm[s] : s;
                    af_view_set(dst, b, h, s, d, af_view_get(src, sb, sh, ss, d));
                }
}

/* Masks: dst(b, h, i, j) = src(bm[b], hm[h], i, jm[j]) over dst's stored elements only
 * (a broadcast dim of dst is visited at index 0; where src broadcasts too, its stride is
 * 0 and the mapped index does not matter). */
static void af_copy_mask(const af_view *dst, const af_view *src, const uint32_t *bm, const uint32_t *hm,
                         const uint32_t *jm) {
    size_t ne[4];
    for (int k = 0; k < 4; k++) ne[k] = dst->nb[k] ? dst->ne[k] : 1;
    for (size_t b = 0; b < ne[0]; b++)
        for (size_t h = 0; h < ne[1]; h++)
            for (size_t i = 0; i < ne[2]; i++)
                for (size_t j = 0; j < ne[3]; j++) {
                    size_t sb = bm ? bm[b] : b, sh = hm ? hm[h] : h, sj = jm ? jm[j] : j;
                    af_view_set(dst, b, h, i, j, af_view_get(src, sb, sh, i, sj));
                }
}

af_status af_relation_transform(af_relation r, const af_case_tensors *src, af_relation_ctx *x, af_error *err) {
    const af_case *c = src->c;
    AF_RETURN_ERROR_IF(!af_relation_applies(r, c), err, AF_ERR_UNSUPPORTED, "relation %s does not apply to this case",
                       af_relation_names[r]);
    af_case t = *c;
    af_rng rng;
    af_rng_init(&rng, af_relation_seed(c, r), 0x52454c00u);
    x->bmap = x->hmap = x->gmap = x->jmap = x->rowmap = NULL;
    size_t rows = (size_t)c->batch * c->q_heads * c->q_len;

    switch (r) {
    case AF_REL_LAYOUT: {
        /* another layout (packed ones only where the shape allows), plain strides */
        bool packable = c->q_len == c->kv_len && c->q_heads == c->kv_heads && c->head_dim == c->v_head_dim &&
                        !af_case_has_lens(c);
        unsigned n = packable ? AF_LAYOUT_COUNT : AF_LAYOUT_FIRST_PACKED;
        af_layout cur = c->t[AF_Q].layout;
        af_layout next = (af_layout)((cur + 1 + af_rng_below(&rng, n - 1)) % n);
        for (int w = 0; w <= AF_QKV_COUNT; w++) {
            af_tensor_spec *ts = w < AF_QKV_COUNT ? &t.t[w] : &t.bwd.dout;
            ts->layout = w < AF_QKV_COUNT ? next : af_out_layout(next);
            ts->perm = 0;
            ts->pad = 0;
            ts->bcast = AF_BCAST_NONE;
        }
        break;
    }
    case AF_REL_PLACEMENT:
        t.placement = (af_placement)((c->placement + 1 + af_rng_below(&rng, AF_PLACE_COUNT - 1)) % AF_PLACE_COUNT);
        break;
    case AF_REL_BATCH_SPLIT: {
        uint32_t b0 = af_rng_below(&rng, c->batch);
        t.batch = 1;
        memset(t.kv_valid, 0, sizeof t.kv_valid);
        t.kv_valid[0] = c->kv_valid[b0];
        memset(t.serve.q_lens, 0, sizeof t.serve.q_lens);
        memset(t.serve.kv_lens, 0, sizeof t.serve.kv_lens);
        t.serve.q_lens[0] = c->serve.q_lens[b0];
        t.serve.kv_lens[0] = c->serve.kv_lens[b0];
        x->bmap = AF_SCRATCH(&x->ws, WS_BMAP, uint32_t, 1, err);
        if (!x->bmap) return AF_ERR_NOMEM;
        x->bmap[0] = b0;
        rows = (size_t)c->q_heads * c->q_len;
        break;
    }
    case AF_REL_HEAD_PERM: {
        uint32_t group = c->q_heads / c->kv_heads;
        uint32_t *gperm = AF_SCRATCH(&x->ws, WS_GMAP, uint32_t, c->kv_heads, err);
        uint32_t *wperm = AF_SCRATCH(&x->ws, WS_JMAP, uint32_t, group, err);
        x->hmap = AF_SCRATCH(&x->ws, WS_HMAP, uint32_t, c->q_heads, err);
        if (!gperm || !wperm || !x->hmap) return AF_ERR_NOMEM;
        af_shuffle(gperm, c->kv_heads, &rng);
        af_shuffle(wperm, group, &rng);
        for (uint32_t h = 0; h < c->q_heads; h++) x->hmap[h] = gperm[h / group] * group + wperm[h % group];
        x->gmap = gperm;
        break;
    }
    case AF_REL_KV_PERM:
        x->jmap = AF_SCRATCH(&x->ws, WS_JMAP, uint32_t, c->kv_len, err);
        if (!x->jmap) return AF_ERR_NOMEM;
        af_shuffle(x->jmap, c->kv_len, &rng);
        break;
    case AF_REL_MASKED_VALUES:
        /* rows of dead keys are rewritten, so no storage may be shared across batch/heads */
        for (int w = 0; w < AF_QKV_COUNT; w++) t.t[w].bcast = AF_BCAST_NONE;
        t.serve.shared_pages = 0;
        break;
    case AF_REL_COUNT: break;
    }

    AF_TRY(af_inputs_alloc(x->in, &t, err));
    const af_case_tensors *d = af_inputs_get(x->in);
    const uint32_t *sm_q = NULL, *sm_kv = x->jmap;
    af_copy_view(&d->qv, &src->qv, x->bmap, x->hmap, sm_q);
    af_copy_view(&d->kv, &src->kv, x->bmap, x->gmap, sm_kv);
    af_copy_view(&d->vv, &src->vv, x->bmap, x->gmap, sm_kv);
    if (c->bwd.grads) af_copy_view(&d->dov, &src->dov, x->bmap, x->hmap, sm_q);
    if (c->amask.present) af_copy_mask(&d->am, &src->am, x->bmap, x->hmap, x->jmap);
    if (c->bmask.present) af_copy_mask(&d->bm, &src->bm, x->bmap, x->hmap, x->jmap);

    if (r == AF_REL_MASKED_VALUES) {
        size_t n = (size_t)c->batch * c->kv_heads * c->kv_len;
        uint8_t *dead = AF_SCRATCH(&x->ws, WS_DEAD, uint8_t, n, err);
        if (!dead) return AF_ERR_NOMEM;
        af_mask_dead_keys(d, dead);
        size_t ndead = 0;
        for (size_t k = 0; k < n; k++) ndead += dead[k];
        AF_RETURN_ERROR_IF(ndead == 0, err, AF_ERR_UNSUPPORTED, "relation masked_values: no fully masked key");
        for (size_t b = 0; b < c->batch; b++)
            for (size_t g = 0; g < c->kv_heads; g++)
                for (size_t j = 0; j < c->kv_len; j++) {
                    if (!dead[(b * c->kv_heads + g) * c->kv_len + j]) continue;
                    for (size_t e = 0; e < c->head_dim; e++)
                        af_view_set(&d->kv, b, g, j, e, 1e3 * af_rng_normal(&rng));
                    for (size_t e = 0; e < c->v_head_dim; e++) af_view_set(&d->vv, b, g, j, e, (double)NAN);
                }
    }
    af_inputs_serving(x->in);
    if (x->hmap) { /* a head's sink and slope go with it */
        af_case_tensors *m = af_inputs_get_mut(x->in);
        for (int k = 0; k < 2; k++) {
            const af_tensor *from = k ? &src->srv.slopes : &src->srv.sinks;
            if (!from->data) continue;
            float *to = (k ? m->srv.slopes : m->srv.sinks).data;
            for (size_t h = 0; h < c->q_heads; h++) to[h] = ((const float *)from->data)[x->hmap[h]];
        }
    }

    /* rows of the transformed output -> rows of the source output */
    x->rowmap = AF_SCRATCH(&x->ws, WS_ROWMAP, uint32_t, rows, err);
    if (!x->rowmap) return AF_ERR_NOMEM;
    size_t Hq = c->q_heads, Sq = c->q_len;
    for (size_t row = 0; row < rows; row++) {
        size_t b = row / (Hq * Sq), h = row / Sq % Hq, i = row % Sq;
        size_t sb = x->bmap ? x->bmap[b] : b, sh = x->hmap ? x->hmap[h] : h;
        x->rowmap[row] = (uint32_t)((sb * Hq + sh) * Sq + i);
    }
    return AF_OK;
}

/* batch_split's comparison, in two strengths (docs/design.md section 4, "Determinism and
 * batch invariance"): a backend that declares AF_TRAIT_BATCH_INVARIANT must give the row
 * alone bitwise equal to its slice of the batch; any other within the oracle's own
 * tolerance of it (not the twice that other relations allow: both runs compute the same
 * row with the same kernel, only the batch around it differs, so one tolerance bounds an
 * honest difference; the honest built-ins are bitwise equal). g: -1 the output, else
 * gradient g (cols as af_oracle_compare_grad_pair's col_map). A difference in values is
 * batch_variant, not a plain diverge; the waivable classes stay what they are. */
static af_status af_relation_batch_compare(af_backend *be, af_oracle *o, int g, const af_tensor *a, const af_tensor *b,
                                           const uint32_t *rows, const uint32_t *cols, af_result *res, af_error *err) {
    if (af_backend_traits(be) & AF_TRAIT_BATCH_INVARIANT && !cols)
        return af_oracle_compare_bitwise(a, b, rows, AF_KIND_BATCH_VARIANT, res, err);
    if (g < 0)
        AF_TRY(af_oracle_compare_pair_within(o, a, b, rows, NULL, 1.0, res, err));
    else
        AF_TRY(af_oracle_compare_grad_pair_within(o, g, a, b, rows, cols, NULL, 1.0, res, err));
    if (res->kind == AF_KIND_DIVERGE || res->kind == AF_KIND_NAN_MISMATCH || res->kind == AF_KIND_INF_MISMATCH)
        res->kind = AF_KIND_BATCH_VARIANT;
    return AF_OK;
}

af_status af_relation_check(af_relation r, af_backend *be, const af_case_tensors *src, const af_tensor *out_src,
                            af_oracle *o, af_relation_ctx *x, af_result *res, af_error *err) {
    AF_TRY(af_relation_transform(r, src, x, err));
    const af_case_tensors *t = af_inputs_get(x->in);
    af_backend_out_shape(be, t->c, &x->out);
    /* one row of slack past the output: a backend that writes there (the guard bands' finding,
     * which the backend check reports) does not corrupt the heap here */
    size_t bytes = af_tensor_span(&x->out) + x->out.ne[3] * sizeof(double);
    x->out.data = af_scratch_get(&x->ws, WS_OUT, bytes, err);
    if (!x->out.data) return AF_ERR_NOMEM;
    af_error berr;
    if (af_backend_run(be, t, &x->out, &berr) != AF_OK) {
        memset(res, 0, sizeof *res);
        res->kind = AF_KIND_ERROR;
        af_error_set(err, berr.code, "%s", berr.msg);
        return AF_OK;
    }
    if (r == AF_REL_BATCH_SPLIT) return af_relation_batch_compare(be, o, -1, out_src, &x->out, x->rowmap, NULL, res, err);
    if (r != AF_REL_MASKED_VALUES) return af_oracle_compare_pair(o, out_src, &x->out, x->rowmap, res, err);
    /* NaN was planted in V at fully masked keys, which have weight 0 in every row: NaN
     * that appears only in the transformed run came through them (masked_value_leak) */
    size_t n = (size_t)t->c->batch * t->c->q_heads * t->c->q_len * t->c->v_head_dim;
    uint8_t *leak = AF_SCRATCH(&x->ws, WS_LEAK, uint8_t, n, err);
    if (!leak) return AF_ERR_NOMEM;
    memset(leak, 1, n);
    return af_oracle_compare_pair_leak(o, out_src, &x->out, x->rowmap, leak, res, err);
}

const af_tensor *af_relation_output(const af_relation_ctx *x) { return &x->out; }
const uint32_t *af_relation_row_map(const af_relation_ctx *x) { return x->rowmap; }
const af_grads *af_relation_grads(const af_relation_ctx *x) { return &x->grads; }

/* Gradient k's maps from the transformed run's rows (and dmask's keys) to the source's;
 * *rows NULL when the relation changes what the gradient sums (dmask broadcast over the
 * batch under batch_split): not comparable. */
static af_status af_relation_grad_maps(af_relation_ctx *x, const af_case *c, const af_case *tc, int k, uint32_t **rows,
                                       uint32_t **cols, af_error *err) {
    *rows = *cols = NULL;
    if (k == 0) {
        *rows = x->rowmap;
        return AF_OK;
    }
    size_t ne[4], sne[4];
    af_case_grad_shape(tc, k, ne);
    af_case_grad_shape(c, k, sne);
    if (k == 3 && x->bmap && sne[0] != c->batch) return AF_OK;
    size_t n = ne[0] * ne[1] * ne[2];
    uint32_t *m = AF_SCRATCH(&x->ws, WS_GMAP0 + k, uint32_t, n, err);
    if (!m) return AF_ERR_NOMEM;
    const uint32_t *hm = k == 3 ? x->hmap : x->gmap, *sm = k == 3 ? NULL : x->jmap;
    for (size_t r = 0; r < n; r++) {
        size_t b = r / (ne[1] * ne[2]), h = r / ne[2] % ne[1], s = r % ne[2];
        size_t sb = x->bmap && sne[0] > 1 ? x->bmap[b] : b, sh = hm && sne[1] > 1 ? hm[h] : h;
        size_t ss = sm ? sm[s] : s;
        m[r] = (uint32_t)((sb * sne[1] + sh) * sne[2] + ss);
    }
    *rows = m;
    if (k == 3 && x->jmap && sne[3] > 1) *cols = x->jmap;
    return AF_OK;
}

af_status af_relation_check_backward(af_relation r, af_backend *be, const af_case_tensors *src, const af_tensor *out_src,
                                     const af_grads *g_src, af_oracle *o, af_relation_ctx *x,
                                     af_result res[1 + AF_GRAD_COUNT], af_error *err) {
    const af_case *c = src->c;
    memset(res, 0, (1 + AF_GRAD_COUNT) * sizeof *res);
    memset(&x->grads, 0, sizeof x->grads);
    if (!c->bwd.grads || !g_src) return af_relation_check(r, be, src, out_src, o, x, &res[0], err);
    AF_TRY(af_relation_transform(r, src, x, err));
    const af_case_tensors *t = af_inputs_get(x->in);
    af_backend_out_shape(be, t->c, &x->out);
    x->out.data = af_scratch_get(&x->ws, WS_OUT, af_tensor_span(&x->out) + x->out.ne[3] * sizeof(double), err);
    if (!x->out.data) return AF_ERR_NOMEM;
    af_backend_grads_shape(be, t->c, &x->grads);
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        af_tensor *gt = af_grads_at(&x->grads, k);
        if (!gt->ndim) continue;
        gt->data = af_scratch_get(&x->ws, WS_GRAD0 + k, af_tensor_span(gt), err);
        if (!gt->data) return AF_ERR_NOMEM;
    }
    af_error berr;
    if (af_backend_run_backward(be, t, &x->out, &x->grads, &berr) != AF_OK) {
        res[0].kind = AF_KIND_ERROR;
        memset(&x->grads, 0, sizeof x->grads);
        af_error_set(err, berr.code, "%s", berr.msg);
        return AF_OK;
    }
    const bool planted = r == AF_REL_MASKED_VALUES;
    size_t nleak = (size_t)t->c->batch * t->c->q_heads * t->c->q_len * t->c->v_head_dim;
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        size_t ne[4];
        af_case_grad_shape(t->c, k, ne);
        size_t n = ne[0] * ne[1] * ne[2] * ne[3];
        if (c->bwd.grads & (1u << k) && n > nleak) nleak = n;
    }
    uint8_t *leak = NULL;
    if (planted) {
        leak = AF_SCRATCH(&x->ws, WS_LEAK, uint8_t, nleak, err);
        if (!leak) return AF_ERR_NOMEM;
        memset(leak, 1, nleak);
    }
    if (r == AF_REL_BATCH_SPLIT)
        AF_TRY(af_relation_batch_compare(be, o, -1, out_src, &x->out, x->rowmap, NULL, &res[0], err));
    else
        AF_TRY(af_oracle_compare_pair_leak(o, out_src, &x->out, x->rowmap, leak, &res[0], err));
    for (int k = 0; k < AF_GRAD_COUNT; k++) {
        const af_tensor *a = af_grads_get(g_src, k), *b = af_grads_get(&x->grads, k);
        if (!(c->bwd.grads & (1u << k)) || !a->data || !b->data) continue;
        uint32_t *rows, *cols;
        AF_TRY(af_relation_grad_maps(x, c, t->c, k, &rows, &cols, err));
        if (!rows) continue;
        /* dV: 0 * NaN never meets the planted values (Pd is 0 there, dO is untouched) */
        const uint8_t *lk = planted && k != 2 ? leak : NULL;
        if (r == AF_REL_BATCH_SPLIT)
            AF_TRY(af_relation_batch_compare(be, o, k, a, b, rows, cols, &res[1 + k], err));
        else
            AF_TRY(af_oracle_compare_grad_pair(o, k, a, b, rows, cols, lk, &res[1 + k], err));
    }
    return AF_OK;
}
