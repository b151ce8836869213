/* gen_seeds.c - writes the seed corpus (corpus/seeds/): one small case per corner the
 * fuzzer must reach - every layout, each dtype and TF32, each mask kind (additive in
 * each dtype, boolean, causal with each diagonal preset, key padding, sliding window),
 * dropout, GQA, Sq != Sk, D != Dv, scale placements, softcap, strides, special values -
 * as af_case_encode bytes (trailing zeros dropped). Every seed must run clean on the
 * built-in checks (explicit,fused and the relations): ctest checks that.
 *
 *   attnfuzz_gen_seeds DIR     (re)writes DIR/NN-name.bin */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "attnfuzz/case.h"
#include "case_mutator.h"

typedef void (*af_seed_fn)(af_case *c);

/* The base: 1 batch row, 2 heads, 16 x 16 positions, head dim 16, f32, BHSD. */
static void af_seed_base(af_case *c, uint32_t seed) {
    af_case_default(c);
    c->q_heads = c->kv_heads = 2;
    c->q_len = c->kv_len = 16;
    c->head_dim = c->v_head_dim = 16;
    for (int t = 0; t < AF_QKV_COUNT; t++) c->t[t].seed = seed * 3u + (uint32_t)t + 1u;
}

static void af_seed_layout(af_case *c, af_layout l) {
    for (int t = 0; t < AF_QKV_COUNT; t++) c->t[t].layout = l;
}

static void af_seed_mask(af_mask_spec *m, af_dtype dt, af_mask_pattern p, uint8_t density, uint8_t dims) {
    m->present = true;
    m->dtype = dt;
    m->pattern = p;
    m->density = density;
    m->dims = dims;
    m->seed = 77;
}

