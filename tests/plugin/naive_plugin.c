/* naive_plugin.c - a small attention implementation behind the plugin ABI, for the tests
 * and as an example: f32, BHSD/BSHD/SBHD with any strides, GQA, causal and key padding,
 * straightforward float64 loops. With the argument "bug=scale" it multiplies the scale by
 * 1.5 (a deliberately wrong build). Only plugin.h is included: a plugin needs nothing else. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/plugin.h"

typedef struct {
    double scale_factor;
} naive_state;

static int naive_init(const char *args, void **state, char *err, size_t err_len) {
    naive_state *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, err_len, "out of memory");
        return 1;
    }
    s->scale_factor = 1.0;
    if (args && strcmp(args, "bug=scale") == 0) {
        s->scale_factor = 1.5;
    } else if (args && *args) {
        snprintf(err, err_len, "unknown argument \"%s\" (known: bug=scale)", args);
        free(s);
        return 1;
    }
    *state = s;
    return 0;
}

static void naive_fini(void *state) { free(state); }

/* Byte offset of canonical element (b, h, s, d) of a BHSD, BSHD or SBHD tensor. */
static int64_t naive_offset(const af_plugin_tensor *t, int64_t b, int64_t h, int64_t s, int64_t d) {
    switch (t->layout) {
    case AF_PLUGIN_LAYOUT_BSHD: return b * t->strides[0] + s * t->strides[1] + h * t->strides[2] + d * t->strides[3];
    case AF_PLUGIN_LAYOUT_SBHD: return s * t->strides[0] + b * t->strides[1] + h * t->strides[2] + d * t->strides[3];
    default: return b * t->strides[0] + h * t->strides[1] + s * t->strides[2] + d * t->strides[3];
    }
}

static double naive_get(const af_plugin_tensor *t, int64_t b, int64_t h, int64_t s, int64_t d) {
    float x;
    memcpy(&x, (const char *)t->data + naive_offset(t, b, h, s, d), sizeof x);
    return (double)x;
}

static int naive_run(void *state, const af_plugin_case *c, const af_plugin_inputs *in, af_plugin_tensor *out,
                     char *err, size_t err_len) {
    naive_state *st = state;
    if (c->dtype != AF_PLUGIN_F32) {
        snprintf(err, err_len, "f32 only");
        return AF_PLUGIN_UNSUPPORTED;
    }
    int64_t group = c->q_heads / c->kv_heads;
    double *w = malloc((size_t)c->kv_len * sizeof *w);
    char *live = malloc((size_t)c->kv_len);
    if (!w || !live) {
        free(w);
        free(live);
        snprintf(err, err_len, "out of memory");
        return AF_PLUGIN_ERROR;
    }
    float *o = out->data;
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t h = 0; h < c->q_heads; h++)
            for (int64_t i = 0; i < c->q_len; i++) {
                /* masked keys are excluded; a NaN score makes the row NaN, a row without a
                 * live finite score gives 0 (docs/design.md section 2) */
                double m = -HUGE_VAL;
                int any_nan = 0;
                for (int64_t j = 0; j < c->kv_len; j++) {
                    int masked = (c->causal && j > i + c->diag_offset[b]) || (c->kv_valid && j >= c->kv_valid[b]);
                    double s = 0.0;
                    for (int64_t d = 0; d < c->head_dim; d++)
                        s += naive_get(&in->q, b, h, i, d) * naive_get(&in->k, b, h / group, j, d);
                    w[j] = masked ? 0.0 : s * c->scale * st->scale_factor;
                    live[j] = !masked;
                    if (!masked && isnan(w[j])) any_nan = 1;
                    if (!masked && w[j] > m) m = w[j];
                }
                double sum = 0.0;
                for (int64_t j = 0; j < c->kv_len; j++) {
                    w[j] = live[j] ? exp(w[j] - m) : 0.0;
                    sum += w[j];
                }
                for (int64_t d = 0; d < c->v_head_dim; d++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < c->kv_len; j++)
                        /* a key of weight 0 (masked, or a score of -inf) contributes
                         * nothing, whatever its value (docs/design.md section 2 rule 5) */
                        if (live[j] && w[j] != 0.0) acc += w[j] * naive_get(&in->v, b, h / group, j, d);
                    double r = any_nan ? (double)NAN : m == -HUGE_VAL ? 0.0 : acc / sum;
                    o[((b * c->q_heads + h) * c->q_len + i) * c->v_head_dim + d] = (float)r;
                }
            }
    free(w);
    free(live);
    return AF_PLUGIN_OK;
}

static const af_plugin naive_table = {
    AF_PLUGIN_ABI_VERSION,
    "naive",
    "1.0",
    AF_PLUGIN_CAP_F32 | AF_PLUGIN_CAP_GQA | AF_PLUGIN_CAP_CROSS | AF_PLUGIN_CAP_DV | AF_PLUGIN_CAP_SCALE |
        AF_PLUGIN_CAP_STRIDED | AF_PLUGIN_CAP_CAUSAL | AF_PLUGIN_CAP_PADDING,
    (1u << AF_PLUGIN_LAYOUT_BHSD) | (1u << AF_PLUGIN_LAYOUT_BSHD) | (1u << AF_PLUGIN_LAYOUT_SBHD),
    naive_init,
    naive_fini,
    naive_run,
};

const af_plugin *attnfuzz_plugin(void);
const af_plugin *attnfuzz_plugin(void) { return &naive_table; }
