/* mutants.c - seeded-bug backends (docs/design.md section 8). Each is the float64 reference
 * with exactly one documented deviation modelled on a real bug, and each is invisible on
 * cases where that bug cannot show. They measure the fuzzer: how fast it finds each. The
 * forward mutants take forward cases only; the backward ones (bwd_*) compute the forward
 * exactly as ref does and bend one rule of the backward (ref_grad.c, af_grad_bug). */
#include <math.h>
#include <string.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/case_key.h"
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
    AF_MUT_BWD_DQ_NO_SCALE,
    AF_MUT_BWD_GQA_NO_SUM,
    AF_MUT_BWD_DROPOUT_NOT_REAPPLIED,
    AF_MUT_BWD_SOFTCAP_NO_DERIVATIVE,
    AF_MUT_BWD_CAUSAL_MISSING_IN_DS,
    AF_MUT_BWD_TAIL_TILE_PAST_SK,
    AF_MUT_BWD_LSE_NAN,
    /* serving forms (mutants_serving.c) */
    AF_MUT_SPLITKV_BATCH_STRIDE,
    AF_MUT_BLOCK_TABLE_OFF_BY_ONE,
    AF_MUT_ALIBI_OFF_BY_ONE,
    AF_MUT_SINK_IGNORED,
    AF_MUT_SINK_IN_NUMERATOR,
    AF_MUT_ZERO_LEN_NAN,
    AF_MUT_SEGMENT_LEAK,
    AF_MUT_PAGE_TAIL_READ,
    /* FP8 inputs */
    AF_MUT_FP8_DESCALE_TWICE,
    AF_MUT_FP8_E5M2_AS_E4M3,
    /* the checks beyond one output (determinism, batch invariance, guard bands) */
    AF_MUT_RACY_SUM,
    AF_MUT_BATCH_SPLIT_KV,
    AF_MUT_WRITE_PAST_OUT,
    /* softmax statistics */
    AF_MUT_LSE_BASE2,
    AF_MUT_COUNT
} af_mutant_id;

typedef struct af_mutant {
    af_mutant_id id;
    af_scratch ws;
    af_scratch misread; /* slots 0..2: Q, K, V read through the wrong layout */
    uint64_t calls;     /* runs so far */
    /* racy_sum: how often each case (by its seeds) ran, open addressing; which partial
     * finishes first follows it, so two runs of one case differ however other cases' runs
     * fall between them (a batch's second runs come after all its first ones) */
    uint64_t seen_key[256];
    uint32_t seen_runs[256];
    uint32_t seen_n;
} af_mutant;

/* The runs of case c so far, counting this one (racy_sum). */
static uint32_t af_mutant_runs_of(af_mutant *m, const af_case *c) {
    uint64_t key = af_case_key_hash(c, AF_KEY_ALL); /* its structure, then its values' seeds */
    for (int t = 0; t < AF_QKV_COUNT; t++) key = (key ^ (uint64_t)c->t[t].seed) * 0xbf58476d1ce4e5b9ull;
    key |= 1; /* 0 marks an empty entry */
    if (m->seen_n >= 192) { /* three quarters full: forget every case (a campaign moves on) */
        memset(m->seen_key, 0, sizeof m->seen_key);
        m->seen_n = 0;
    }
    size_t i = (size_t)(key >> 56);
    while (m->seen_key[i] && m->seen_key[i] != key) i = (i + 1) % 256;
    if (!m->seen_key[i]) {
        m->seen_key[i] = key;
        m->seen_runs[i] = 0;
        m->seen_n++;
    }
    return ++m->seen_runs[i];
}

/* A split-KV combine in f32: each output element as three partial sums (5x/2, -7x/4 and
 * the rest, as three key ranges of mixed signs would give them) added in f32, starting with
 * partial `first` (0..2). The order changes the last bits and nothing else (a few f32 ulps
 * of 5x/2: well inside every dtype's tolerance). */