static void s_bhsd(af_case *c) { (void)c; }
static void s_bshd(af_case *c) { af_seed_layout(c, AF_LAYOUT_BSHD); }
static void s_sbhd(af_case *c) { af_seed_layout(c, AF_LAYOUT_SBHD); }
static void s_bsd(af_case *c) { af_seed_layout(c, AF_LAYOUT_BSD); }
static void s_channels_first(af_case *c) { af_seed_layout(c, AF_LAYOUT_CHANNELS_FIRST); }
static void s_mixed_layouts(af_case *c) {
    c->t[AF_Q].layout = AF_LAYOUT_BSHD;
    c->t[AF_K].layout = AF_LAYOUT_BHSD;
    c->t[AF_V].layout = AF_LAYOUT_SBHD;
}
static void s_qkv_bs3hd(af_case *c) { af_seed_layout(c, AF_LAYOUT_QKV_BS3HD); }
static void s_qkv_bsh3d(af_case *c) { af_seed_layout(c, AF_LAYOUT_QKV_BSH3D); }
static void s_qkv_channels_first(af_case *c) { af_seed_layout(c, AF_LAYOUT_QKV_CHANNELS_FIRST); }
static void s_f16(af_case *c) { c->dtype = AF_F16; }
static void s_bf16(af_case *c) { c->dtype = AF_BF16; }
static void s_f32_tf32(af_case *c) { c->allow_tf32 = true; }
static void s_f16_packed_cf(af_case *c) {
    c->dtype = AF_F16;
    af_seed_layout(c, AF_LAYOUT_QKV_CHANNELS_FIRST);
    for (int t = 0; t < AF_QKV_COUNT; t++) c->t[t].mag_q4 = 4; /* |x| ~ 10 */
}
static void s_additive_f32(af_case *c) { af_seed_mask(&c->amask, AF_F32, AF_MASK_RANDOM, 64, AF_MDIM_ALL); }
static void s_additive_f16_lowest(af_case *c) {
    c->dtype = AF_F16;
    af_seed_mask(&c->amask, AF_F16, AF_MASK_KEY_COLS, 48, AF_MDIM_Q | AF_MDIM_K);
    c->amask.fill = AF_FILL_LOWEST;
    c->amask.rank2 = true;
}
static void s_additive_bf16_values(af_case *c) {
    c->dtype = AF_BF16;
    af_seed_mask(&c->amask, AF_BF16, AF_MASK_NONE, 0, AF_MDIM_B | AF_MDIM_K);
    c->amask.mag_q4 = 0;
}
static void s_additive_f32_on_f16(af_case *c) { /* mask dtype differs from the case's */
    c->dtype = AF_F16;
    af_seed_mask(&c->amask, AF_F32, AF_MASK_BLOCK_DIAG, 3, AF_MDIM_Q | AF_MDIM_K);
    c->amask.fill = AF_FILL_NEG_LARGE;
}
static void s_boolean(af_case *c) { af_seed_mask(&c->bmask, AF_BOOL, AF_MASK_BLOCK_DIAG, 4, AF_MDIM_ALL); }
static void s_boolean_full_rows(af_case *c) {
    af_seed_mask(&c->bmask, AF_BOOL, AF_MASK_FULL_ROWS, 64, AF_MDIM_H | AF_MDIM_Q | AF_MDIM_K);
    c->bmask.expanded = true;
}
static void s_causal_top_left(af_case *c) {
    c->causal = true;
    c->diag = AF_DIAG_TOP_LEFT;
    c->q_len = 8;
    c->kv_len = 24;
}
static void s_causal_bottom_right(af_case *c) {
    c->causal = true;
    c->diag = AF_DIAG_BOTTOM_RIGHT;
    c->q_len = 8;
    c->kv_len = 24;
}
static void s_causal_bottom_right_valid(af_case *c) {
    c->batch = 2;
    c->causal = true;
    c->diag = AF_DIAG_BOTTOM_RIGHT_VALID;
    c->key_padding = true;
    c->q_len = 4;
    c->kv_len = 20;
    c->kv_valid[0] = 12;
    c->kv_valid[1] = 20;
}
static void s_causal_explicit(af_case *c) {
    c->causal = true;
    c->diag = AF_DIAG_EXPLICIT;
    c->diag_offset = 5;
    c->q_len = 6;
    c->kv_len = 11;
}
static void s_key_padding(af_case *c) {
    c->batch = 3;
    c->key_padding = true;
    c->kv_valid[0] = 16;
    c->kv_valid[1] = 7;
    c->kv_valid[2] = 1;
}
static void s_window_causal(af_case *c) {
    c->causal = true;
    c->window_left = 4;
    c->window_right = 0;
}
static void s_window_both(af_case *c) {
    c->window_left = 3;
    c->window_right = 2;
    c->q_len = 12;
    c->kv_len = 20;
    c->diag = AF_DIAG_BOTTOM_RIGHT;
}
static void s_dropout(af_case *c) {
    c->dropout_p = 0.5;
    c->dropout_seed = 1234567;
}
static void s_dropout_all(af_case *c) {
    c->dropout_p = 1.0;
    c->dropout_seed = 42;
}
static void s_gqa(af_case *c) {
    c->kv_heads = 2;
    c->q_heads = 8;
}
static void s_gqa_bshd_cross(af_case *c) {
    c->kv_heads = 1;
    c->q_heads = 4;
    c->q_len = 5;
    c->kv_len = 33;
    af_seed_layout(c, AF_LAYOUT_BSHD);
}
static void s_cross(af_case *c) {
    c->q_len = 1;
    c->kv_len = 64;
}
static void s_dv(af_case *c) {
    c->head_dim = 24;
    c->v_head_dim = 8;
}
static void s_scale_sqrt_qk(af_case *c) {
    c->scale_set = true;
    c->scale = 0.125;
    c->placement = AF_PLACE_SQRT_QK;
}
static void s_scale_on_q_large(af_case *c) {
    c->scale_set = true;
    c->scale = 4.0;
    c->placement = AF_PLACE_Q;
}
static void s_softcap(af_case *c) {
    c->softcap = 50.0;
    c->scale_set = true;
    c->scale = 8.0;
}
static void s_strided(af_case *c) {
    c->t[AF_Q].perm = 5;
    c->t[AF_K].pad = 3;
    c->t[AF_V].bcast = AF_BCAST_HEADS;
    c->t[AF_K].bcast = AF_BCAST_BATCH;
    c->batch = 2;
}
static void s_nan_masked(af_case *c) {
    c->key_padding = true;
    c->kv_valid[0] = 10;
    c->t[AF_V].special = AF_SPECIAL_NAN_MASKED;
    c->t[AF_K].special = AF_SPECIAL_INF_MASKED;
}
static void s_values(af_case *c) {
    c->t[AF_Q].dist = AF_DIST_SMALL_INT;
    c->t[AF_K].dist = AF_DIST_ONE_HOT;
    c->t[AF_V].dist = AF_DIST_UNIFORM;
    c->t[AF_V].mag_q4 = 12;
}
static void s_awkward_len(af_case *c) {
    c->q_heads = c->kv_heads = 1;
    c->q_len = c->kv_len = 143;
    c->head_dim = c->v_head_dim = 8;
}
static void s_tile_edge(af_case *c) {
    c->q_len = 65;
    c->kv_len = 129;
    c->head_dim = c->v_head_dim = 21;
    c->causal = true;
    c->diag = AF_DIAG_BOTTOM_RIGHT;
}

