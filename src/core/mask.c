/* mask.c - which keys a query may attend to (docs/design.md section 2, step 4).
 *
 * The structural masks share one diagonal d(b, i) = i + offset(b) and together leave a
 * contiguous interval of live keys: key padding (or a serving row's kv_lens[b]) cuts at the
 * valid keys, causal at d, the sliding window at [d - left, d + right]; a packed segment's
 * rows past its q_lens[b] see nothing. The boolean mask then removes single keys. */
#include <string.h>

#include "attnfuzz/rng.h"
#include "attnfuzz/tensor.h"

void af_mask_row_bounds(const af_case *c, uint32_t b, uint32_t i, int64_t *lo, int64_t *hi) {
    if (i >= af_case_seg_q(c, b)) { /* past a packed segment's queries: no such row */
        *lo = 0;
        *hi = -1;
        return;
    }
    int64_t l = 0;
    int64_t h = (int64_t)af_case_valid_keys(c, b) - 1;
    int64_t d = (int64_t)i + af_case_diag_offset(c, b);
    if (c->causal && d < h) h = d;
    if (c->window_left >= 0 && d - c->window_left > l) l = d - c->window_left;
    if (c->window_right >= 0 && d + c->window_right < h) h = d + c->window_right;
    *lo = l;
    *hi = h;
}

static bool af_bmask_live(const af_case_tensors *t, uint32_t b, uint32_t h, uint32_t i, uint32_t j) {
    if (!t->c->bmask.present) return true;
    const unsigned char *p = (const unsigned char *)t->bm.data + af_view_offset(&t->bm, b, h, i, j);
    return *p != 0;
}

bool af_mask_is_set(const af_case_tensors *t, uint32_t b, uint32_t h, uint32_t i, uint32_t j) {
    int64_t lo, hi;
    af_mask_row_bounds(t->c, b, i, &lo, &hi);
    if ((int64_t)j < lo || (int64_t)j > hi) return true;
    return !af_bmask_live(t, b, h, i, j);
}

void af_mask_dead_keys(const af_case_tensors *t, uint8_t *dead) {
    const af_case *c = t->c;
    size_t n = (size_t)c->batch * c->kv_heads * c->kv_len;
    for (size_t k = 0; k < n; k++) dead[k] = 1;
    uint32_t group = c->q_heads / c->kv_heads;
    for (uint32_t b = 0; b < c->batch; b++) {
        for (uint32_t i = 0; i < c->q_len; i++) {
            int64_t lo, hi;
            af_mask_row_bounds(c, b, i, &lo, &hi);
            if (hi < lo) continue;
            for (uint32_t h = 0; h < c->q_heads; h++) {
                uint8_t *row = dead + ((size_t)b * c->kv_heads + h / group) * c->kv_len;
                for (int64_t j = lo; j <= hi; j++)
                    if (af_bmask_live(t, b, h, i, (uint32_t)j)) row[j] = 0;
            }
        }
    }
}

void af_dropout_keep_row(const af_case_tensors *t, uint64_t threshold, uint32_t b, uint32_t h, uint32_t i,
                         uint8_t *keep) {
    const af_case *c = t->c;
    if (!t->dropout_keep) {
        af_dropout_row(c->dropout_seed, threshold, b, h, i, 0, c->kv_len, keep);
        return;
    }
    size_t row = ((size_t)b * c->q_heads + h) * c->q_len + i;
    memcpy(keep, t->dropout_keep + row * c->kv_len, c->kv_len);
}
