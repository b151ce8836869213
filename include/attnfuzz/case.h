/* case.h - one attention case: what a single execution tests (docs/design.md section 2).
 *
 * Canonical view: Q [B, Hq, Sq, D], K [B, Hkv, Sk, D], V [B, Hkv, Sk, Dv], output
 * [B, Hq, Sq, Dv]. Semantics, in this order: GQA head mapping h -> h / (Hq / Hkv);
 * scores s = scale * q.k; softcap s = c * tanh(s / c); masks (additive mask added;
 * boolean mask, causal, key padding and sliding window set -inf); softmax over keys (a
 * fully masked row gives 0); dropout from the counter-based RNG (rng.h); out = P V.
 * A case may also ask for gradients (af_backward_spec): given an upstream gradient dO
 * [B, Hq, Sq, Dv], any non-empty set of dQ, dK, dV and, with an additive mask, its
 * gradient dmask (docs/design.md section 2, "Backward").
 *
 * A case is a plain value. It decodes from any byte string (af_case_decode is total:
 * out-of-range fields are clamped or repaired), encodes back (af_case_encode), and
 * round-trips through JSON (af_case_to_json / af_case_from_json). */
#ifndef ATTNFUZZ_CASE_H
#define ATTNFUZZ_CASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AF_MAX_BATCH 64
#define AF_MAX_KV_HEADS 64
#define AF_MAX_GROUP 16
#define AF_MAX_Q_HEADS 128
#define AF_MAX_SEQ 65536
#define AF_MAX_HEAD_DIM 512
#define AF_MAX_PAD 64
#define AF_MAX_SCALE 1.0e4
#define AF_MAX_SOFTCAP 1.0e4
#define AF_MIN_SOFTCAP 1.0e-2 /* smaller caps underflow in f32 arithmetic (c tanh(s / c)) */
#define AF_DEFAULT_BUDGET ((size_t)64 << 20) /* bytes of tensors per case */
#define AF_MAG_Q4_MIN (-12)                  /* magnitudes 10^(q4/4): 1e-3 .. 1e4 */
#define AF_MAG_Q4_MAX 16

/* Physical layouts (docs/design.md section 3). The last three are packed: one buffer. */
typedef enum af_layout {
    AF_LAYOUT_BHSD,
    AF_LAYOUT_BSHD,
    AF_LAYOUT_SBHD,
    AF_LAYOUT_BSD,
    AF_LAYOUT_CHANNELS_FIRST,
    AF_LAYOUT_QKV_BS3HD,
    AF_LAYOUT_QKV_BSH3D,
    AF_LAYOUT_QKV_CHANNELS_FIRST,
    AF_LAYOUT_COUNT
} af_layout;
#define AF_LAYOUT_FIRST_PACKED AF_LAYOUT_QKV_BS3HD
extern const char *const af_layout_names[AF_LAYOUT_COUNT];

/* Where an explicit implementation applies the scale; equal in exact arithmetic. */
typedef enum af_placement {
    AF_PLACE_SCORES,  /* (Q K^T) * scale */
    AF_PLACE_Q,       /* (Q * scale) K^T */
    AF_PLACE_K,       /* Q (K * scale)^T */
    AF_PLACE_SQRT_QK, /* (Q * sqrt|scale|) (K * sign(scale) sqrt|scale|)^T */
    AF_PLACE_COUNT
} af_placement;
extern const char *const af_placement_names[AF_PLACE_COUNT];

/* The diagonal d(b, i) = i + offset(b) shared by causal and sliding-window masks. */
typedef enum af_diag {
    AF_DIAG_TOP_LEFT,          /* offset 0 (PyTorch is_causal) */
    AF_DIAG_BOTTOM_RIGHT,      /* offset Sk - Sq (FlashAttention) */
    AF_DIAG_BOTTOM_RIGHT_VALID,/* offset kv_valid[b] - Sq (varlen, ONNX nonpad_kv_seqlen) */
    AF_DIAG_EXPLICIT,          /* offset diag_offset (ONNX with a KV cache: past length) */
    AF_DIAG_COUNT
} af_diag;
extern const char *const af_diag_names[AF_DIAG_COUNT];

