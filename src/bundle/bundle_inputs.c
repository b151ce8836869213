/* bundle_inputs.c - a case's inputs from the q/k/v/mask arrays of a bundle: values rounded
 * once to the case dtype and written into the case's layout; what is missing is generated
 * from the case. An FP8 case's q, k, v arrays hold the stored values: uint8 ('|u1') bits as
 * they are, or floats (another tool's) rounded once to the format, never descaled. */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "attnfuzz/mem.h"
#include "bundle_internal.h"

/* x as the view's dtype would store it: what reading it back must give (an FP8 view's
 * stored value x, dequantized). */
static double af_bundle_as_stored(const af_view *v, double x) {
    uint8_t tmp[8];
    af_dtype_store(v->dtype, tmp, 0, x);
    double y = af_dtype_load(v->dtype, tmp, 0);
    return af_dtype_is_fp8(v->dtype) ? y * (double)v->descale : y;
}

/* Element e of array a into view element (i0..i3): an FP8 view takes stored values (bits
 * from '|u1', else rounded once), any other the value rounded once to its dtype. */
static void af_bundle_put(const af_array *a, size_t e, const af_view *v, size_t i0, size_t i1, size_t i2,
                          size_t i3) {
    if (!af_dtype_is_fp8(v->dtype)) {
        af_view_set(v, i0, i1, i2, i3, af_dtype_load(a->dtype, a->data, e * af_dtype_size(a->dtype)));
        return;
    }
    uint8_t *p = af_view_fp8_at(v, i0, i1, i2, i3);
    if (a->u8)
        *p = ((const uint8_t *)a->data)[e];
    else
        af_dtype_store(v->dtype, p, 0, af_dtype_load(a->dtype, a->data, e * af_dtype_size(a->dtype)));
}

/* Writes array element (i0..i3) (dims of size 1 read at 0) into view element (i0..i3) for
 * every index below ext, rounding once to the view's dtype. With check set, reads every
 * element back instead and reports whether it holds that value: where the case stores a
 * dim once (stride 0), values that differ along it cannot be represented. */
static bool af_bundle_copy_in(const af_array *a, const size_t ashape[4], const af_view *v, const size_t ext[4],
                              bool check) {
    size_t es = af_dtype_size(a->dtype), st[4];
    size_t s = 1;
    for (int d = 3; d >= 0; d--) {
        st[d] = ashape[d] == 1 ? 0 : s;
        s *= ashape[d];
    }
    for (size_t i0 = 0; i0 < ext[0]; i0++)
        for (size_t i1 = 0; i1 < ext[1]; i1++)
            for (size_t i2 = 0; i2 < ext[2]; i2++)
                for (size_t i3 = 0; i3 < ext[3]; i3++) {
                    size_t e = i0 * st[0] + i1 * st[1] + i2 * st[2] + i3 * st[3];
                    if (!check) {
                        af_bundle_put(a, e, v, i0, i1, i2, i3);
                        continue;
                    }
                    double x = af_dtype_load(a->dtype, a->data, e * es);
                    if (a->u8 && af_dtype_is_fp8(v->dtype)) x = af_fp8_to_f64(((const uint8_t *)a->data)[e], v->dtype);
                    double want = af_bundle_as_stored(v, x), got = af_view_get(v, i0, i1, i2, i3);
                    if (!(got == want || (isnan(got) && isnan(want)))) return false;
                }
    return true;
}

static bool af_bundle_view_broadcasts(const af_view *v) {
    for (int d = 0; d < 4; d++)
        if (v->nb[d] == 0 && v->ne[d] > 1) return true;
    return false;
}

