/* mutants.c - seeded-bug backends (docs/design.md section 8). Each is the float64 reference
 * with exactly one documented deviation modelled on a real bug, and each is invisible on
 * cases where that bug cannot show. They measure the fuzzer: how fast it finds each. */
#include <math.h>
#include <string.h>

#include "attnfuzz/backend.h"
#include "backends.h"
#include "mutants_serving.h"
#include "ref.h"
#include "vmath.h"

typedef enum af_mutant_id {
    AF_MUT_SCALE_SQRT_Q_ONLY,
    AF_MUT_PACKED_FP16_OVERFLOW,
    AF_MUT_SILENT_TF32,
    AF_MUT_BSHD_AS_BHSD,
    AF_MUT_MHAV2_CONCAT,
    AF_MUT_CAUSAL_TOP_LEFT,
    /* serving forms (mutants_serving.c) */
    AF_MUT_SPLITKV_BATCH_STRIDE,
    AF_MUT_BLOCK_TABLE_OFF_BY_ONE,
    AF_MUT_ALIBI_OFF_BY_ONE,
    AF_MUT_SINK_IGNORED,
    AF_MUT_SINK_IN_NUMERATOR,
    AF_MUT_ZERO_LEN_NAN,
    AF_MUT_SEGMENT_LEAK,
    AF_MUT_COUNT
} af_mutant_id;

typedef struct af_mutant {
    af_mutant_id id;
    af_scratch ws;
    af_scratch misread; /* slots 0..2: Q, K, V read through the wrong layout */
} af_mutant;

/* The buffers of q, k and v reinterpreted: element (b, h, s, d) as the buggy code reads it.
 * bshd_as_bhsd: a [B, S, H, D] tensor taken for [B, H, S, D]: flat offset (h*S + s)*D + d
 *   inside the batch row lands on head (h*S + s) % H, position (h*S + s) / H.
 * mhav2_concat: a [B, S, H, 3, D] buffer taken for [B, S, 3, H, D]: part w of head h lands on
 *   head (w*H + h) / 3, part (w*H + h) % 3. */
static af_status af_mutant_misread(af_mutant *m, const af_case_tensors *in, af_view out[3], af_error *err) {
    const af_case *c = in->c;
    const af_view *src[3] = {&in->qv, &in->kv, &in->vv};
    for (int w = 0; w < 3; w++) {
        const af_view *v = src[w];
        size_t B = v->ne[0], H = v->ne[1], S = v->ne[2], D = v->ne[3];
        bool bshd = m->id == AF_MUT_BSHD_AS_BHSD && c->t[w].layout == AF_LAYOUT_BSHD;
        bool mha = m->id == AF_MUT_MHAV2_CONCAT && c->t[AF_Q].layout == AF_LAYOUT_QKV_BSH3D;
        out[w] = *v;
        if (!bshd && !mha) continue;
        double *buf = AF_SCRATCH(&m->misread, w, double, B * H * S * D, err);
        if (!buf) return AF_ERR_NOMEM;
        for (size_t b = 0; b < B; b++)
            for (size_t h = 0; h < H; h++)
                for (size_t s = 0; s < S; s++)
                    for (size_t d = 0; d < D; d++) {
                        double x;
                        if (bshd) {
                            size_t f = h * S + s;
                            x = af_view_get(v, b, f % H, f / H, d);
                        } else {
                            size_t f = (size_t)w * H + h;
                            x = af_view_get(src[f % 3], b, f / 3, s, d);
                        }
                        buf[((b * H + h) * S + s) * D + d] = x;
                    }
        out[w].dtype = AF_F64;
        out[w].data = buf;
        out[w].nb[3] = sizeof(double);
        out[w].nb[2] = D * sizeof(double);
        out[w].nb[1] = S * D * sizeof(double);
        out[w].nb[0] = H * S * D * sizeof(double);
    }
    return AF_OK;
}