/* Value distribution of a tensor. */
typedef enum af_dist {
    AF_DIST_NORMAL,        /* N(0, 1) * magnitude */
    AF_DIST_UNIFORM,       /* U(-1, 1) * magnitude */
    AF_DIST_SMALL_INT,     /* integers in [-4, 4] */
    AF_DIST_ONE_HOT,       /* one +-magnitude spike per row, zeros elsewhere */
    AF_DIST_NEAR_OVERFLOW, /* +-[0.25, 1] * the dtype's largest finite value */
    AF_DIST_DENORMAL,      /* subnormals of the dtype */
    AF_DIST_COUNT
} af_dist;
extern const char *const af_dist_names[AF_DIST_COUNT];

/* Non-finite values planted in a tensor. "masked" targets positions that every query
 * ignores (keys masked for all queries; query rows fully masked); "live" any position. */
typedef enum af_special {
    AF_SPECIAL_NONE,
    AF_SPECIAL_NAN_MASKED,
    AF_SPECIAL_INF_MASKED,
    AF_SPECIAL_NAN_LIVE,
    AF_SPECIAL_INF_LIVE,
    AF_SPECIAL_COUNT
} af_special;
extern const char *const af_special_names[AF_SPECIAL_COUNT];

/* A stride-0 (broadcast) dimension of an input tensor. */
typedef enum af_bcast { AF_BCAST_NONE, AF_BCAST_BATCH, AF_BCAST_HEADS, AF_BCAST_COUNT } af_bcast;
extern const char *const af_bcast_names[AF_BCAST_COUNT];

/* How a mask marks its masked positions; what it holds elsewhere comes from mag_q4. */
typedef enum af_mask_pattern {
    AF_MASK_RANDOM,     /* each position masked with probability density / 256 */
    AF_MASK_BLOCK_DIAG, /* attend only within diagonal blocks of size 1 + density % 32 */
    AF_MASK_FULL_ROWS,  /* random query rows fully masked (probability density / 256) */
    AF_MASK_KEY_COLS,   /* random key columns masked (probability density / 256) */
    AF_MASK_NONE,       /* nothing masked (additive values only) */
    AF_MASK_PATTERN_COUNT
} af_mask_pattern;
extern const char *const af_mask_pattern_names[AF_MASK_PATTERN_COUNT];

/* Value an additive mask stores at masked positions. */
typedef enum af_mask_fill {
    AF_FILL_NEG_INF,   /* -inf */
    AF_FILL_LOWEST,    /* the mask dtype's lowest finite value (finfo.min) */
    AF_FILL_NEG_LARGE, /* -1e4 (a common "large negative" in model code) */
    AF_FILL_COUNT
} af_mask_fill;
extern const char *const af_mask_fill_names[AF_FILL_COUNT];

/* Mask dims bits: which of (B, H, Sq, Sk) are full; the others are 1 (broadcast). */
enum { AF_MDIM_B = 1, AF_MDIM_H = 2, AF_MDIM_Q = 4, AF_MDIM_K = 8, AF_MDIM_ALL = 15 };

typedef struct af_mask_spec {
    bool present;
    bool rank2;          /* stored 2-D [Sq', Sk'] (requires B and H broadcast) */
    bool expanded;       /* stored at full shape with stride 0 on broadcast dims */
    uint8_t dims;        /* AF_MDIM_* bits */
    af_dtype dtype;      /* additive: F32/F16/BF16; boolean masks are AF_BOOL */
    af_mask_pattern pattern;
    uint8_t density;
    af_mask_fill fill;   /* additive only */
    int8_t mag_q4;       /* additive only: live values N(0,1) * 10^(mag_q4/4); see live_zero */
    bool live_zero;      /* additive only: live values are 0 */
    uint32_t seed;
} af_mask_spec;

typedef enum af_tensor_id { AF_Q, AF_K, AF_V, AF_QKV_COUNT } af_tensor_id;
extern const char *const af_tensor_names[AF_QKV_COUNT]; /* "q", "k", "v" */

typedef struct af_tensor_spec {
    af_layout layout;    /* packed layouts: Q's decides for all three */
    uint8_t perm;        /* memory order: index into the permutations of the layout's dims */
    uint8_t pad;         /* extra elements after each innermost row, 0..AF_MAX_PAD */
    af_bcast bcast;      /* stride-0 dimension */
    af_dist dist;
    int8_t mag_q4;       /* magnitude 10^(mag_q4/4), AF_MAG_Q4_MIN..AF_MAG_Q4_MAX */
    af_special special;
    uint32_t seed;
} af_tensor_spec;

/* The gradients a backward case asks for: bits of af_backward_spec.grads. Bit g is named
 * af_grad_names[g] ("dq", "dk", "dv", "dmask"); dmask needs an additive mask. */