/* q, k, v or do: exactly [B, H, S, D]. */
static af_status af_bundle_fill_qkv(const af_bundle *b, const char *name, const af_view *v, af_error *err) {
    af_array a;
    char path[PATH_MAX];
    AF_TRY(af_bundle_load_array(b, name, v->ne, &a, path, sizeof path, err));
    af_status st = AF_OK;
    if (!af_bundle_same_shape(&a, v->ne, 4)) {
        st = af_bundle_shape_error(path, &a, v->ne, 4, err);
    } else {
        af_bundle_copy_in(&a, a.shape, v, v->ne, false);
        if (af_bundle_view_broadcasts(v) && !af_bundle_copy_in(&a, a.shape, v, v->ne, true))
            st = af_error_set(err, AF_ERR_FORMAT, "%s: values differ along a dimension the case broadcasts", path);
    }
    af_array_free(&a);
    return st;
}

/* A mask: up to 4-D, aligned to [B, Hq, Sq, Sk] from the right like numpy broadcasting;
 * each dim is 1 (read at index 0) or the case's extent for that dim (1 where the case's
 * mask broadcasts). */
static af_status af_bundle_fill_mask(const af_bundle *b, const char *name, const af_view *v, const af_mask_spec *m,
                                     bool additive, af_error *err) {
    af_array a;
    char path[PATH_MAX];
    size_t ext[4], ashape[4] = {1, 1, 1, 1};
    for (int d = 0; d < 4; d++) ext[d] = (m->dims & (1u << d)) ? v->ne[d] : 1;
    AF_TRY(af_bundle_load_array(b, name, ext, &a, path, sizeof path, err));
    bool ok = a.ndim <= 4;
    for (int k = 0; ok && k < a.ndim; k++) ashape[4 - a.ndim + k] = a.shape[k];
    for (int d = 0; ok && d < 4; d++) ok = ashape[d] == 1 || ashape[d] == ext[d];
    af_status st = AF_OK;
    if (!ok) {
        st = af_bundle_shape_error(path, &a, ext, 4, err);
    } else if (additive && a.dtype == AF_BOOL) {
        st = af_error_set(err, AF_ERR_FORMAT, "%s: an additive mask must hold floats, not bool", path);
    } else {
        af_bundle_copy_in(&a, ashape, v, ext, false);
    }
    af_array_free(&a);
    return st;
}

af_status af_bundle_load_inputs(const af_bundle *b, af_inputs *in, af_error *err) {
    const af_case *c = &b->c;
    static const char *const qkv[3] = {"q.npy.zst", "k.npy.zst", "v.npy.zst"};
    bool have[3], all = true;
    for (int w = 0; w < 3; w++) all &= have[w] = af_bundle_is_file(b->files, qkv[w]);
    bool have_am = c->amask.present && af_bundle_is_file(b->files, "mask.npy.zst");
    bool have_bm = c->bmask.present && af_bundle_is_file(b->files, "bool_mask.npy.zst");
    bool have_do = c->bwd.grads && af_bundle_is_file(b->files, "do.npy.zst");
    all &= have_am == c->amask.present && have_bm == c->bmask.present && have_do == (c->bwd.grads != 0);
    /* everything given: only lay out the storage; else draw what is missing from the case
     * and overwrite what is given */
    if (all) {
        AF_TRY(af_inputs_alloc(in, c, err));
    } else {
        AF_TRY(af_inputs_generate(in, c, err));
    }
    const af_case_tensors *t = af_inputs_get(in);
    const af_view *views[3] = {&t->qv, &t->kv, &t->vv};
    for (int w = 0; w < 3; w++)
        if (have[w]) AF_TRY(af_bundle_fill_qkv(b, qkv[w], views[w], err));
    if (have_am) AF_TRY(af_bundle_fill_mask(b, "mask.npy.zst", &t->am, &c->amask, true, err));
    if (have_bm) AF_TRY(af_bundle_fill_mask(b, "bool_mask.npy.zst", &t->bm, &c->bmask, false, err));
    if (have_do) AF_TRY(af_bundle_fill_qkv(b, "do.npy.zst", &t->dov, err));
    af_inputs_serving(in); /* a serving case's physical tensors, from the values read */
    return AF_OK;
}