static af_status af_mutant_run(void *state, const af_case_tensors *in, af_tensor *outt, af_error *err) {
    af_mutant *m = state;
    const af_case *c = in->c;
    af_case bent = *c; /* the case as the buggy implementation understands it */
    af_case_tensors bin = *in;
    bin.c = &bent;
    af_ref_opts opts = {0};
    af_view views[3] = {in->qv, in->kv, in->vv};
    switch (m->id) {
    case AF_MUT_SCALE_SQRT_Q_ONLY:
        /* sqrt(scale) on Q, the K half of the split dropped: the effective scale is sqrt|scale| */
        if (c->placement == AF_PLACE_SQRT_QK) {
            bent.scale_set = true;
            bent.scale = sqrt(fabs(af_case_scale(c)));
        }
        break;
    case AF_MUT_PACKED_FP16_OVERFLOW:
        opts.qk_f16_before_scale = c->dtype == AF_F16 && c->t[AF_Q].layout == AF_LAYOUT_QKV_CHANNELS_FIRST;
        break;
    case AF_MUT_SILENT_TF32: opts.tf32 = c->dtype == AF_F32 && !c->allow_tf32; break;
    case AF_MUT_BSHD_AS_BHSD:
    case AF_MUT_MHAV2_CONCAT: AF_TRY(af_mutant_misread(m, in, views, err)); break;
    case AF_MUT_CAUSAL_TOP_LEFT:
        if (c->causal && (c->diag == AF_DIAG_BOTTOM_RIGHT || c->diag == AF_DIAG_BOTTOM_RIGHT_VALID))
            bent.diag = AF_DIAG_TOP_LEFT;
        break;
    case AF_MUT_BLOCK_TABLE_OFF_BY_ONE:
        if (af_mutant_block_table_applies(c)) AF_TRY(af_mutant_block_table_misread(in, &m->misread, views, err));
        break;
    case AF_MUT_ALIBI_OFF_BY_ONE: opts.alibi_shift = 1; break;
    case AF_MUT_SINK_IGNORED: opts.sink_mode = 1; break;
    case AF_MUT_SINK_IN_NUMERATOR: opts.sink_mode = 2; break;
    case AF_MUT_SEGMENT_LEAK:
        if (af_mutant_segment_leak_applies(c)) AF_TRY(af_mutant_segment_leak(in, &bent, &m->misread, views, err));
        break;
    case AF_MUT_SPLITKV_BATCH_STRIDE:
    case AF_MUT_ZERO_LEN_NAN:
    case AF_MUT_COUNT: break;
    }
    AF_TRY(af_ref_attention(&bin, &views[0], &views[1], &views[2], &opts, outt->data, NULL, &m->ws, err));
    /* deviations in what the kernel writes */
    if (m->id == AF_MUT_SPLITKV_BATCH_STRIDE) af_mutant_splitkv_fold(c, outt->data);
    if (m->id == AF_MUT_ZERO_LEN_NAN) af_mutant_zero_len_nan(c, outt->data);
    return AF_OK;
}

static void af_mutant_destroy(void *state) {
    af_mutant *m = state;
    if (!m) return;
    af_scratch_release(&m->ws);
    af_scratch_release(&m->misread);
    af_free(m);
}

#define AF_MUTANT(ID, NAME, SUMMARY)                                                               \
    static af_status af_mutant_create_##NAME(const char *args, void **state, af_error *err) {      \
        (void)args;                                                                                \
        af_mutant *m = af_calloc(1, sizeof *m);                                                    \
        AF_RETURN_ERROR_IF(!m, err, AF_ERR_NOMEM, "out of memory");                                \
        m->id = ID;                                                                                \
        *state = m;                                                                                \
        return AF_OK;                                                                              \
    }                                                                                              \
    static const af_backend_vtable af_mutant_vt_##NAME = {                                         \
        .name = "mutant:" #NAME,                                                                   \
        .version = "1",                                                                            \
        .summary = SUMMARY,                                                                        \
        .caps = AF_CAP_ALL,                                                                        \
        .layouts = AF_LAYOUTS_ALL,                                                                 \
        .out_dtype = AF_F64,                                                                       \
        .create = af_mutant_create_##NAME,                                                         \
        .destroy = af_mutant_destroy,                                                              \
        .run = af_mutant_run,                                                                      \
    };