enum { AF_GRAD_DQ = 1, AF_GRAD_DK = 2, AF_GRAD_DV = 4, AF_GRAD_DMASK = 8, AF_GRAD_ALL = 15 };
#define AF_GRAD_COUNT 4
extern const char *const af_grad_names[AF_GRAD_COUNT];

/* The optional backward part of a case. grads == 0: forward-only, and dout is all zero.
 * dout is the upstream gradient dO [B, Hq, Sq, Dv], drawn like Q, K and V; its layout is
 * always af_out_layout(Q's layout) (the output's), its perm, pad and broadcast its own. */
typedef struct af_backward_spec {
    uint8_t grads;       /* AF_GRAD_* bits */
    af_tensor_spec dout;
} af_backward_spec;

/* The layout an output (and dO) takes for inputs in layout l: the unpacked layouts stay,
 * qkv_bs3hd and qkv_bsh3d give bshd, qkv_channels_first gives channels_first. */
af_layout af_out_layout(af_layout l);

/* Serving forms (docs/design.md section 2, "Serving forms"): bits of af_serving_spec.forms,
 * named af_serve_form_names[bit] ("packed", "paged", "sinks", "alibi"). */
enum { AF_SERVE_PACKED = 1, AF_SERVE_PAGED = 2, AF_SERVE_SINKS = 4, AF_SERVE_ALIBI = 8, AF_SERVE_ALL = 15 };
#define AF_SERVE_FORM_COUNT 4
extern const char *const af_serve_form_names[AF_SERVE_FORM_COUNT];
#define AF_MAX_PAGE_SIZE 1024
#define AF_DECODE_MAX_Q 16 /* the generator's decode shapes: Sq 1..16 against long keys */

/* The optional serving part of a case (forms == 0: none, every other field 0).
 * packed: batch row b is a segment of q_lens[b] queries and kv_lens[b] keys (0 allowed),
 *   its own attention: positions count from the segment's start; the canonical view is
 *   padded to [B, H, Sq, D] / [B, H, Sk, D] (rows i >= q_lens[b] and keys j >= kv_lens[b]
 *   do not exist; a missing row's output is 0), the physical tensors are THD [total, H, D]
 *   with cu_seqlens (the prefix sums).
 * paged: K and V live in pages of page_size tokens; row b's kv_lens[b] keys are the pages
 *   its block table lists (a shuffle drawn from page_seed), the last one partly filled;
 *   rows b > 0 share their first shared_pages full pages with row 0 where both have them.
 * With packed or paged, kv_lens[b] replaces key padding (valid keys) and the diagonal's
 *   presets count from the segment: bottom-right is kv_lens[b] - q_lens[b].
 * sinks: a per-head logit z_h = N(0, 1) * 10^(sink_mag_q4 / 4), rounded to the case dtype,
 *   joins each row's softmax denominator only.
 * alibi: a per-head slope s_h adds -s_h * (d(b, i) - j) to score (i, j) (symmetric:
 *   -s_h * |d(b, i) - j|) after softcap, before the masks; slopes are the geometric ALiBi
 *   sequence for Hq heads, or (alibi_random) U(0, 1) * 10^(alibi_mag_q4 / 4), in f32. */
typedef struct af_serving_spec {
    uint8_t forms;                  /* AF_SERVE_* bits */
    uint32_t q_lens[AF_MAX_BATCH];  /* packed: queries of segment b, 0..q_len */
    uint32_t kv_lens[AF_MAX_BATCH]; /* packed or paged: keys of row b, 0..kv_len */
    uint16_t page_size;             /* paged: 1..AF_MAX_PAGE_SIZE */
    uint8_t shared_pages;           /* paged: leading full pages rows b > 0 share with row 0 */
    uint32_t page_seed;             /* paged: the block table's shuffle */
    int8_t sink_mag_q4;             /* sinks: AF_MAG_Q4_MIN..AF_MAG_Q4_MAX */
    uint32_t sink_seed;
    bool alibi_symmetric;           /* alibi: |d - j| */
    bool alibi_random;              /* alibi: random slopes instead of the geometric ones */
    int8_t alibi_mag_q4;            /* alibi_random: -12..4 */
    uint32_t alibi_seed;
} af_serving_spec;

