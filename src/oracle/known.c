/* known.c - known bugs as data (known.h): loading known.json files, compiling their
 * predicates, matching findings.
 *
 * A predicate clause is an expression over variables (docs/known.md):
 *     expr  := or
 *     or    := and { "||" and }
 *     and   := not { "&&" not }
 *     not   := "!" not | cmp
 *     cmp   := sum [ ("==" | "!=" | "<" | "<=" | ">" | ">=") sum ] | sum "in" "[" atom {"," atom} "]"
 *     sum   := prod { ("+" | "-") prod }
 *     prod  := unary { ("*" | "/" | "%") unary }
 *     unary := "-" unary | atom
 *     atom  := NUMBER | NAME | "(" expr ")" | "abs" "(" expr ")"
 * Every value is a double (booleans 1 and 0; NaN compares false, as in C). An enum variable
 * (dtype, q.layout, diag, kind, ...) is compared with the names of its values, resolved
 * to numbers when the file loads: "dtype in [f16, bf16]". Each clause compiles to a small
 * array of nodes, evaluated recursively. */
#include "attnfuzz/known.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <fnmatch.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/host.h"
#include "attnfuzz/mem.h"
#include "attnfuzz/tensor.h"
#include "fileio.h"
#include "layout_internal.h"
#include "proc.h"

const char *const af_known_class_names[AF_KNOWN_CLASS_COUNT] = {"real_bug", "convention", "precision"};
_Static_assert(sizeof(af_known_class_names) / sizeof(af_known_class_names[0]) == AF_KNOWN_CLASS_COUNT, "names");

/* --- variables ------------------------------------------------------------------------ */

typedef enum af_kv_type { AF_KV_NUM, AF_KV_BOOL, AF_KV_ENUM } af_kv_type;

typedef struct af_kv_def {
    const char *name;
    af_kv_type type;
    const char *const *names; /* AF_KV_ENUM: the value names, index = value */
    int nnames;
    bool result;              /* a symptom variable (from the oracle's result), else a case one */
    const char *doc;          /* for docs/known.md and `attnfuzz known --vars` */
} af_kv_def;

static const char *const af_kv_bool_names[2] = {"false", "true"};
static const char *const af_kv_float_names[3] = {"f32", "f16", "bf16"}; /* af_dtype order */
static const char *const af_kv_tensor_names[1 + AF_GRAD_COUNT] = {"out", "dq", "dk", "dv", "dmask"};

enum {
    /* case */
    KV_DTYPE, KV_TF32, KV_B, KV_HQ, KV_HKV, KV_SQ, KV_SK, KV_D, KV_DV, KV_GROUP, KV_GQA, KV_CROSS,
    KV_SCALE, KV_SCALE_SET, KV_PLACEMENT, KV_SOFTCAP, KV_DROPOUT,
    KV_CAUSAL, KV_DIAG, KV_DIAG_OFFSET, KV_KEY_PADDING, KV_VALID_MIN, KV_VALID_MAX,
    KV_WINDOW, KV_WINDOW_LEFT, KV_WINDOW_RIGHT,
    KV_AMASK, KV_AMASK_DTYPE, KV_AMASK_RANK, KV_AMASK_DIMS, KV_AMASK_PATTERN, KV_AMASK_FILL, KV_AMASK_EXPANDED,
    KV_AMASK_LIVE_ZERO, KV_AMASK_MAG,
    KV_BMASK, KV_BMASK_RANK, KV_BMASK_DIMS, KV_BMASK_PATTERN, KV_BMASK_EXPANDED,
    KV_MASK_DTYPE, KV_PACKED, KV_STRIDED, KV_SPECIALS, KV_DENORMAL, KV_NEAR_OVERFLOW,
    /* backward and serving parts */
    KV_BACKWARD, KV_DO_PERM, KV_DO_PAD, KV_DO_BCAST, KV_DO_DIST, KV_DO_SPECIAL,
    KV_SEGMENTS, KV_PAGED, KV_PAGE_SIZE, KV_SINKS, KV_ALIBI,
    KV_TENSOR0, /* then per tensor q, k, v: the KV_T_* fields */
    KV_CASE_END = KV_TENSOR0 + 3 * 10,
    /* result */
    KV_KIND = KV_CASE_END, KV_N_NAN, KV_N_NAN_REF, KV_N_NAN_OUT, KV_N_INF, KV_N_MASKED_ROW_NAN,
    KV_N_MASKED_VALUE_LEAK, KV_N_DIVERGE, KV_N_UNSTABLE, KV_N_FAIL, KV_N_FAIL_MASKED, KV_MASKED_ONLY,
    KV_WORST_RATIO, KV_MAX_ABS, KV_MAX_REL, KV_REL_FRO, KV_WORST_OUT, KV_WORST_REF, KV_SCORE_MAX, KV_PRODUCT_MAX, KV_TENSOR,
    KV_COUNT
};
enum { KV_T_LAYOUT, KV_T_PERM, KV_T_PAD, KV_T_BCAST, KV_T_DIST, KV_T_MAG, KV_T_SPECIAL, KV_T_CONTIG, KV_T_ROW_STRIDE,
       KV_T_ALIGN, KV_T_COUNT };
_Static_assert(KV_T_COUNT == 10, "KV_CASE_END counts 10 fields per tensor");
_Static_assert(KV_COUNT <= AF_KNOWN_NVARS, "af_known_vars holds every variable");