static void af_mutant_split_combine(double *out, size_t n, unsigned first) {
    for (size_t e = 0; e < n; e++) {
        double x = out[e];
        if (!isfinite(x)) continue;
        float p[3];
        p[0] = (float)(x * 2.5);
        p[1] = (float)(x * -1.75);
        p[2] = (float)(x - (double)p[0] - (double)p[1]);
        float acc = p[first % 3];
        acc += p[(first + 1) % 3];
        acc += p[(first + 2) % 3];
        out[e] = (double)acc;
    }
}

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
    case AF_MUT_PAGE_TAIL_READ:
        if (af_mutant_page_tail_applies(c)) AF_TRY(af_mutant_page_tail_read(in, &bent, &m->misread, views, err));
        break;
    case AF_MUT_FP8_DESCALE_TWICE:
        /* K's descale folded into the softmax scale and applied again on dequantizing K */
        views[1].descale = in->kv.descale * in->kv.descale;
        break;
    case AF_MUT_FP8_E5M2_AS_E4M3:
        /* the kernel instantiated for e4m3 reads an e5m2 tensor's bits */
        for (int w = 0; w < 3; w++)
            if (views[w].dtype == AF_E5M2) views[w].dtype = AF_E4M3;
        break;
    case AF_MUT_SPLITKV_BATCH_STRIDE:
    case AF_MUT_ZERO_LEN_NAN: /* bent after (below) */
    case AF_MUT_RACY_SUM:
    case AF_MUT_BATCH_SPLIT_KV:
    case AF_MUT_WRITE_PAST_OUT:
    case AF_MUT_BWD_DQ_NO_SCALE:
    case AF_MUT_BWD_GQA_NO_SUM:
    case AF_MUT_BWD_DROPOUT_NOT_REAPPLIED:
    case AF_MUT_BWD_SOFTCAP_NO_DERIVATIVE:
    case AF_MUT_BWD_CAUSAL_MISSING_IN_DS:
    case AF_MUT_BWD_TAIL_TILE_PAST_SK:
    case AF_MUT_BWD_LSE_NAN: /* their forward is ref's */
    case AF_MUT_LSE_BASE2:   /* its output is ref's; its statistics bent (af_mutant_run_lse) */
    case AF_MUT_COUNT: break;
    }
    AF_TRY(af_ref_attention(&bin, &views[0], &views[1], &views[2], &opts, outt->data, NULL, &m->ws, err));
    /* deviations in what the kernel writes */
    if (m->id == AF_MUT_SPLITKV_BATCH_STRIDE) af_mutant_splitkv_fold(c, outt->data);
    if (m->id == AF_MUT_ZERO_LEN_NAN) af_mutant_zero_len_nan(c, outt->data);
    size_t n = (size_t)c->batch * c->q_heads * c->q_len * c->v_head_dim;
    m->calls++;
    /* racy_sum: the partial that finishes first is added first, and which one that is
     * changes from run to run (here: rotates with each run of the same case) */
    if (m->id == AF_MUT_RACY_SUM) af_mutant_split_combine(outt->data, n, af_mutant_runs_of(m, c) % 3);
    /* batch_split_kv: a single sequence gets three KV splits (to fill the GPU), a batch one */
    if (m->id == AF_MUT_BATCH_SPLIT_KV && c->batch == 1) af_mutant_split_combine(outt->data, n, 0);
    /* write_past_out: the last tile's store is not bounded by Sq: with Sq not a multiple of
     * 4 it writes one row past the output (the next buffer's first Dv elements) */
    if (m->id == AF_MUT_WRITE_PAST_OUT && c->q_len % 4 != 0)
        for (size_t d = 0; d < c->v_head_dim; d++) ((double *)outt->data)[n + d] = 0.0;
    return AF_OK;
}

/* The bug a backward mutant brings to case c: AF_GRAD_BUG_NONE where the real bug could not
 * show (docs/mutants.md). */
static af_grad_bug af_mutant_grad_bug(af_mutant_id id, const af_case *c) {
    switch (id) {
    case AF_MUT_BWD_DQ_NO_SCALE: return c->batch >= 2 ? AF_GRAD_BUG_DQ_NO_SCALE : AF_GRAD_BUG_NONE;
    case AF_MUT_BWD_GQA_NO_SUM: return c->q_heads > c->kv_heads ? AF_GRAD_BUG_GQA_NO_SUM : AF_GRAD_BUG_NONE;
    case AF_MUT_BWD_DROPOUT_NOT_REAPPLIED:
        return c->dropout_p > 0.0 ? AF_GRAD_BUG_DROPOUT_NOT_REAPPLIED : AF_GRAD_BUG_NONE;
    case AF_MUT_BWD_SOFTCAP_NO_DERIVATIVE:
        return c->softcap > 0.0 ? AF_GRAD_BUG_SOFTCAP_NO_DERIVATIVE : AF_GRAD_BUG_NONE;
    case AF_MUT_BWD_CAUSAL_MISSING_IN_DS: return c->causal ? AF_GRAD_BUG_CAUSAL_MISSING_IN_DS : AF_GRAD_BUG_NONE;
    case AF_MUT_BWD_TAIL_TILE_PAST_SK: return c->key_padding ? AF_GRAD_BUG_TAIL_TILE_PAST_SK : AF_GRAD_BUG_NONE;
    case AF_MUT_BWD_LSE_NAN: return AF_GRAD_BUG_LSE_NAN;
    case AF_MUT_SCALE_SQRT_Q_ONLY:
    case AF_MUT_PACKED_FP16_OVERFLOW:
    case AF_MUT_SILENT_TF32:
    case AF_MUT_BSHD_AS_BHSD:
    case AF_MUT_MHAV2_CONCAT:
    case AF_MUT_CAUSAL_TOP_LEFT:
    case AF_MUT_SPLITKV_BATCH_STRIDE:
    case AF_MUT_BLOCK_TABLE_OFF_BY_ONE:
    case AF_MUT_ALIBI_OFF_BY_ONE:
    case AF_MUT_SINK_IGNORED:
    case AF_MUT_SINK_IN_NUMERATOR:
    case AF_MUT_ZERO_LEN_NAN:
    case AF_MUT_SEGMENT_LEAK:
    case AF_MUT_PAGE_TAIL_READ:
    case AF_MUT_FP8_DESCALE_TWICE:
    case AF_MUT_FP8_E5M2_AS_E4M3:
    case AF_MUT_RACY_SUM:
    case AF_MUT_BATCH_SPLIT_KV:
    case AF_MUT_WRITE_PAST_OUT:
    case AF_MUT_LSE_BASE2:
    case AF_MUT_COUNT: break;
    }
    return AF_GRAD_BUG_NONE;
}