/* FP8 inputs (docs/design.md section 2, "FP8"): Q, K and V stored in an FP8 format (dtype.h:
 * AF_E4M3 / AF_E5M2), each with a per-tensor descale, the float32 factor a kernel multiplies
 * its stored values by; the math is the case's on the dequantized values x * descale, exact in
 * float64. The case dtype is then the output's, what the API returns: f16 or bf16 (repair
 * makes an f32 case dtype bf16, the default). An FP8 case is forward-only, without a serving
 * form, and needs a backend that declares the format's capability (e4m3, e5m2). kv_only: only
 * K and V are FP8 (an FP8 KV cache beside f16/bf16 queries; capability fp8_kv too), Q is in
 * the case dtype with descale 1 and not in a packed layout. Without FP8 (AF_FP8_NONE) every
 * descale is 1 and kv_only false. */
typedef enum af_fp8_fmt { AF_FP8_NONE, AF_FP8_E4M3, AF_FP8_E5M2, AF_FP8_COUNT } af_fp8_fmt;
extern const char *const af_fp8_fmt_names[AF_FP8_COUNT]; /* "none", "e4m3", "e5m2" */
#define AF_FP8_DESCALE_MIN 0x1p-40f /* repair clamps a descale into this range (NaN, 0 and */
#define AF_FP8_DESCALE_MAX 0x1p40f  /* negative ones become 1) */

typedef struct af_fp8_spec {
    af_fp8_fmt fmt;
    bool kv_only;                /* K and V only: Q in the case dtype */
    float descale[AF_QKV_COUNT]; /* q, k, v */
} af_fp8_spec;

typedef struct af_case {
    /* shapes */
    uint32_t batch, q_heads, kv_heads, q_len, kv_len, head_dim, v_head_dim;
    /* precision */
    af_dtype dtype;
    bool allow_tf32;
    /* scale: default 1/sqrt(head_dim) unless scale_set */
    bool scale_set;
    double scale;
    af_placement placement;
    double softcap; /* 0 = off */
    /* structural masks */
    bool causal;
    af_diag diag;
    int32_t diag_offset;                /* used by AF_DIAG_EXPLICIT */
    bool key_padding;
    uint32_t kv_valid[AF_MAX_BATCH];    /* valid keys per batch row (used when key_padding) */
    int32_t window_left, window_right;  /* -1 = unbounded; both -1 = no window */
    /* tensor masks */
    af_mask_spec amask; /* additive */
    af_mask_spec bmask; /* boolean, true = attend */
    /* dropout */
    double dropout_p;
    uint64_t dropout_seed;
    /* inputs */
    af_tensor_spec t[AF_QKV_COUNT];
    /* gradients (docs/design.md section 2, "Backward") */
    af_backward_spec bwd;
    /* serving forms (docs/design.md section 2, "Serving forms"; case_serving.c) */
    af_serving_spec serve;
    /* FP8 inputs (docs/design.md section 2, "FP8"; case_fp8.c) */
    af_fp8_spec fp8;
} af_case;

/* The smallest valid case: 1x1x1x1, f32, contiguous BHSD, no masks. */
void af_case_default(af_case *c);

/* Total decoder: any bytes (data may be NULL when size is 0) give a valid case within
 * budget bytes of tensors (0 = AF_DEFAULT_BUDGET). Missing bytes read as 0. */
void af_case_decode(af_case *c, const uint8_t *data, size_t size, size_t budget);

/* Upper bound on af_case_encode's output. */
#define AF_CASE_ENCODED_MAX 1024
/* Largest input file attnfuzz reads (replay, minimize, --corpus): the decoder reads at most
 * AF_CASE_ENCODED_MAX bytes of it, so more is no case, only a file that should not be here. */
#define AF_CASE_INPUT_MAX ((size_t)1 << 20)
/* Writes the canonical byte form of a valid case; returns its length (<= cap), or 0 if
 * cap is too small. decode(encode(c)) == c for every case that decode produces. */
size_t af_case_encode(const af_case *c, uint8_t *out, size_t cap);

/* Repairs any field values into a valid case (what decode applies after reading). */
void af_case_repair(af_case *c, size_t budget);

/* Checks a case without changing it: AF_OK, or AF_ERR_INVALID with the first problem
 * ("q_heads (6) is not a multiple of kv_heads (4)"). Used for cases from JSON. */
af_status af_case_validate(const af_case *c, size_t budget, af_error *err);

/* Field-wise equality (all fields, including unused ones such as kv_valid beyond batch). */
bool af_case_equal(const af_case *a, const af_case *b);