#define AF_KV_TENSOR(t)                                                                                               \
    {#t ".layout", AF_KV_ENUM, af_layout_names, AF_LAYOUT_COUNT, false, "its layout (packed: Q's)"},                  \
        {#t ".perm", AF_KV_NUM, NULL, 0, false, "its memory order (0 = the layout's own)"},                           \
        {#t ".pad", AF_KV_NUM, NULL, 0, false, "elements of padding after each innermost row"},                        \
        {#t ".bcast", AF_KV_ENUM, af_bcast_names, AF_BCAST_COUNT, false, "its stride-0 dimension"},                   \
        {#t ".dist", AF_KV_ENUM, af_dist_names, AF_DIST_COUNT, false, "its value distribution"},                      \
        {#t ".mag", AF_KV_NUM, NULL, 0, false, "log10 of its magnitude"},                                             \
        {#t ".special", AF_KV_ENUM, af_special_names, AF_SPECIAL_COUNT, false, "planted NaN/Inf"},                    \
        {#t ".contig", AF_KV_BOOL, NULL, 0, false, "its head dim (canonical last dim) has unit stride"},              \
        {#t ".row_stride", AF_KV_NUM, NULL, 0, false,                                                                  \
         "the smallest stride (elements) above 1 of a dimension longer than 1, as the canonical view has it"},        \
    {                                                                                                                 \
        #t ".align", AF_KV_NUM, NULL, 0, false,                                                                       \
            "the largest power of two (bytes, at most 256) dividing its start in the buffer and every stride but a "  \
            "unit one of a dimension longer than 1"                                                                   \
    }

static const af_kv_def af_kv_defs[KV_COUNT] = {
    [KV_DTYPE] = {"dtype", AF_KV_ENUM, af_kv_float_names, 3, false, "the case dtype"},
    [KV_TF32] = {"tf32", AF_KV_BOOL, NULL, 0, false, "TF32 allowed"},
    [KV_B] = {"b", AF_KV_NUM, NULL, 0, false, "batch"},
    [KV_HQ] = {"hq", AF_KV_NUM, NULL, 0, false, "query heads"},
    [KV_HKV] = {"hkv", AF_KV_NUM, NULL, 0, false, "key/value heads"},
    [KV_SQ] = {"sq", AF_KV_NUM, NULL, 0, false, "queries"},
    [KV_SK] = {"sk", AF_KV_NUM, NULL, 0, false, "keys"},
    [KV_D] = {"d", AF_KV_NUM, NULL, 0, false, "head dim of Q and K"},
    [KV_DV] = {"dv", AF_KV_NUM, NULL, 0, false, "head dim of V"},
    [KV_GROUP] = {"group", AF_KV_NUM, NULL, 0, false, "hq / hkv"},
    [KV_GQA] = {"gqa", AF_KV_BOOL, NULL, 0, false, "hq != hkv"},
    [KV_CROSS] = {"cross", AF_KV_BOOL, NULL, 0, false, "sq != sk"},
    [KV_SCALE] = {"scale", AF_KV_NUM, NULL, 0, false, "the scale in effect"},
    [KV_SCALE_SET] = {"scale_set", AF_KV_BOOL, NULL, 0, false, "a scale other than the default was given"},
    [KV_PLACEMENT] = {"placement", AF_KV_ENUM, af_placement_names, AF_PLACE_COUNT, false, "the scale's placement"},
    [KV_SOFTCAP] = {"softcap", AF_KV_NUM, NULL, 0, false, "the softcap (0 = none)"},
    [KV_DROPOUT] = {"dropout", AF_KV_NUM, NULL, 0, false, "dropout p"},
    [KV_CAUSAL] = {"causal", AF_KV_BOOL, NULL, 0, false, "a causal mask"},
    [KV_DIAG] = {"diag", AF_KV_ENUM, af_diag_names, AF_DIAG_COUNT, false, "the diagonal of causal and window masks"},
    [KV_DIAG_OFFSET] = {"diag_offset", AF_KV_NUM, NULL, 0, false, "the diagonal's offset for batch row 0"},
    [KV_KEY_PADDING] = {"key_padding", AF_KV_BOOL, NULL, 0, false, "key padding lengths"},
    [KV_VALID_MIN] = {"valid_min", AF_KV_NUM, NULL, 0, false, "the fewest valid keys of a batch row"},
    [KV_VALID_MAX] = {"valid_max", AF_KV_NUM, NULL, 0, false, "the most valid keys of a batch row"},
    [KV_WINDOW] = {"window", AF_KV_BOOL, NULL, 0, false, "a sliding window"},
    [KV_WINDOW_LEFT] = {"window_left", AF_KV_NUM, NULL, 0, false, "its left bound (-1 unbounded)"},
    [KV_WINDOW_RIGHT] = {"window_right", AF_KV_NUM, NULL, 0, false, "its right bound (-1 unbounded)"},
    [KV_AMASK] = {"amask", AF_KV_BOOL, NULL, 0, false, "an additive mask"},
    [KV_AMASK_DTYPE] = {"amask.dtype", AF_KV_ENUM, af_kv_float_names, 3, false, "its dtype"},
    [KV_AMASK_RANK] = {"amask.rank", AF_KV_NUM, NULL, 0, false, "2 or 4"},
    [KV_AMASK_DIMS] = {"amask.dims", AF_KV_NUM, NULL, 0, false, "full dims: 1 B, 2 H, 4 Sq, 8 Sk"},
    [KV_AMASK_PATTERN] = {"amask.pattern", AF_KV_ENUM, af_mask_pattern_names, AF_MASK_PATTERN_COUNT, false,
                          "what it masks"},
    [KV_AMASK_FILL] = {"amask.fill", AF_KV_ENUM, af_mask_fill_names, AF_FILL_COUNT, false,
                       "the value at its masked places"},
    [KV_AMASK_EXPANDED] = {"amask.expanded", AF_KV_BOOL, NULL, 0, false, "stored at full shape, stride 0"},
    [KV_AMASK_LIVE_ZERO] = {"amask.live_zero", AF_KV_BOOL, NULL, 0, false, "0 at its live places"},
    [KV_AMASK_MAG] = {"amask.mag", AF_KV_NUM, NULL, 0, false, "log10 of its live values' magnitude"},
    [KV_BMASK] = {"bmask", AF_KV_BOOL, NULL, 0, false, "a boolean mask"},
    [KV_BMASK_RANK] = {"bmask.rank", AF_KV_NUM, NULL, 0, false, "2 or 4"},
    [KV_BMASK_DIMS] = {"bmask.dims", AF_KV_NUM, NULL, 0, false, "full dims: 1 B, 2 H, 4 Sq, 8 Sk"},
    [KV_BMASK_PATTERN] = {"bmask.pattern", AF_KV_ENUM, af_mask_pattern_names, AF_MASK_PATTERN_COUNT, false,
                          "what it masks"},
    [KV_BMASK_EXPANDED] = {"bmask.expanded", AF_KV_BOOL, NULL, 0, false, "stored at full shape, stride 0"},
    [KV_MASK_DTYPE] = {"mask_dtype", AF_KV_BOOL, NULL, 0, false, "an additive mask of another dtype than the case's"},
    [KV_PACKED] = {"packed", AF_KV_BOOL, NULL, 0, false, "a packed QKV layout"},
    [KV_STRIDED] = {"strided", AF_KV_BOOL, NULL, 0, false, "a permuted, padded or stride-0 tensor"},
    [KV_SPECIALS] = {"specials", AF_KV_BOOL, NULL, 0, false, "planted NaN/Inf in some tensor"},
    [KV_DENORMAL] = {"denormal", AF_KV_BOOL, NULL, 0, false, "some tensor draws subnormals"},
    [KV_NEAR_OVERFLOW] = {"near_overflow", AF_KV_BOOL, NULL, 0, false, "some tensor draws values near overflow"},
    [KV_BACKWARD] = {"backward", AF_KV_BOOL, NULL, 0, false, "the case asks for gradients"},
    [KV_DO_PERM] = {"do.perm", AF_KV_NUM, NULL, 0, false, "dO's memory order (0 = the output layout's own)"},
    [KV_DO_PAD] = {"do.pad", AF_KV_NUM, NULL, 0, false, "dO's elements of padding after each innermost row"},
    [KV_DO_BCAST] = {"do.bcast", AF_KV_ENUM, af_bcast_names, AF_BCAST_COUNT, false, "dO's stride-0 dimension"},
    [KV_DO_DIST] = {"do.dist", AF_KV_ENUM, af_dist_names, AF_DIST_COUNT, false, "dO's value distribution"},
    [KV_DO_SPECIAL] = {"do.special", AF_KV_ENUM, af_special_names, AF_SPECIAL_COUNT, false, "dO's planted NaN/Inf"},
    [KV_SEGMENTS] = {"segments", AF_KV_BOOL, NULL, 0, false, "packed variable-length segments (THD, cu_seqlens)"},
    [KV_PAGED] = {"paged", AF_KV_BOOL, NULL, 0, false, "K and V in page caches with a block table"},
    [KV_PAGE_SIZE] = {"page_size", AF_KV_NUM, NULL, 0, false, "tokens per page (0: not paged)"},
    [KV_SINKS] = {"sinks", AF_KV_BOOL, NULL, 0, false, "per-head sink logits"},
    [KV_ALIBI] = {"alibi", AF_KV_BOOL, NULL, 0, false, "ALiBi slopes"},
    AF_KV_TENSOR(q),
    AF_KV_TENSOR(k),
    AF_KV_TENSOR(v),
    [KV_KIND] = {"kind", AF_KV_ENUM, af_kind_names, AF_KIND_COUNT, true, "the finding's kind"},
    [KV_N_NAN] = {"n_nan", AF_KV_NUM, NULL, 0, true, "elements NaN on one side only"},
    [KV_N_NAN_REF] = {"n_nan_ref", AF_KV_NUM, NULL, 0, true, "... of them NaN in the reference, not in the output"},
    [KV_N_NAN_OUT] = {"n_nan_out", AF_KV_NUM, NULL, 0, true, "... of them NaN in the output, not in the reference"},
    [KV_N_INF] = {"n_inf", AF_KV_NUM, NULL, 0, true, "Inf mismatches"},
    [KV_N_MASKED_ROW_NAN] = {"n_masked_row_nan", AF_KV_NUM, NULL, 0, true, "NaN in fully masked rows"},
    [KV_N_MASKED_VALUE_LEAK] = {"n_masked_value_leak", AF_KV_NUM, NULL, 0, true, "NaN through zero-weight keys"},
    [KV_N_DIVERGE] = {"n_diverge", AF_KV_NUM, NULL, 0, true, "finite elements beyond tolerance"},
    [KV_N_UNSTABLE] = {"n_unstable", AF_KV_NUM, NULL, 0, true, "elements excused as unstable"},
    [KV_N_FAIL] = {"n_fail", AF_KV_NUM, NULL, 0, true, "failing elements (the five counts above n_unstable, less those of a waived kind)"},
    [KV_N_FAIL_MASKED] = {"n_fail_masked", AF_KV_NUM, NULL, 0, true, "... of them in fully masked rows"},
    [KV_MASKED_ONLY] = {"masked_only", AF_KV_BOOL, NULL, 0, true,
                        "some element fails and every failing one is in a fully masked row"},
    [KV_WORST_RATIO] = {"worst_ratio", AF_KV_NUM, NULL, 0, true, "the worst element's error over its tolerance"},
    [KV_MAX_ABS] = {"max_abs", AF_KV_NUM, NULL, 0, true, "max |out - ref| over finite pairs"},
    [KV_MAX_REL] = {"max_rel", AF_KV_NUM, NULL, 0, true, "max relative error"},
    [KV_REL_FRO] = {"rel_fro", AF_KV_NUM, NULL, 0, true, "relative Frobenius error"},
    [KV_WORST_OUT] = {"worst_out", AF_KV_NUM, NULL, 0, true, "the worst element's output"},
    [KV_WORST_REF] = {"worst_ref", AF_KV_NUM, NULL, 0, true, "... and reference"},
    [KV_SCORE_MAX] = {"score_max", AF_KV_NUM, NULL, 0, true,
                      "the largest score of any row holding a failing element (-inf: all fully masked)"},
    [KV_PRODUCT_MAX] = {"product_max", AF_KV_NUM, NULL, 0, true,
                        "the largest |q_d k_d| (one product of Q K^T) of any row holding a failing element"},
    [KV_TENSOR] = {"tensor", AF_KV_ENUM, af_kv_tensor_names, 1 + AF_GRAD_COUNT, true,
                   "what the finding is on: the output or a gradient"},
};

const char *af_known_var(size_t i, char *buf, size_t len) {
    if (i >= KV_COUNT) return NULL;
    const af_kv_def *d = &af_kv_defs[i];
    size_t n = 0;
    int w = snprintf(buf, len, "%s, %s: %s", d->result ? "symptom" : "case",
                     d->type == AF_KV_NUM ? "number" : d->type == AF_KV_BOOL ? "bool" : "one of", d->doc);
    if (w > 0) n = (size_t)w;
    if (d->type == AF_KV_ENUM) {
        for (int k = 0; k < d->nnames && n < len; k++) {
            w = snprintf(buf + n, len - n, "%s%s", k ? ", " : " (", d->names[k]);
            if (w > 0) n += (size_t)w;
        }
        if (n < len) snprintf(buf + n, len - n, ")");
    }
    return d->name;
}

static int af_kv_lookup(const char *name, size_t len) {
    for (int i = 0; i < KV_COUNT; i++)
        if (af_kv_defs[i].name && strlen(af_kv_defs[i].name) == len && strncmp(af_kv_defs[i].name, name, len) == 0)
            return i;
    return -1;
}

/* The strides a tensor's canonical view has, without storage: contiguity, the row stride
 * and the alignment (bytes) of its rows. */
static void af_kv_strides(const af_case *c, af_tensor_id which, double *contig, double *row_stride, double *align) {
    bool packed = af_case_is_packed(c);
    af_layout l = c->t[packed ? AF_Q : which].layout;
    size_t H = which == AF_Q ? c->q_heads : c->kv_heads, D = which == AF_V ? c->v_head_dim : c->head_dim;
    af_tensor t;
    af_case_input_layout(c, which, &t);
    static const unsigned char base[1];
    t.data = (void *)(uintptr_t)base;
    af_view v;
    af_layout_view(l, &t, AF_Q, H, D, &v); /* Q's part: the strides are every part's */
    size_t es = af_dtype_size(c->dtype);
    /* where a packed buffer's part starts (af_layout_view's offsets) */
    size_t off = 0, w = (size_t)which;
    if (l == AF_LAYOUT_QKV_BS3HD) off = w * t.nb[2];
    if (l == AF_LAYOUT_QKV_BSH3D) off = w * t.nb[3];
    if (l == AF_LAYOUT_QKV_CHANNELS_FIRST) off = w * H * D * t.nb[1];
    *contig = v.nb[3] == es || v.ne[3] == 1;
    size_t rs = 0, g = off;
    for (int d = 0; d < 4; d++) {
        if (v.ne[d] <= 1 || v.nb[d] == 0) continue;
        if (v.nb[d] > es && (rs == 0 || v.nb[d] < rs)) rs = v.nb[d];
        if (v.nb[d] != es) g |= v.nb[d];
    }
    *row_stride = (double)(rs / es);
    size_t a = 1;
    while (a < 256 && !(g & a)) a <<= 1;
    *align = (double)a;
}

void af_known_vars_of_case(af_known_vars *vars, const af_case *c) {
    double *v = vars->v;
    memset(vars, 0, sizeof *vars);
    v[KV_DTYPE] = c->dtype;
    v[KV_TF32] = c->allow_tf32;
    v[KV_B] = c->batch, v[KV_HQ] = c->q_heads, v[KV_HKV] = c->kv_heads;
    v[KV_SQ] = c->q_len, v[KV_SK] = c->kv_len, v[KV_D] = c->head_dim, v[KV_DV] = c->v_head_dim;
    v[KV_GROUP] = c->q_heads / c->kv_heads;
    v[KV_GQA] = c->q_heads != c->kv_heads;
    v[KV_CROSS] = c->q_len != c->kv_len;
    v[KV_SCALE] = af_case_scale(c);
    v[KV_SCALE_SET] = c->scale_set;
    v[KV_PLACEMENT] = c->placement;
    v[KV_SOFTCAP] = c->softcap;
    v[KV_DROPOUT] = c->dropout_p;
    v[KV_CAUSAL] = c->causal;
    v[KV_DIAG] = c->diag;
    v[KV_DIAG_OFFSET] = af_case_diag_offset(c, 0);
    v[KV_KEY_PADDING] = c->key_padding;
    uint32_t vmin = UINT32_MAX, vmax = 0;
    for (uint32_t b = 0; b < c->batch; b++) {
        uint32_t n = af_case_valid_keys(c, b);
        vmin = n < vmin ? n : vmin;
        vmax = n > vmax ? n : vmax;
    }
    v[KV_VALID_MIN] = vmin, v[KV_VALID_MAX] = vmax;
    v[KV_WINDOW] = af_case_has_window(c);
    v[KV_WINDOW_LEFT] = c->window_left, v[KV_WINDOW_RIGHT] = c->window_right;
    const af_mask_spec *am = &c->amask, *bm = &c->bmask;
    v[KV_AMASK] = am->present;
    v[KV_AMASK_DTYPE] = am->present ? am->dtype : c->dtype;
    v[KV_AMASK_RANK] = am->present ? (am->rank2 ? 2 : 4) : 0;
    v[KV_AMASK_DIMS] = am->present ? am->dims : 0;
    v[KV_AMASK_PATTERN] = am->pattern, v[KV_AMASK_FILL] = am->fill;
    v[KV_AMASK_EXPANDED] = am->present && am->expanded;
    v[KV_AMASK_LIVE_ZERO] = am->present && am->live_zero;
    v[KV_AMASK_MAG] = am->mag_q4 / 4.0;
    v[KV_BMASK] = bm->present;
    v[KV_BMASK_RANK] = bm->present ? (bm->rank2 ? 2 : 4) : 0;
    v[KV_BMASK_DIMS] = bm->present ? bm->dims : 0;
    v[KV_BMASK_PATTERN] = bm->pattern;
    v[KV_BMASK_EXPANDED] = bm->present && bm->expanded;
    v[KV_MASK_DTYPE] = am->present && am->dtype != c->dtype;
    v[KV_PACKED] = af_case_is_packed(c);
    bool packed = af_case_is_packed(c);
    bool strided = false, specials = false, denormal = false, overflow = false;
    for (int t = 0; t < AF_QKV_COUNT; t++) {
        const af_tensor_spec *s = &c->t[t], *ls = &c->t[packed ? AF_Q : t];
        double *x = v + KV_TENSOR0 + t * KV_T_COUNT;
        x[KV_T_LAYOUT] = ls->layout;
        x[KV_T_PERM] = ls->perm % af_layout_perm_count(ls->layout);
        x[KV_T_PAD] = ls->pad;
        x[KV_T_BCAST] = ls->bcast;
        x[KV_T_DIST] = s->dist;
        x[KV_T_MAG] = s->mag_q4 / 4.0;
        x[KV_T_SPECIAL] = s->special;
        af_kv_strides(c, (af_tensor_id)t, &x[KV_T_CONTIG], &x[KV_T_ROW_STRIDE], &x[KV_T_ALIGN]);
        strided |= x[KV_T_PERM] != 0.0 || ls->pad || ls->bcast != AF_BCAST_NONE;
        specials |= s->special != AF_SPECIAL_NONE;
        denormal |= s->dist == AF_DIST_DENORMAL;
        overflow |= s->dist == AF_DIST_NEAR_OVERFLOW;
    }
    v[KV_STRIDED] = strided, v[KV_SPECIALS] = specials, v[KV_DENORMAL] = denormal, v[KV_NEAR_OVERFLOW] = overflow;
    const af_tensor_spec *d = &c->bwd.dout;
    v[KV_BACKWARD] = c->bwd.grads != 0;
    v[KV_DO_PERM] = c->bwd.grads ? d->perm % af_layout_perm_count(af_out_layout(c->t[AF_Q].layout)) : 0;
    v[KV_DO_PAD] = c->bwd.grads ? d->pad : 0;
    v[KV_DO_BCAST] = c->bwd.grads ? d->bcast : AF_BCAST_NONE;
    v[KV_DO_DIST] = c->bwd.grads ? d->dist : AF_DIST_NORMAL;
    v[KV_DO_SPECIAL] = c->bwd.grads ? d->special : AF_SPECIAL_NONE;
    v[KV_SEGMENTS] = (c->serve.forms & AF_SERVE_PACKED) != 0;
    v[KV_PAGED] = (c->serve.forms & AF_SERVE_PAGED) != 0;
    v[KV_PAGE_SIZE] = (c->serve.forms & AF_SERVE_PAGED) ? c->serve.page_size : 0;
    v[KV_SINKS] = (c->serve.forms & AF_SERVE_SINKS) != 0;
    v[KV_ALIBI] = (c->serve.forms & AF_SERVE_ALIBI) != 0;
}

static void af_known_vars_of_result(af_known_vars *vars, af_kind kind, const af_result *r, const char *tensor) {
    double *v = vars->v;
    v[KV_TENSOR] = 0;
    for (int g = 0; tensor && g < AF_GRAD_COUNT; g++)
        if (strcmp(tensor, af_grad_names[g]) == 0) v[KV_TENSOR] = 1 + g;
    const af_metrics *m = &r->m;
    v[KV_KIND] = kind;
    v[KV_N_NAN] = (double)m->n_nan;
    v[KV_N_NAN_REF] = (double)m->n_nan_ref;
    v[KV_N_NAN_OUT] = (double)(m->n_nan - m->n_nan_ref);
    v[KV_N_INF] = (double)m->n_inf;
    v[KV_N_MASKED_ROW_NAN] = (double)m->n_masked_row_nan;
    v[KV_N_MASKED_VALUE_LEAK] = (double)m->n_masked_value_leak;
    v[KV_N_DIVERGE] = (double)m->n_diverge;
    v[KV_N_UNSTABLE] = (double)m->n_unstable;
    /* a waived kind's elements (conventions, --waive) are no failing elements */
    size_t fail = m->n_nan + m->n_inf + m->n_masked_row_nan + m->n_masked_value_leak + m->n_diverge - m->n_waived;
    v[KV_N_FAIL] = (double)fail;
    v[KV_N_FAIL_MASKED] = (double)m->n_fail_masked;
    v[KV_MASKED_ONLY] = fail > 0 && m->n_fail_masked == fail;
    v[KV_WORST_RATIO] = m->worst_ratio;
    v[KV_MAX_ABS] = m->max_abs;
    v[KV_MAX_REL] = m->max_rel;
    v[KV_REL_FRO] = m->rel_fro;
    v[KV_WORST_OUT] = m->worst_out;
    v[KV_WORST_REF] = m->worst_ref;
    v[KV_SCORE_MAX] = m->fail_score_max;
    v[KV_PRODUCT_MAX] = m->fail_product_max;
}

/* --- expressions ------------------------------------------------------------------------ */

#define AF_KN_NODES 96   /* nodes of one entry's when (or symptom), all clauses */
#define AF_KN_LIST 64    /* constants of its "in" lists */
#define AF_KN_CLAUSE 400 /* characters of one clause */

typedef enum af_kn_op {
    KN_NUM, KN_VAR, KN_SYM, KN_NEG, KN_NOT, KN_ABS,
    KN_ADD, KN_SUB, KN_MUL, KN_DIV, KN_MOD,
    KN_EQ, KN_NE, KN_LT, KN_LE, KN_GT, KN_GE, KN_AND, KN_OR, KN_IN
} af_kn_op;

typedef struct af_kn_node {
    uint8_t op;
    int16_t a, b;     /* children; KN_IN: b = first list item, n = count */
    int16_t n;
    int16_t var;      /* KN_VAR */
    double num;       /* KN_NUM; KN_SYM, KN_VAR: offset of the name in the clause text (for resolution) */
    uint16_t sym_len; /* KN_SYM, KN_VAR */
} af_kn_node;

typedef struct af_kn_expr {
    af_kn_node node[AF_KN_NODES];
    int16_t list[AF_KN_LIST]; /* node indices of "in" list items */
    int n, nlist;
    int root; /* -1: true (no clause) */
} af_kn_expr;

/* The parser of one clause, appending to an expression. */
typedef struct af_kn_parser {
    af_kn_expr *e;
    const char *s; /* the clause */
    size_t pos;
    bool result_scope; /* symptom clauses: every variable; when clauses: case variables only
                          (the generator evaluates `when` on cases not run yet) */
    af_error *err;
    const char *where; /* "FILE: entry N (ID): when" */
} af_kn_parser;

static int af_kn_fail(af_kn_parser *p, const char *what) {
    af_error_set(p->err, AF_ERR_FORMAT, "%s: \"%s\": %s (at character %zu)", p->where, p->s, what, p->pos + 1);
    return -1;
}

static void af_kn_space(af_kn_parser *p) {
    while (p->s[p->pos] == ' ' || p->s[p->pos] == '\t') p->pos++;
}

static bool af_kn_eat(af_kn_parser *p, const char *tok) {
    af_kn_space(p);
    size_t n = strlen(tok);
    if (strncmp(p->s + p->pos, tok, n) != 0) return false;
    /* "<" is not the start of "<=", "!" not of "!=", "in" not of "inf"/"index" */
    char next = p->s[p->pos + n];
    if ((tok[0] == '<' || tok[0] == '>' || tok[0] == '!' || tok[0] == '=') && n == 1 && next == '=') return false;
    if (isalpha((unsigned char)tok[0]) && (isalnum((unsigned char)next) || next == '_' || next == '.')) return false;
    p->pos += n;
    return true;
}

static int af_kn_node_new(af_kn_parser *p, af_kn_op op, int a, int b) {
    if (p->e->n >= AF_KN_NODES) return af_kn_fail(p, "too long (more than 96 nodes in all clauses)");
    af_kn_node *x = &p->e->node[p->e->n];
    memset(x, 0, sizeof *x);
    x->op = (uint8_t)op;
    x->a = (int16_t)a;
    x->b = (int16_t)b;
    x->var = -1;
    return p->e->n++;
}

static int af_kn_or(af_kn_parser *p);

static int af_kn_atom(af_kn_parser *p) {
    af_kn_space(p);
    const char *s = p->s + p->pos;
    if (af_kn_eat(p, "(")) {
        int x = af_kn_or(p);
        if (x < 0) return -1;
        if (!af_kn_eat(p, ")")) return af_kn_fail(p, "expected )");
        return x;
    }
    if (af_kn_eat(p, "abs")) {
        if (!af_kn_eat(p, "(")) return af_kn_fail(p, "expected ( after abs");
        int x = af_kn_or(p);
        if (x < 0) return -1;
        if (!af_kn_eat(p, ")")) return af_kn_fail(p, "expected )");
        return af_kn_node_new(p, KN_ABS, x, -1);
    }
    if (isdigit((unsigned char)*s) || (*s == '.' && isdigit((unsigned char)s[1]))) {
        char *end;
        double v = strtod(s, &end);
        if (end == s) return af_kn_fail(p, "bad number");
        p->pos += (size_t)(end - s);
        int x = af_kn_node_new(p, KN_NUM, -1, -1);
        if (x >= 0) p->e->node[x].num = v;
        return x;
    }
    if (isalpha((unsigned char)*s) || *s == '_') {
        size_t n = 0;
        while (isalnum((unsigned char)s[n]) || s[n] == '_' || s[n] == '.') n++;
        p->pos += n;
        if ((n == 4 && !strncmp(s, "true", 4)) || (n == 5 && !strncmp(s, "false", 5)) ||
            (n == 3 && !strncmp(s, "inf", 3)) || (n == 3 && !strncmp(s, "nan", 3))) {
            int x = af_kn_node_new(p, KN_NUM, -1, -1);
            if (x >= 0) p->e->node[x].num = *s == 't' ? 1.0 : *s == 'f' ? 0.0 : *s == 'i' ? HUGE_VAL : (double)NAN;
            return x;
        }
        int var = af_kv_lookup(s, n);
        if (var < 0) { /* a name of an enum value, resolved by the comparison it is in */
            int x = af_kn_node_new(p, KN_SYM, -1, -1);
            if (x >= 0) {
                p->e->node[x].num = (double)(s - p->s);
                p->e->node[x].sym_len = (uint16_t)n;
            }
            return x;
        }
        if (af_kv_defs[var].result && !p->result_scope) {
            p->pos -= n;
            char msg[128];
            snprintf(msg, sizeof msg, "%.*s is a symptom variable (put the clause in \"symptom\")", (int)n, s);
            return af_kn_fail(p, msg);
        }
        int x = af_kn_node_new(p, KN_VAR, -1, -1);
        if (x >= 0) { /* its text kept: compared with an enum variable, it may be one of its values */
            p->e->node[x].var = (int16_t)var;
            p->e->node[x].num = (double)(s - p->s);
            p->e->node[x].sym_len = (uint16_t)n;
        }
        return x;
    }
    return af_kn_fail(p, *s ? "expected a number, a name or (" : "unexpected end");
}

static int af_kn_unary(af_kn_parser *p) {
    if (af_kn_eat(p, "-")) {
        int x = af_kn_unary(p);
        return x < 0 ? -1 : af_kn_node_new(p, KN_NEG, x, -1);
    }
    return af_kn_atom(p);
}

static int af_kn_prod(af_kn_parser *p) {
    int x = af_kn_unary(p);
    while (x >= 0) {
        af_kn_op op = af_kn_eat(p, "*") ? KN_MUL : af_kn_eat(p, "/") ? KN_DIV : af_kn_eat(p, "%") ? KN_MOD : KN_NUM;
        if (op == KN_NUM) break;
        int y = af_kn_unary(p);
        x = y < 0 ? -1 : af_kn_node_new(p, op, x, y);
    }
    return x;
}

static int af_kn_sum(af_kn_parser *p) {
    int x = af_kn_prod(p);
    while (x >= 0) {
        af_kn_op op = af_kn_eat(p, "+") ? KN_ADD : af_kn_eat(p, "-") ? KN_SUB : KN_NUM;
        if (op == KN_NUM) break;
        int y = af_kn_prod(p);
        x = y < 0 ? -1 : af_kn_node_new(p, op, x, y);
    }
    return x;
}

static int af_kn_cmp(af_kn_parser *p) {
    int x = af_kn_sum(p);
    if (x < 0) return -1;
    if (af_kn_eat(p, "in")) {
        if (!af_kn_eat(p, "[")) return af_kn_fail(p, "expected [ after in");
        int node = af_kn_node_new(p, KN_IN, x, p->e->nlist);
        if (node < 0) return -1;
        do {
            int item = af_kn_unary(p);
            if (item < 0) return -1;
            if (p->e->nlist >= AF_KN_LIST) return af_kn_fail(p, "too many list items");
            p->e->list[p->e->nlist++] = (int16_t)item;
            p->e->node[node].n++;
        } while (af_kn_eat(p, ","));
        if (!af_kn_eat(p, "]")) return af_kn_fail(p, "expected , or ]");
        return node;
    }
    static const struct {
        const char *tok;
        af_kn_op op;
    } ops[] = {{"==", KN_EQ}, {"!=", KN_NE}, {"<=", KN_LE}, {">=", KN_GE}, {"<", KN_LT}, {">", KN_GT}};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (af_kn_eat(p, ops[i].tok)) {
            int y = af_kn_sum(p);
            return y < 0 ? -1 : af_kn_node_new(p, ops[i].op, x, y);
        }
    return x;
}

static int af_kn_not(af_kn_parser *p) {
    if (af_kn_eat(p, "!")) {
        int x = af_kn_not(p);
        return x < 0 ? -1 : af_kn_node_new(p, KN_NOT, x, -1);
    }
    return af_kn_cmp(p);
}

static int af_kn_and(af_kn_parser *p) {
    int x = af_kn_not(p);
    while (x >= 0 && af_kn_eat(p, "&&")) {
        int y = af_kn_not(p);
        x = y < 0 ? -1 : af_kn_node_new(p, KN_AND, x, y);
    }
    return x;
}

static int af_kn_or(af_kn_parser *p) {
    int x = af_kn_and(p);
    while (x >= 0 && af_kn_eat(p, "||")) {
        int y = af_kn_and(p);
        x = y < 0 ? -1 : af_kn_node_new(p, KN_OR, x, y);
    }
    return x;
}

/* Resolves a name node against the enum variable it is compared with: a number, or an
 * error naming the values the variable has. */
static int af_kn_resolve_sym(af_kn_parser *p, int sym, int var) {
    af_kn_node *x = &p->e->node[sym];
    const char *name = p->s + (size_t)x->num;
    char nm[64];
    snprintf(nm, sizeof nm, "%.*s", (int)x->sym_len, name);
    if (var < 0 || af_kv_defs[var].type == AF_KV_NUM) {
        p->pos = (size_t)x->num;
        char msg[128];
        snprintf(msg, sizeof msg, "unknown name %s", nm);
        return af_kn_fail(p, msg);
    }
    const af_kv_def *d = &af_kv_defs[var];
    const char *const *names = d->type == AF_KV_BOOL ? af_kv_bool_names : d->names;
    int nn = d->type == AF_KV_BOOL ? 2 : d->nnames;
    for (int i = 0; i < nn; i++)
        if (names[i] && strlen(names[i]) == x->sym_len && !strncmp(names[i], name, x->sym_len)) {
            x->op = KN_NUM;
            x->num = i;
            return 0;
        }
    char known[400];
    size_t k = 0;
    for (int i = 0; i < nn && k < sizeof known; i++) {
        int w = snprintf(known + k, sizeof known - k, "%s%s", i ? ", " : "", names[i]);
        if (w > 0) k += (size_t)w;
    }
    p->pos = (size_t)x->num;
    char msg[500];
    snprintf(msg, sizeof msg, "%s is no value of %s (its values: %s)", nm, d->name, known);
    return af_kn_fail(p, msg);
}

/* The enum variable node x compares with, -1 when it is no plain variable. */
static int af_kn_var_of(const af_kn_expr *e, int x) { return x >= 0 && e->node[x].op == KN_VAR ? e->node[x].var : -1; }

/* A variable's name compared with an enum variable var that has a value of that name
 * ("tensor == dv": the gradient, not the head dim dv) is that value: node x becomes KN_SYM,
 * resolved against var. */
static void af_kn_enum_name(af_kn_parser *p, int x, int var) {
    af_kn_expr *e = p->e;
    if (x < 0 || var < 0 || e->node[x].op != KN_VAR || af_kv_defs[var].type != AF_KV_ENUM) return;
    const af_kv_def *d = &af_kv_defs[var];
    const char *name = p->s + (size_t)e->node[x].num;
    for (int i = 0; i < d->nnames; i++)
        if (d->names[i] && strlen(d->names[i]) == e->node[x].sym_len && !strncmp(d->names[i], name, e->node[x].sym_len))
            e->node[x].op = KN_SYM;
}

/* Resolves every name in the subtree rooted at x; checks that enum variables are only
 * compared with names. */
static int af_kn_resolve(af_kn_parser *p, int x) {
    af_kn_expr *e = p->e;
    af_kn_node *n = &e->node[x];
    switch ((af_kn_op)n->op) {
    case KN_NUM:
    case KN_VAR: return 0;
    case KN_SYM: return af_kn_resolve_sym(p, x, -1);
    case KN_EQ:
    case KN_NE: {
        int va = af_kn_var_of(e, n->a), vb = af_kn_var_of(e, n->b);
        af_kn_enum_name(p, n->a, vb);
        af_kn_enum_name(p, n->b, va);
        if (e->node[n->a].op == KN_SYM) return af_kn_resolve_sym(p, n->a, vb) || af_kn_resolve(p, n->b);
        if (e->node[n->b].op == KN_SYM) return af_kn_resolve_sym(p, n->b, va) || af_kn_resolve(p, n->a);
        break;
    }
    case KN_IN: {
        int va = af_kn_var_of(e, n->a);
        for (int i = 0; i < n->n; i++) {
            int item = e->list[n->b + i];
            af_kn_enum_name(p, item, va);
            if (e->node[item].op == KN_SYM && af_kn_resolve_sym(p, item, va)) return -1;
            if (e->node[item].op != KN_NUM && e->node[item].op != KN_NEG)
                return af_kn_fail(p, "a list holds numbers or names");
        }
        return af_kn_resolve(p, n->a);
    }
    case KN_NEG:
    case KN_NOT:
    case KN_ABS: return af_kn_resolve(p, n->a);
    case KN_ADD:
    case KN_SUB:
    case KN_MUL:
    case KN_DIV:
    case KN_MOD:
    case KN_LT:
    case KN_LE:
    case KN_GT:
    case KN_GE:
    case KN_AND:
    case KN_OR: break;
    }
    if (af_kn_resolve(p, n->a)) return -1;
    return n->b >= 0 ? af_kn_resolve(p, n->b) : 0;
}

/* Appends one clause (ANDed with those before) to e. */
static af_status af_kn_compile(af_kn_expr *e, const char *clause, bool result_scope, const char *where, af_error *err) {
    af_kn_parser p = {e, clause, 0, result_scope, err, where};
    if (strlen(clause) > AF_KN_CLAUSE) {
        af_kn_fail(&p, "clause longer than 400 characters");
        return AF_ERR_FORMAT;
    }
    int x = af_kn_or(&p);
    if (x < 0) return AF_ERR_FORMAT;
    af_kn_space(&p);
    if (clause[p.pos]) {
        af_kn_fail(&p, "unexpected text");
        return AF_ERR_FORMAT;
    }
    if (af_kn_resolve(&p, x)) return AF_ERR_FORMAT;
    if (e->root < 0) {
        e->root = x;
    } else {
        int y = af_kn_node_new(&p, KN_AND, e->root, x);
        if (y < 0) return AF_ERR_FORMAT;
        e->root = y;
    }
    return AF_OK;
}

static double af_kn_eval(const af_kn_expr *e, int x, const double *v) {
    const af_kn_node *n = &e->node[x];
    switch ((af_kn_op)n->op) {
    case KN_NUM: return n->num;
    case KN_VAR: return v[n->var];
    case KN_SYM: return (double)NAN; /* resolved at load: not reached */
    case KN_NEG: return -af_kn_eval(e, n->a, v);
    case KN_NOT: return af_kn_eval(e, n->a, v) != 0.0 ? 0.0 : 1.0;
    case KN_ABS: return fabs(af_kn_eval(e, n->a, v));
    case KN_AND: return af_kn_eval(e, n->a, v) != 0.0 && af_kn_eval(e, n->b, v) != 0.0;
    case KN_OR: return af_kn_eval(e, n->a, v) != 0.0 || af_kn_eval(e, n->b, v) != 0.0;
    case KN_IN: {
        double a = af_kn_eval(e, n->a, v);
        for (int i = 0; i < n->n; i++)
            if (af_kn_eval(e, e->list[n->b + i], v) == a) return 1.0;
        return 0.0;
    }
#define AF_KN_A af_kn_eval(e, n->a, v)
#define AF_KN_B af_kn_eval(e, n->b, v)
    case KN_ADD: return AF_KN_A + AF_KN_B;
    case KN_SUB: return AF_KN_A - AF_KN_B;
    case KN_MUL: return AF_KN_A * AF_KN_B;
    case KN_DIV: return AF_KN_A / AF_KN_B;
    case KN_MOD: return fmod(AF_KN_A, AF_KN_B);
    case KN_EQ: return AF_KN_A == AF_KN_B;
    case KN_NE: return AF_KN_A != AF_KN_B;
    case KN_LT: return AF_KN_A < AF_KN_B;
    case KN_LE: return AF_KN_A <= AF_KN_B;
    case KN_GT: return AF_KN_A > AF_KN_B;
    case KN_GE: return AF_KN_A >= AF_KN_B;
#undef AF_KN_A
#undef AF_KN_B
    }
    return (double)NAN;
}

static bool af_kn_holds(const af_kn_expr *e, const double *v) { return e->root < 0 || af_kn_eval(e, e->root, v) != 0.0; }

/* --- entries ---------------------------------------------------------------------------- */

#define AF_KN_GLOBS 8
#define AF_KN_TEXTS 8
#define AF_KN_STR 256
#define AF_KN_NEEDS 8

/* What an entry needs of the host (docs/known.md, "Scope"): every CPU flag of cpu, none of
 * cpu_not, one of the GPU architectures sm, every library version spec. */
typedef struct af_kn_needs {
    int ncpu, ncpu_not, nsm, nver;
    char cpu[AF_KN_NEEDS][32], cpu_not[AF_KN_NEEDS][32];
    long sm[AF_KN_NEEDS];
    char lib[AF_KN_NEEDS][AF_HOST_LIB_NAME_MAX], spec[AF_KN_NEEDS][64];
    char text[AF_KN_STR]; /* for listings: "cpu avx512f; versions torch <2.12" ("" none) */
} af_kn_needs;

typedef struct af_known_entry {
    char id[AF_KNOWN_ID_MAX];
    af_known_class cls;
    char title[AF_KN_STR], repro[AF_KN_STR], bundle[AF_KN_STR], issue[AF_KN_STR];
    char file[AF_KN_STR];
    char backends[AF_KN_GLOBS][128];
    int nbackends;
    uint32_t kinds;
    char message[AF_KN_TEXTS][128];
    int nmessage;
    af_kn_expr when, symptom;
    af_kn_needs needs;
} af_known_entry;

struct af_known {
    af_known_entry *e;
    size_t n, cap;
};

af_known *af_known_create(void) { return af_calloc(1, sizeof(af_known)); }

void af_known_destroy(af_known *k) {
    if (!k) return;
    af_free(k->e);
    af_free(k);
}

size_t af_known_count(const af_known *k) { return k ? k->n : 0; }

long af_known_find(const af_known *k, const char *id) {
    for (size_t i = 0; k && i < k->n; i++)
        if (!strcmp(k->e[i].id, id)) return (long)i;
    return -1;
}

void af_known_info_of(const af_known *k, size_t i, af_known_info *info) {
    const af_known_entry *e = &k->e[i];
    info->id = e->id;
    info->title = e->title;
    info->file = e->file;
    info->repro = e->repro;
    info->bundle = e->bundle;
    info->issue = e->issue;
    info->cls = e->cls;
    info->kinds = e->kinds;
    info->needs = e->needs.text;
}

/* A string member, or a list of strings (a string alone counts as a list of one). */
static int af_kn_strings(const cJSON *x, const char **out, int max) {
    if (cJSON_IsString(x)) {
        out[0] = x->valuestring;
        return 1;
    }
    if (!cJSON_IsArray(x)) return -1;
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, x) {
        if (!cJSON_IsString(it) || n >= max) return -1;
        out[n++] = it->valuestring;
    }
    return n;
}

static af_status af_kn_copy(char *dst, size_t cap, const cJSON *x, const char *where, const char *field,
                            af_error *err) {
    AF_RETURN_ERROR_IF(!cJSON_IsString(x), err, AF_ERR_FORMAT, "%s: %s must be a string", where, field);
    AF_RETURN_ERROR_IF(strlen(x->valuestring) >= cap, err, AF_ERR_FORMAT, "%s: %s is longer than %zu characters", where,
                       field, cap - 1);
    snprintf(dst, cap, "%s", x->valuestring);
    return AF_OK;
}

/* Appends text to needs->text ("; " between groups, cut where it does not fit). */
static void af_kn_needs_text(af_kn_needs *nd, const char *text) {
    size_t n = strlen(nd->text);
    snprintf(nd->text + n, sizeof nd->text - n, "%s%s", n ? "; " : "", text);
}

/* A list of names of [a-z0-9_] (CPU flags as /proc/cpuinfo spells them) into out. */
static af_status af_kn_flag_list(const cJSON *x, char out[AF_KN_NEEDS][32], int *n, const char *where,
                                 const char *key, af_error *err) {
    AF_RETURN_ERROR_IF(!cJSON_IsArray(x), err, AF_ERR_FORMAT,
                       "%s: needs.%s must be a list of CPU flag names as /proc/cpuinfo spells them (e.g. [\"avx512f\"])",
                       where, key);
    const cJSON *it;
    *n = 0;
    cJSON_ArrayForEach(it, x) {
        AF_RETURN_ERROR_IF(*n >= AF_KN_NEEDS, err, AF_ERR_FORMAT, "%s: needs.%s holds more than %d flags", where, key,
                           AF_KN_NEEDS);
        const char *f = cJSON_IsString(it) ? it->valuestring : NULL;
        bool ok = f && f[0] && strlen(f) < sizeof out[0];
        for (const char *c = f; ok && *c; c++)
            ok = islower((unsigned char)*c) || isdigit((unsigned char)*c) || *c == '_';
        AF_RETURN_ERROR_IF(!ok, err, AF_ERR_FORMAT, "%s: needs.%s: %s%.40s%s is no CPU flag name (a-z, 0-9, _)", where,
                           key, f ? "\"" : "", f ? f : "a non-string", f ? "\"" : "");
        snprintf(out[(*n)++], sizeof out[0], "%s", f);
    }
    return AF_OK;
}

static af_status af_kn_needs_parse(af_kn_needs *nd, const cJSON *x, const char *where, af_error *err) {
    AF_RETURN_ERROR_IF(!cJSON_IsObject(x), err, AF_ERR_FORMAT,
                       "%s: \"needs\" must be an object (of cpu, cpu_not, sm, versions)", where);
    const cJSON *it;
    char buf[AF_KN_STR];
    cJSON_ArrayForEach(it, x) {
        const char *key = it->string;
        if (!strcmp(key, "cpu") || !strcmp(key, "cpu_not")) {
            bool not = key[3] == '_';
            int *n = not ? &nd->ncpu_not : &nd->ncpu;
            AF_TRY(af_kn_flag_list(it, not ? nd->cpu_not : nd->cpu, n, where, key, err));
            size_t w = (size_t)snprintf(buf, sizeof buf, "%s", key);
            for (int i = 0; i < *n && w < sizeof buf; i++)
                w += (size_t)snprintf(buf + w, sizeof buf - w, " %s", not ? nd->cpu_not[i] : nd->cpu[i]);
            if (*n) af_kn_needs_text(nd, buf);
        } else if (!strcmp(key, "sm")) {
            AF_RETURN_ERROR_IF(!cJSON_IsArray(it), err, AF_ERR_FORMAT,
                               "%s: needs.sm must be a list of GPU compute capabilities as integers (80, 90, 100)",
                               where);
            const cJSON *v;
            size_t w = (size_t)snprintf(buf, sizeof buf, "sm");
            cJSON_ArrayForEach(v, it) {
                AF_RETURN_ERROR_IF(nd->nsm >= AF_KN_NEEDS, err, AF_ERR_FORMAT, "%s: needs.sm holds more than %d", where,
                                   AF_KN_NEEDS);
                bool ok = cJSON_IsNumber(v) && v->valuedouble >= 10.0 && v->valuedouble <= 999.0 &&
                          v->valuedouble == (double)(long)v->valuedouble;
                AF_RETURN_ERROR_IF(!ok, err, AF_ERR_FORMAT,
                                   "%s: needs.sm: a compute capability is an integer from 10 to 999 (80, 90, 100)",
                                   where);
                nd->sm[nd->nsm++] = (long)v->valuedouble;
                if (w < sizeof buf) w += (size_t)snprintf(buf + w, sizeof buf - w, "%s%ld", nd->nsm > 1 ? "|" : " ",
                                                          nd->sm[nd->nsm - 1]);
            }
            if (nd->nsm) af_kn_needs_text(nd, buf);
        } else if (!strcmp(key, "versions")) {
            AF_RETURN_ERROR_IF(!cJSON_IsObject(it), err, AF_ERR_FORMAT,
                               "%s: needs.versions must be an object of NAME: \"specifier\" (e.g. {\"torch\": "
                               "\">=2.11,<2.13\"})",
                               where);
            const cJSON *v;
            cJSON_ArrayForEach(v, it) {
                AF_RETURN_ERROR_IF(nd->nver >= AF_KN_NEEDS, err, AF_ERR_FORMAT, "%s: needs.versions holds more than %d",
                                   where, AF_KN_NEEDS);
                bool ok = v->string[0] && strlen(v->string) < sizeof nd->lib[0];
                for (const char *c = v->string; ok && *c; c++)
                    ok = islower((unsigned char)*c) || isdigit((unsigned char)*c) || strchr("_.-", *c);
                AF_RETURN_ERROR_IF(!ok, err, AF_ERR_FORMAT,
                                   "%s: needs.versions: \"%.40s\" is no stack or library name (a-z, 0-9, _ . -)",
                                   where, v->string);
                AF_RETURN_ERROR_IF(!cJSON_IsString(v) || strlen(v->valuestring) >= sizeof nd->spec[0], err,
                                   AF_ERR_FORMAT, "%s: needs.versions.%s must be a version specifier (\">=2.11,<2.13\")",
                                   where, v->string);
                if (af_host_spec_check(v->valuestring, err) != AF_OK) {
                    af_error_prefix(err, "%s: needs.versions.%s", where, v->string);
                    return AF_ERR_FORMAT;
                }
                snprintf(nd->lib[nd->nver], sizeof nd->lib[0], "%s", v->string);
                snprintf(nd->spec[nd->nver], sizeof nd->spec[0], "%s", v->valuestring);
                nd->nver++;
                snprintf(buf, sizeof buf, "%s %s", v->string, v->valuestring);
                af_kn_needs_text(nd, buf);
            }
        } else {
            return af_error_set(err, AF_ERR_FORMAT, "%s: needs: unknown key \"%s\" (known: cpu, cpu_not, sm, versions)",
                                where, key);
        }
    }
    return AF_OK;
}

static af_status af_kn_entry(af_known_entry *e, const cJSON *j, const char *file, size_t idx, af_error *err) {
    char where[AF_KN_STR + 120];
    snprintf(where, sizeof where, "%s: entries[%zu]", file, idx);
    AF_RETURN_ERROR_IF(!cJSON_IsObject(j), err, AF_ERR_FORMAT, "%s: an entry must be an object", where);
    memset(e, 0, sizeof *e);
    e->when.root = e->symptom.root = -1;
    snprintf(e->file, sizeof e->file, "%s", file);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
    AF_RETURN_ERROR_IF(!id, err, AF_ERR_FORMAT, "%s: no \"id\"", where);
    AF_TRY(af_kn_copy(e->id, sizeof e->id, id, where, "id", err));
    for (const char *c = e->id; *c; c++)
        AF_RETURN_ERROR_IF(!(islower((unsigned char)*c) || isdigit((unsigned char)*c) || *c == '-'), err, AF_ERR_FORMAT,
                           "%s: id \"%s\" may hold only a-z, 0-9 and -", where, e->id);
    AF_RETURN_ERROR_IF(!e->id[0], err, AF_ERR_FORMAT, "%s: empty id", where);
    snprintf(where, sizeof where, "%s: entry %s", file, e->id);
    static const char *const fields[] = {"id",      "class", "title",  "backends", "kinds", "when", "symptom",
                                         "message", "needs", "repro", "bundle",   "issue", "note"};
    const cJSON *it;
    cJSON_ArrayForEach(it, j) {
        bool ok = false;
        for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) ok |= !strcmp(it->string, fields[f]);
        AF_RETURN_ERROR_IF(!ok, err, AF_ERR_FORMAT,
                           "%s: unknown field \"%s\" (known: id, class, title, backends, kinds, when, symptom, message, "
                           "needs, repro, bundle, issue, note)",
                           where, it->string);
    }
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(j, "class");
    AF_RETURN_ERROR_IF(!cJSON_IsString(cls), err, AF_ERR_FORMAT, "%s: \"class\" must be real_bug, convention or precision",
                       where);
    int ci = 0;
    while (ci < AF_KNOWN_CLASS_COUNT && strcmp(cls->valuestring, af_known_class_names[ci])) ci++;
    AF_RETURN_ERROR_IF(ci == AF_KNOWN_CLASS_COUNT, err, AF_ERR_FORMAT,
                       "%s: class \"%s\" is none of real_bug, convention, precision", where, cls->valuestring);
    e->cls = (af_known_class)ci;
    const char *strs[AF_KN_TEXTS > AF_KN_GLOBS ? AF_KN_TEXTS : AF_KN_GLOBS];
    const cJSON *be = cJSON_GetObjectItemCaseSensitive(j, "backends");
    e->nbackends = be ? af_kn_strings(be, strs, AF_KN_GLOBS) : 0;
    AF_RETURN_ERROR_IF(e->nbackends <= 0, err, AF_ERR_FORMAT,
                       "%s: \"backends\" must be a non-empty list of at most %d names or globs", where, AF_KN_GLOBS);
    for (int i = 0; i < e->nbackends; i++) {
        AF_RETURN_ERROR_IF(strlen(strs[i]) >= sizeof e->backends[0] || !strs[i][0], err, AF_ERR_FORMAT,
                           "%s: backend \"%.40s\" is empty or too long", where, strs[i]);
        snprintf(e->backends[i], sizeof e->backends[i], "%s", strs[i]);
    }
    const cJSON *kinds = cJSON_GetObjectItemCaseSensitive(j, "kinds");
    AF_RETURN_ERROR_IF(!cJSON_IsArray(kinds), err, AF_ERR_FORMAT,
                       "%s: \"kinds\" must be a list of finding kinds ([] for an entry that documents only)", where);
    cJSON_ArrayForEach(it, kinds) {
        int kd = cJSON_IsString(it) ? af_kind_from_name(it->valuestring) : -1;
        AF_RETURN_ERROR_IF(kd <= 0, err, AF_ERR_FORMAT, "%s: kinds: \"%s\" is no finding kind", where,
                           cJSON_IsString(it) ? it->valuestring : "?");
        e->kinds |= 1u << kd;
    }
    static const char *const exprs[2] = {"when", "symptom"};
    for (int x = 0; x < 2; x++) {
        const cJSON *ex = cJSON_GetObjectItemCaseSensitive(j, exprs[x]);
        if (!ex) continue;
        const char *clauses[16];
        int n = af_kn_strings(ex, clauses, 16);
        AF_RETURN_ERROR_IF(n < 0, err, AF_ERR_FORMAT, "%s: \"%s\" must be a clause or a list of at most 16", where,
                           exprs[x]);
        char w[sizeof where + 16];
        snprintf(w, sizeof w, "%s: %s", where, exprs[x]);
        for (int i = 0; i < n; i++) AF_TRY(af_kn_compile(x ? &e->symptom : &e->when, clauses[i], x == 1, w, err));
    }
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(j, "message");
    if (msg) {
        e->nmessage = af_kn_strings(msg, strs, AF_KN_TEXTS);
        AF_RETURN_ERROR_IF(e->nmessage < 0, err, AF_ERR_FORMAT, "%s: \"message\" must be a text or a list of at most %d",
                           where, AF_KN_TEXTS);
        for (int i = 0; i < e->nmessage; i++) {
            AF_RETURN_ERROR_IF(strlen(strs[i]) >= sizeof e->message[0] || !strs[i][0], err, AF_ERR_FORMAT,
                               "%s: message \"%.40s\" is empty or too long", where, strs[i]);
            snprintf(e->message[i], sizeof e->message[i], "%s", strs[i]);
        }
    }
    const cJSON *needs = cJSON_GetObjectItemCaseSensitive(j, "needs");
    if (needs) AF_TRY(af_kn_needs_parse(&e->needs, needs, where, err));
    static const char *const texts[3] = {"title", "repro", "issue"};
    char *dst[3] = {e->title, e->repro, e->issue};
    for (int t = 0; t < 3; t++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, texts[t]);
        if (x) AF_TRY(af_kn_copy(dst[t], AF_KN_STR, x, where, texts[t], err));
    }
    /* bundle: one path or a list (an entry whose triage named several); the first is shown */
    const cJSON *bun = cJSON_GetObjectItemCaseSensitive(j, "bundle");
    if (bun) {
        const char *paths[16];
        int n = af_kn_strings(bun, paths, 16);
        AF_RETURN_ERROR_IF(n < 0, err, AF_ERR_FORMAT, "%s: \"bundle\" must be a path or a list of at most 16", where);
        for (int i = 0; i < n; i++)
            AF_RETURN_ERROR_IF(strlen(paths[i]) >= AF_KN_STR, err, AF_ERR_FORMAT, "%s: bundle path too long", where);
        if (n) snprintf(e->bundle, sizeof e->bundle, "%s", paths[0]);
    }
    const cJSON *note = cJSON_GetObjectItemCaseSensitive(j, "note");
    AF_RETURN_ERROR_IF(note && !cJSON_IsString(note), err, AF_ERR_FORMAT, "%s: note must be a string", where);
    return AF_OK;
}

af_status af_known_load_text(af_known *k, const char *text, size_t len, const char *name, af_error *err) {
    cJSON *j = cJSON_ParseWithLength(text, len);
    AF_RETURN_ERROR_IF(!j, err, AF_ERR_FORMAT, "%s: not JSON (near byte %zu)", name,
                       cJSON_GetErrorPtr() && cJSON_GetErrorPtr() >= text ? (size_t)(cJSON_GetErrorPtr() - text) : 0);
    af_status st = AF_OK;
    size_t n0 = k->n;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format"), *ver = cJSON_GetObjectItemCaseSensitive(j, "version");
    const cJSON *entries = cJSON_GetObjectItemCaseSensitive(j, "entries"), *it;
    if (!cJSON_IsObject(j) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "attnfuzz-known") ||
        !cJSON_IsNumber(ver) || ver->valuedouble != 1.0) {
        st = af_error_set(err, AF_ERR_FORMAT, "%s: not an attnfuzz-known file of version 1 (\"format\": "
                                              "\"attnfuzz-known\", \"version\": 1)", name);
        goto done;
    }
    cJSON_ArrayForEach(it, j) {
        if (strcmp(it->string, "format") && strcmp(it->string, "version") && strcmp(it->string, "entries") &&
            strcmp(it->string, "note")) {
            st = af_error_set(err, AF_ERR_FORMAT, "%s: unknown field \"%s\" (known: format, version, entries, note)",
                              name, it->string);
            goto done;
        }
    }
    if (!cJSON_IsArray(entries)) {
        st = af_error_set(err, AF_ERR_FORMAT, "%s: \"entries\" must be a list", name);
        goto done;
    }
    size_t idx = 0;
    cJSON_ArrayForEach(it, entries) {
        if (k->n >= AF_KNOWN_ENTRIES_MAX) {
            st = af_error_set(err, AF_ERR_FORMAT, "%s: more than %d entries in all", name, AF_KNOWN_ENTRIES_MAX);
            goto done;
        }
        if (k->n == k->cap) {
            size_t cap = k->cap ? 2 * k->cap : 32;
            af_known_entry *e = af_calloc(cap, sizeof *e);
            if (!e) {
                st = af_error_set(err, AF_ERR_NOMEM, "out of memory");
                goto done;
            }
            if (k->e) memcpy(e, k->e, k->n * sizeof *e);
            af_free(k->e);
            k->e = e;
            k->cap = cap;
        }
        af_known_entry *e = &k->e[k->n];
        if ((st = af_kn_entry(e, it, name, idx++, err)) != AF_OK) goto done;
        long dup = af_known_find(k, e->id);
        if (dup >= 0) {
            st = af_error_set(err, AF_ERR_FORMAT, "%s: id %s is also in %s", name, e->id, k->e[dup].file);
            goto done;
        }
        k->n++;
    }
done:
    if (st != AF_OK) k->n = n0; /* nothing of a bad file */
    cJSON_Delete(j);
    return st;
}

af_status af_known_load(af_known *k, const char *path, af_error *err) {
    char *text = NULL;
    size_t len = 0;
    AF_TRY(af_file_read(path, AF_KNOWN_FILE_MAX, &text, &len, err));
    af_status st = af_known_load_text(k, text, len, path, err);
    af_free(text);
    return st;
}

af_status af_known_load_root(af_known *k, const char *root, size_t *files, af_error *err) {
    char pattern[4200];
    snprintf(pattern, sizeof pattern, "%s/corpus/findings/*/known.json", root);
    glob_t g;
    if (files) *files = 0;
    int rc = glob(pattern, 0, NULL, &g);
    if (rc == GLOB_NOMATCH) return AF_OK;
    AF_RETURN_ERROR_IF(rc != 0, err, AF_ERR_IO, "%s: cannot list the known.json files", pattern);
    af_status st = AF_OK;
    for (size_t i = 0; i < g.gl_pathc && st == AF_OK; i++) {
        st = af_known_load(k, g.gl_pathv[i], err);
        if (st == AF_OK && files) (*files)++;
    }
    globfree(&g);
    return st;
}

/* Does dir hold corpus/findings/? */
static bool af_kn_has_findings(const char *dir) {
    char path[AF_PROC_PATH_MAX + 32];
    struct stat sb;
    snprintf(path, sizeof path, "%s/corpus/findings", dir);
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

af_status af_known_locate(char *dir, size_t len, af_error *err) {
    char root[AF_PROC_PATH_MAX], src[AF_PROC_PATH_MAX];
    /* installed from the wheel: the package holds the repository's known.json files (and
     * its Python the targets: a checkout around the current directory is another version) */
    if (af_proc_package(root, sizeof root, NULL) == AF_OK) {
        AF_RETURN_ERROR_IF(!af_kn_has_findings(root), err, AF_ERR_IO, "no corpus/findings/*/known.json in the package %.300s",
                           root);
    } else {
        /* the project root (from the executable's directory, the current one, else the
         * source root recorded at configure time); the source root as well when that root
         * holds no corpus/findings */
        bool have = af_proc_root(root, sizeof root, NULL) == AF_OK;
        if (!(have && af_kn_has_findings(root))) {
            bool s = af_proc_source_root(src, sizeof src, NULL) == AF_OK && af_kn_has_findings(src);
            const char *rec = af_proc_source_recorded();
            if (!s && have)
                return af_error_set(err, AF_ERR_IO, "no corpus/findings/*/known.json under %.300s or the source root %.300s",
                                    root, rec[0] ? rec : "(none recorded)");
            AF_RETURN_ERROR_IF(!s, err, AF_ERR_IO,
                               "no corpus/findings/*/known.json: no project root above the executable or the current "
                               "directory, and the source root %.300s%s",
                               rec[0] ? rec : "(none recorded)", rec[0] ? " is gone or holds none" : "");
            snprintf(root, sizeof root, "%s", src);
        }
    }
    AF_RETURN_ERROR_IF(strlen(root) >= len, err, AF_ERR_INVALID, "%.64s...: path too long", root);
    snprintf(dir, len, "%s", root);
    return AF_OK;
}

af_status af_known_load_repo(af_known *k, size_t *files, af_error *err) {
    char root[AF_PROC_PATH_MAX];
    if (files) *files = 0;
    if (af_known_locate(root, sizeof root, NULL) != AF_OK) return AF_OK;
    return af_known_load_root(k, root, files, err);
}

/* --- matching ------------------------------------------------------------------------ */

static bool af_kn_glob(const af_known_entry *e, const char *name, size_t len) {
    char buf[AF_BACKEND_NAME_MAX];
    if (len >= sizeof buf) return false;
    memcpy(buf, name, len);
    buf[len] = 0;
    for (int i = 0; i < e->nbackends; i++)
        if (fnmatch(e->backends[i], buf, 0) == 0) return true;
    return false;
}

bool af_known_applies(const af_known *k, size_t i, const char *backend) {
    return af_kn_glob(&k->e[i], backend, strlen(backend));
}

/* Does the entry name a backend of who: "B", either side of "A,B", the B of "R@B"? */
static bool af_kn_who(const af_known_entry *e, const char *who) {
    const char *at = strchr(who, '@');
    if (at) return af_kn_glob(e, at + 1, strlen(at + 1));
    if (af_kn_glob(e, who, strlen(who))) return true;
    const char *comma = strchr(who, ',');
    return comma && (af_kn_glob(e, who, (size_t)(comma - who)) || af_kn_glob(e, comma + 1, strlen(comma + 1)));
}

bool af_known_when(const af_known *k, size_t i, const af_known_vars *vars) { return af_kn_holds(&k->e[i].when, vars->v); }

/* --- scope ------------------------------------------------------------------------------ */

/* Appends "; " and text to why (a reason list), cut where it does not fit. */
static void af_kn_why(char *why, size_t len, size_t *n, const char *text) {
    if (!why || *n >= len) return;
    int w = snprintf(why + *n, len - *n, "%s%s", *n ? "; " : "", text);
    if (w > 0) *n += (size_t)w;
    if (*n >= len) *n = len - 1;
}

static af_known_scope af_kn_scope(const af_kn_needs *nd, const af_known_host *h, char *why, size_t len) {
    if (why && len) why[0] = 0;
    if (!nd->ncpu && !nd->ncpu_not && !nd->nsm && !nd->nver) return AF_KNOWN_SCOPE_IN;
    const char *cpu = h && h->cpu ? h->cpu : af_host_cpu_flags();
    const af_host_libs *libs = h ? h->libs : NULL;
    char out[AF_KN_STR * 2] = "", unk[AF_KN_STR * 2] = "", buf[AF_KN_STR];
    size_t no = 0, nu = 0;
    /* CPU flags: the missing ones in one reason ("needs avx512f, avx512bw") */
    size_t w = (size_t)snprintf(buf, sizeof buf, "needs");
    int miss = 0;
    for (int i = 0; i < nd->ncpu; i++)
        if (!cpu || !af_host_has_flag(cpu, nd->cpu[i])) {
            if (w < sizeof buf) w += (size_t)snprintf(buf + w, sizeof buf - w, "%s %s", miss ? "," : "", nd->cpu[i]);
            miss++;
        }
    if (miss && w < sizeof buf) snprintf(buf + w, sizeof buf - w, "%s", cpu ? "" : ", unknown (no CPU flags)");
    if (miss) af_kn_why(cpu ? out : unk, sizeof out, cpu ? &no : &nu, buf);
    w = (size_t)snprintf(buf, sizeof buf, "needs no");
    miss = 0;
    for (int i = 0; i < nd->ncpu_not; i++)
        if (!cpu || af_host_has_flag(cpu, nd->cpu_not[i])) {
            if (w < sizeof buf) w += (size_t)snprintf(buf + w, sizeof buf - w, "%s %s", miss ? "," : "", nd->cpu_not[i]);
            miss++;
        }
    if (miss && w < sizeof buf) snprintf(buf + w, sizeof buf - w, "%s", cpu ? "" : ", unknown (no CPU flags)");
    if (miss) af_kn_why(cpu ? out : unk, sizeof out, cpu ? &no : &nu, buf);
    /* the GPU: libs "sm", "90" (or "9.0") */
    if (nd->nsm) {
        const char *have = af_host_lib(libs, "sm");
        w = (size_t)snprintf(buf, sizeof buf, "needs sm");
        for (int i = 0; i < nd->nsm && w < sizeof buf; i++)
            w += (size_t)snprintf(buf + w, sizeof buf - w, "%s%ld", i ? "|" : " ", nd->sm[i]);
        long sm = -1;
        if (have) {
            char *end;
            double d = strtod(have, &end);
            if (end != have && !*end && d > 0.0 && d < 1000.0) sm = strchr(have, '.') ? lround(d * 10.0) : lround(d);
        }
        bool ok = false;
        for (int i = 0; i < nd->nsm; i++) ok |= sm == nd->sm[i];
        if (sm < 0) {
            if (w < sizeof buf) snprintf(buf + w, sizeof buf - w, ", unknown");
            af_kn_why(unk, sizeof unk, &nu, buf);
        } else if (!ok) {
            if (w < sizeof buf) snprintf(buf + w, sizeof buf - w, ", have %s", have);
            af_kn_why(out, sizeof out, &no, buf);
        }
    }
    for (int i = 0; i < nd->nver; i++) {
        const char *have = af_host_lib(libs, nd->lib[i]);
        if (have && af_host_spec_holds(nd->spec[i], have)) continue;
        snprintf(buf, sizeof buf, "needs %s %s, %s%s", nd->lib[i], nd->spec[i], have ? "have " : "unknown",
                 have ? have : "");
        af_kn_why(have ? out : unk, sizeof out, have ? &no : &nu, buf);
    }
    if (no) {
        if (why && len) snprintf(why, len, "%s", out);
        return AF_KNOWN_SCOPE_OUT;
    }
    if (nu) {
        if (why && len) snprintf(why, len, "%s", unk);
        return AF_KNOWN_SCOPE_UNKNOWN;
    }
    return AF_KNOWN_SCOPE_IN;
}

af_known_scope af_known_scope_of(const af_known *k, size_t i, const af_known_host *h, char *why, size_t len) {
    return af_kn_scope(&k->e[i].needs, h, why, len);
}

long af_known_match(const af_known *k, const af_known_finding *f) {
    if (!k || !k->n || f->kind <= AF_KIND_OK || f->kind >= AF_KIND_COUNT) return -1;
    af_known_vars vars;
    bool have = false;
    for (size_t i = 0; i < k->n; i++) {
        const af_known_entry *e = &k->e[i];
        if (!(e->kinds >> f->kind & 1u) || !af_kn_who(e, f->who)) continue;
        if (e->symptom.root >= 0 && !f->result) continue;
        if (!have) {
            af_known_vars_of_case(&vars, f->c);
            if (f->result) af_known_vars_of_result(&vars, f->kind, f->result, f->tensor);
            have = true;
        }
        if (!af_kn_holds(&e->when, vars.v) || !af_kn_holds(&e->symptom, vars.v)) continue;
        bool said = e->nmessage == 0;
        for (int m = 0; m < e->nmessage && !said; m++)
            said = (f->message && strstr(f->message, e->message[m])) ||
                   (f->stderr_tail && strstr(f->stderr_tail, e->message[m]));
        /* an entry out of scope on this host never matches: the finding is new here (a fact
         * the host does not report counts as met) */
        if (said && !f->any_scope && af_kn_scope(&e->needs, f->host, NULL, 0) == AF_KNOWN_SCOPE_OUT) said = false;
        if (said) return (long)i;
    }
    return -1;
}