/* A backward mutant: the forward exactly as ref, the gradients with its bug. */
static af_status af_mutant_run_backward(void *state, const af_case_tensors *in, af_tensor *outt, af_grads *g,
                                        af_error *err) {
    af_mutant *m = state;
    af_ref_opts fwd = {0};
    AF_TRY(af_ref_attention(in, &in->qv, &in->kv, &in->vv, &fwd, outt->data, NULL, &m->ws, err));
    double *grads[AF_GRAD_COUNT];
    for (int k = 0; k < AF_GRAD_COUNT; k++) grads[k] = af_grads_at(g, k)->data;
    af_ref_grad_opts o = {0};
    o.bug = af_mutant_grad_bug(m->id, in->c);
    return af_ref_backward(in, &o, grads, &m->ws, err);
}

static void af_mutant_destroy(void *state) {
    af_mutant *m = state;
    if (!m) return;
    af_scratch_release(&m->ws);
    af_scratch_release(&m->misread);
    af_free(m);
}

#define AF_MUTANT_VT(ID, NAME, SUMMARY, CAPS, BACKWARD, LSE, TRAITS)                               \
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
        .caps = CAPS,                                                                              \
        .layouts = AF_LAYOUTS_ALL,                                                                 \
        .out_dtype = AF_F64,                                                                       \
        .create = af_mutant_create_##NAME,                                                         \
        .destroy = af_mutant_destroy,                                                              \
        .run = af_mutant_run,                                                                      \
        .run_backward = BACKWARD,                                                                  \
        .run_lse = LSE,                                                                             \
        .traits = TRAITS,                                                                          \
    };
/* mutant:lse_base2: the output exactly as ref, the statistics in base 2 (log2 sum exp =
 * lse / ln 2) but declared natural log: a FlashInfer-style base-2 LSE handed on unconverted
 * (what a split-KV merge or a backward consuming it then gets wrong). */
static af_status af_mutant_run_lse(void *state, const af_case_tensors *in, af_tensor *outt, af_tensor *lse,
                                   af_error *err) {
    af_mutant *m = state;
    af_ref_opts opts = {.lse = lse->data};
    AF_TRY(af_ref_attention(in, &in->qv, &in->kv, &in->vv, &opts, outt->data, NULL, &m->ws, err));
    double *l = lse->data;
    for (size_t r = 0; r < lse->ne[0] * lse->ne[1] * lse->ne[2]; r++) l[r] *= 1.0 / M_LN2;
    return AF_OK;
}

/* a forward mutant (forward cases only), a backward one (its forward is ref's) */
#define AF_MUTANT(ID, NAME, SUMMARY) \
    AF_MUTANT_VT(ID, NAME, SUMMARY, AF_CAP_ALL & ~(uint32_t)(AF_CAP_BACKWARD | AF_CAP_LSE), NULL, NULL, 0)
#define AF_MUTANT_BWD(ID, NAME, SUMMARY) \
    AF_MUTANT_VT(ID, NAME, SUMMARY, AF_CAP_ALL & ~(uint32_t)AF_CAP_LSE, af_mutant_run_backward, NULL, 0)

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
AF_MUTANT(AF_MUT_PAGE_TAIL_READ, page_tail_read,
          "ROCm paged attention, vLLM's null block: the last page read to its end, its unused (poisoned) slots taken for keys")
AF_MUTANT(AF_MUT_FP8_DESCALE_TWICE, fp8_descale_twice,
          "FP8 attention: K's descale folded into the softmax scale and applied again when dequantizing K")
AF_MUTANT(AF_MUT_FP8_E5M2_AS_E4M3, fp8_e5m2_as_e4m3,
          "FP8 attention: a kernel built for e4m3 reads e5m2 tensors (an FP8 KV-cache format mix-up)")