AF_MUTANT(AF_MUT_SCALE_SQRT_Q_ONLY, scale_sqrt_q_only,
          "TensorRT 10.7 SDPA: with a split scale, sqrt(scale) reaches Q but the K half is dropped")
AF_MUTANT(AF_MUT_PACKED_FP16_OVERFLOW, packed_fp16_overflow,
          "TensorRT 10.x UNet: channel-first packed QKV in f16 forms Q.K^T in f16 before scaling (Inf, NaN)")
AF_MUTANT(AF_MUT_SILENT_TF32, silent_tf32, "TensorRT TF32 by default: f32 matmul inputs rounded to TF32 when forbidden")
AF_MUTANT(AF_MUT_BSHD_AS_BHSD, bshd_as_bhsd, "TVM Relax R.nn.attention: BSHD inputs read as BHSD")
AF_MUTANT(AF_MUT_MHAV2_CONCAT, mhav2_concat,
          "TensorRT MHAv2 plugin: per-head interleaved packed QKV read as concatenated")
AF_MUTANT(AF_MUT_CAUSAL_TOP_LEFT, causal_top_left,
          "FlashAttention/PyTorch/ONNX Runtime: top-left causal alignment applied when bottom-right is asked")
AF_MUTANT(AF_MUT_SPLITKV_BATCH_STRIDE, splitkv_batch_stride,
          "vllm flash-attention PR#176: the split-KV combine's batch stride is 0, every sequence gets sequence 0's output")
AF_MUTANT(AF_MUT_BLOCK_TABLE_OFF_BY_ONE, block_table_off_by_one,
          "paged KV (vllm PR#27547 kind): block-table entries after a sequence's first read one page too far")
AF_MUTANT(AF_MUT_ALIBI_OFF_BY_ONE, alibi_off_by_one,
          "vllm PR#945: ALiBi's distance off by one, (d - j + 1): shows with the symmetric form or a sink")
AF_MUTANT(AF_MUT_SINK_IGNORED, sink_ignored, "attention sinks: the sink logit left out of the softmax denominator")
AF_MUTANT(AF_MUT_SINK_IN_NUMERATOR, sink_in_numerator,
          "attention sinks: the sink's weight also reaches the output, as a value row of ones")
AF_MUTANT(AF_MUT_ZERO_LEN_NAN, zero_len_nan,
          "flash-attention PR#2421: a segment without keys gives NaN (0 / 0) instead of 0")
AF_MUTANT(AF_MUT_SEGMENT_LEAK, segment_leak,
          "pytorch#177378: packed segments attend to the next segment's keys (the key range ends at cu_seqlens_k[b + 2])")

const af_backend_vtable *const af_mutant_vtables[] = {
    &af_mutant_vt_scale_sqrt_q_only, &af_mutant_vt_packed_fp16_overflow, &af_mutant_vt_silent_tf32,
    &af_mutant_vt_bshd_as_bhsd,      &af_mutant_vt_mhav2_concat,         &af_mutant_vt_causal_top_left,
    &af_mutant_vt_splitkv_batch_stride, &af_mutant_vt_block_table_off_by_one, &af_mutant_vt_alibi_off_by_one,
    &af_mutant_vt_sink_ignored,      &af_mutant_vt_sink_in_numerator,    &af_mutant_vt_zero_len_nan,
    &af_mutant_vt_segment_leak,
};
const size_t af_mutant_count = sizeof af_mutant_vtables / sizeof af_mutant_vtables[0];
_Static_assert(sizeof af_mutant_vtables / sizeof af_mutant_vtables[0] == AF_MUT_COUNT, "every mutant registered");