/* Derived values. */
double af_case_scale(const af_case *c);          /* the scale in effect */
bool af_case_is_packed(const af_case *c);
int32_t af_case_diag_offset(const af_case *c, uint32_t b); /* offset(b) of the diagonal */
uint32_t af_case_valid_keys(const af_case *c, uint32_t b); /* kv_valid[b] or kv_len */
bool af_case_has_window(const af_case *c);
/* FP8 (case_fp8.c): the dtype tensor w (Q, K or V) is stored in (the FP8 format, else the case
 * dtype), and its descale (1 without FP8). */
af_dtype af_case_input_dtype(const af_case *c, af_tensor_id w);
double af_case_descale(const af_case *c, af_tensor_id w);
/* Serving forms (case_serving.c): per-row lengths exist with a packed or paged form. */
bool af_case_has_lens(const af_case *c);
uint32_t af_case_seg_q(const af_case *c, uint32_t b); /* queries of row b: q_lens[b] packed, else q_len */
uint32_t af_case_seg_k(const af_case *c, uint32_t b); /* keys of row b: kv_lens[b] with lengths, else kv_len */
uint32_t af_case_pages(const af_case *c, uint32_t b); /* paged: pages row b's keys take (0 otherwise) */
/* Does the case take the split-KV (decode) path of kernels that have one: at most
 * AF_DECODE_MAX_Q queries per row against more than AF_SPLIT_KV_CHUNK keys in some row? */
#define AF_SPLIT_KV_CHUNK 256
bool af_case_split_kv(const af_case *c);
/* What of the serving part a finding's signature counts: the form bits, then split-KV, then
 * symmetric ALiBi; and the same in words (" packed paged(16) sinks split_kv"; "" for none). */
uint32_t af_case_serving_features(const af_case *c);
void af_case_serving_str(const af_case *c, char *buf, size_t len);
/* Bytes of all tensors of the case: Q, K, V storage (packed counted once), masks,
 * and the output at the case dtype; a backward case adds dO's storage and each gradient
 * it asks for (dmask at the mask's dtype). */
size_t af_case_tensor_bytes(const af_case *c);
/* 4 * B * Hq * Sq * Sk * (D + Dv) / 2: the flops of the two matrix products; a backward
 * case 3.5 times that (its five products cost 2.5 forwards). */
double af_case_flops(const af_case *c);

/* JSON (cJSON). to_json returns a malloc'ed string the caller frees with free(); NULL on
 * allocation failure. from_json parses text written by to_json or by another tool;
 * missing optional fields take defaults; an impossible case is AF_ERR_INVALID and
 * malformed text AF_ERR_FORMAT, with a message naming the field. */
char *af_case_to_json(const af_case *c);
af_status af_case_from_json(af_case *c, const char *text, af_error *err);

/* The same, on cJSON objects (for embedding in case.json). The object type is opaque
 * here to keep cJSON out of the public header: pass a `cJSON *`. */
void *af_case_to_cjson(const af_case *c);
af_status af_case_from_cjson(af_case *c, const void *json, af_error *err);

/* Draws a case from the generator's distribution (small shapes favoured, a tail of large
 * ones, rare corners not vanishingly rare), within budget; max_flops (0 = no limit)
 * caps the rare large cases, a sixteenth of it the medium ones. Forward-only. */
struct af_rng;
void af_case_generate(af_case *c, struct af_rng *rng, size_t budget, double max_flops);

/* The generator's options. */
/* The fields the edges distribution (af_gen_opts.edges) puts on both sides of the usual
 * fused-kernel eligibility switches (docs/design.md section 2, "The generator"). */
typedef enum af_edge_field {
    AF_EDGE_HEAD_DIM, /* D (and Dv) at 8, 16, 32, 64, 128, 256 and one off them; multiples of 8 between; 288 */
    AF_EDGE_SEQ,      /* kv_len (and q_len) at 64, 128, 256, 512 and one off them; 192, 384 */
    AF_EDGE_GQA,      /* Hq / Hkv of 1, 2, 4, 8 or odd 3, 5, 7 over Hkv of 1, 2, 4 */
    AF_EDGE_ALIGN,    /* Q, K, V rows 16-byte aligned (pad 0 or 8) or not (pad 1, 3, 7) */
    AF_EDGE_COUNT
} af_edge_field;
extern const char *const af_edge_field_names[AF_EDGE_COUNT];