AF_MUTANT(AF_MUT_RACY_SUM, racy_sum,
          "split-KV/atomic reductions (FlashAttention test_flash_attn_race_condition): partials added in the order "
          "they finish, so two runs differ in the last bits")
/* it declares batch_invariant, as the serving stacks that promise batch-invariant inference do */
AF_MUTANT_VT(AF_MUT_BATCH_SPLIT_KV, batch_split_kv,
             "batch-variant split heuristics (FlashInfer test_batch_invariant): a sequence alone gets 3 KV splits, in "
             "a batch one, while it declares batch_invariant",
             AF_CAP_ALL & ~(uint32_t)(AF_CAP_BACKWARD | AF_CAP_LSE), NULL, NULL, AF_TRAIT_BATCH_INVARIANT)
AF_MUTANT(AF_MUT_WRITE_PAST_OUT, write_past_out,
          "an unbounded tail-tile store (cuDNN frontend's output guard bands): with Sq % 4 != 0 one row written past "
          "the output")
AF_MUTANT_VT(AF_MUT_LSE_BASE2, lse_base2,
             "FlashInfer return_lse: base-2 statistics (log2 sum exp) handed on as natural log, off by a factor 1/ln 2",
             AF_CAP_ALL & ~(uint32_t)AF_CAP_BACKWARD, NULL, af_mutant_run_lse, 0)

AF_MUTANT_BWD(AF_MUT_BWD_DQ_NO_SCALE, bwd_dq_no_scale,
              "TransformerEngine#3216: with batch >= 2 the dQ kernel leaves the softmax scale out (dQ 1/scale off)")
AF_MUTANT_BWD(AF_MUT_BWD_GQA_NO_SUM, bwd_gqa_no_sum,
              "a broadcast's reduction missed (jax#30593): dK, dV of a key/value head from its last query head only")
AF_MUTANT_BWD(AF_MUT_BWD_DROPOUT_NOT_REAPPLIED, bwd_dropout_not_reapplied,
              "PyTorch PR#102038, #196586: the backward does not apply the forward's dropout mask to P and dP")
AF_MUTANT_BWD(AF_MUT_BWD_SOFTCAP_NO_DERIVATIVE, bwd_softcap_no_derivative,
              "FlashAttention PR#2544: softcap's derivative 1 - tanh^2 missing from dS (dQ, dK and dmask off)")
AF_MUTANT_BWD(AF_MUT_BWD_CAUSAL_MISSING_IN_DS, bwd_causal_missing_in_ds,
              "FlashAttention #443/#1052, triton#5660: P recomputed for dS without the causal mask")
AF_MUTANT_BWD(AF_MUT_BWD_TAIL_TILE_PAST_SK, bwd_tail_tile_past_sk,
              "TransformerEngine#2186: the last key tile of a padded sequence runs past its length (dK, dV there)")
AF_MUTANT_BWD(AF_MUT_BWD_LSE_NAN, bwd_lse_nan,
              "cudnn-frontend#1072: a row whose log-sum-exp is negative gives NaN in every gradient it touches")

const af_backend_vtable *const af_mutant_vtables[] = {
    &af_mutant_vt_scale_sqrt_q_only,         &af_mutant_vt_packed_fp16_overflow,    &af_mutant_vt_silent_tf32,
    &af_mutant_vt_bshd_as_bhsd,              &af_mutant_vt_mhav2_concat,            &af_mutant_vt_causal_top_left,
    &af_mutant_vt_splitkv_batch_stride,      &af_mutant_vt_block_table_off_by_one,  &af_mutant_vt_alibi_off_by_one,
    &af_mutant_vt_sink_ignored,              &af_mutant_vt_sink_in_numerator,       &af_mutant_vt_zero_len_nan,
    &af_mutant_vt_segment_leak,              &af_mutant_vt_page_tail_read,          &af_mutant_vt_fp8_descale_twice,       &af_mutant_vt_fp8_e5m2_as_e4m3,
    &af_mutant_vt_bwd_dq_no_scale,         &af_mutant_vt_bwd_gqa_no_sum,
    &af_mutant_vt_bwd_dropout_not_reapplied, &af_mutant_vt_bwd_softcap_no_derivative,
    &af_mutant_vt_bwd_causal_missing_in_ds,  &af_mutant_vt_bwd_tail_tile_past_sk,   &af_mutant_vt_bwd_lse_nan,
    &af_mutant_vt_racy_sum,                  &af_mutant_vt_batch_split_kv,          &af_mutant_vt_write_past_out,
    &af_mutant_vt_lse_base2,
};
const size_t af_mutant_count = sizeof af_mutant_vtables / sizeof af_mutant_vtables[0];
_Static_assert(sizeof af_mutant_vtables / sizeof af_mutant_vtables[0] == AF_MUT_COUNT, "every mutant registered");