static const struct {
    const char *name;
    af_seed_fn fn;
} af_seeds[] = {
    {"bhsd", s_bhsd},
    {"bshd", s_bshd},
    {"sbhd", s_sbhd},
    {"bsd", s_bsd},
    {"channels_first", s_channels_first},
    {"mixed_layouts", s_mixed_layouts},
    {"qkv_bs3hd", s_qkv_bs3hd},
    {"qkv_bsh3d", s_qkv_bsh3d},
    {"qkv_channels_first", s_qkv_channels_first},
    {"f16", s_f16},
    {"bf16", s_bf16},
    {"f32_tf32", s_f32_tf32},
    {"f16_qkv_channels_first", s_f16_packed_cf},
    {"additive_f32", s_additive_f32},
    {"additive_f16_lowest_2d", s_additive_f16_lowest},
    {"additive_bf16_values", s_additive_bf16_values},
    {"additive_f32_on_f16", s_additive_f32_on_f16},
    {"boolean_block_diag", s_boolean},
    {"boolean_full_rows", s_boolean_full_rows},
    {"causal_top_left", s_causal_top_left},
    {"causal_bottom_right", s_causal_bottom_right},
    {"causal_bottom_right_valid", s_causal_bottom_right_valid},
    {"causal_explicit", s_causal_explicit},
    {"key_padding", s_key_padding},
    {"window_causal", s_window_causal},
    {"window_both_sides", s_window_both},
    {"dropout_half", s_dropout},
    {"dropout_all", s_dropout_all},
    {"gqa", s_gqa},
    {"gqa_bshd_cross", s_gqa_bshd_cross},
    {"cross_1x64", s_cross},
    {"d_ne_dv", s_dv},
    {"scale_sqrt_qk", s_scale_sqrt_qk},
    {"scale_on_q", s_scale_on_q_large},
    {"softcap", s_softcap},
    {"strided", s_strided},
    {"nan_inf_masked", s_nan_masked},
    {"value_dists", s_values},
    {"awkward_len_143", s_awkward_len},
    {"tile_edge_65x129", s_tile_edge},
};

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "%s: %s\n", dir, strerror(errno));
        return 2;
    }
    af_casemut_opts opts = {0, 2e7};
    size_t n = sizeof af_seeds / sizeof af_seeds[0];
    for (size_t i = 0; i < n; i++) {
        af_case c;
        af_seed_base(&c, (uint32_t)i);
        af_seeds[i].fn(&c);
        af_case_repair(&c, 0);
        af_error err;
        if (af_case_validate(&c, 0, &err) != AF_OK) {
            fprintf(stderr, "seed %s: %s\n", af_seeds[i].name, err.msg);
            return 2;
        }
        uint8_t buf[AF_CASE_ENCODED_MAX];
        size_t len = af_casemut_encode(&c, buf, sizeof buf, &opts);
        af_case back;
        af_case_decode(&back, buf, len, 0);
        if (len == 0 || !af_case_equal(&back, &c)) {
            fprintf(stderr, "seed %s: does not round-trip through the byte form\n", af_seeds[i].name);
            return 2;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%02zu-%s.bin", dir, i, af_seeds[i].name);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
            fprintf(stderr, "%s: cannot write\n", path);
            return 2;
        }
    }
    printf("wrote %zu seeds to %s\n", n, dir);
    return 0;
}