typedef struct af_gen_opts {
    size_t budget;    /* bytes of tensors per case, 0 = AF_DEFAULT_BUDGET */
    double max_flops; /* 0 = no limit */
    double backward;  /* share of cases that ask for gradients, 0..1 (0: forward-only, and the
                         draws are exactly af_case_generate's) */
    double serving;   /* share of cases in a serving form or decode shape, 0..1 (0: none, and the
                         draws are exactly as without it); such a case is forward-only */
    double fp8;       /* share of FP8 cases (e4m3 or e5m2 inputs with descales), 0..1 (0: none, and
                         the draws are exactly as without it); such a case is forward-only, dense */
} af_gen_opts;
/* The edges distribution's options (af_case_generate_edges). */
typedef struct af_gen_edges_opts {
    double share;                 /* share of cases whose shape is drawn on the edges, 0..1 (0: none,
                                     and the draws are exactly af_case_generate_opts's) */
    uint8_t weight[AF_EDGE_COUNT]; /* how often each field is put on an edge: 0 or 1 even (1/2),
                                      w: w / (w + 1) (af_edge_weights) */
    uint8_t fields;               /* out: the fields the last case was put on edges at (bits
                                     1 << af_edge_field; 0: not an edge case) */
} af_gen_edges_opts;
/* af_case_generate with options: a share of the cases also asks for gradients (any
 * non-empty set, weighted towards all of them; dO drawn like Q, K and V, stride-0 more
 * often, as a `sum().backward()` gives). */
void af_case_generate_opts(af_case *c, struct af_rng *rng, const af_gen_opts *o);
/* af_case_generate_opts, and a share e->share of the cases on the edges (af_gen_edges, under
 * the whole flop cap); e->fields says which fields the case holds on an edge. e NULL: none. */
void af_case_generate_edges(af_case *c, struct af_rng *rng, const af_gen_opts *o, af_gen_edges_opts *e);

/* Puts the fields of c chosen by weights (af_gen_opts.edge_weight; NULL: even) on both
 * sides of the eligibility switches, then shrinks c to max_flops keeping those fields where
 * it can (batch, other fields, q_len first; if it cannot, af_case_cap_flops decides) and
 * repairs it within budget. Returns the fields left on an edge (bits 1 << af_edge_field). */
unsigned af_gen_edges(af_case *c, struct af_rng *rng, const uint8_t *weights, double max_flops, size_t budget);

/* What a campaign learns of a backend's refusals on edge cases: for each field, the edge
 * cases drawn with it on an edge and how many of them the backend refused. */
typedef struct af_edge_tally {
    uint32_t cases, refused_cases;
    uint32_t drawn[AF_EDGE_COUNT], refused[AF_EDGE_COUNT];
} af_edge_tally;
/* Counts one edge case (fields: its bits) and whether the backend refused it. */
void af_edge_tally_note(af_edge_tally *t, unsigned fields, bool refused);
/* Raises w[f] (never lowers it; start from zeros) to 1 + 3 (rate_f - rate) / (1 - rate),
 * rounded down, where rate_f is the refused share of the edge cases with field f on an edge
 * and rate that of all edge cases: a field whose edges the backend refuses more than the
 * others is drawn on an edge more often (at most w 4: 4/5 of the cases). A field with fewer
 * than 16 cases drawn gives 1. */
void af_edge_weights(const af_edge_tally *t, uint8_t w[AF_EDGE_COUNT]);

/* Structure-aware mutation: 1 to 3 meaningful edits (nudge or jump one dimension, swap
 * a layout, toggle a mask kind or the causal alignment, change dtype or TF32, move a
 * magnitude, plant a special value, reseed values, change scale, softcap or dropout; in a
 * backward case also the gradients asked for and dO), then repair within budget. A
 * forward-only case stays forward-only (and mutates exactly as before gradients existed). */
void af_case_mutate(af_case *c, struct af_rng *rng, size_t budget);
/* Field-wise crossover: each group of related fields (shape, precision, scale, masks,
 * dropout, each tensor, the backward part when a or b has one) comes from a or b;
 * repaired within budget. */
void af_case_crossover(const af_case *a, const af_case *b, af_case *out, struct af_rng *rng, size_t budget);
/* Shrinks batch, heads, head dims (not below 8), then lengths until af_case_flops <= max. */
void af_case_cap_flops(af_case *c, double max_flops, size_t budget);

#ifdef __cplusplus
}
#endif
#endif
