/* vmath.c - exp, max, gemm and gather kernels for the built-in backends.
 *
 * exp: Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, then a Taylor polynomial
 * for e^r (degree 7 in f32, 12 in f64: truncation below one ulp), and 2^n built in the
 * exponent bits. n comes from the "magic number" trick (adding 1.5 * 2^p rounds to an
 * integer in the low mantissa bits), so every step is integer or float lane arithmetic
 * and the loops vectorize; target_clones picks AVX-512 or AVX2 at load time. */
#include "vmath.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* gcc only: clang 14 emits just "f.ifunc" for a target_clones function whose callers in
 * other files do not repeat the attribute, so it would not link. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(AF_NO_CLONES) && !defined(__clang__)
#define AF_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define AF_CLONES
#endif

/* Below this many multiply-adds a plain loop beats a BLAS call. */
#define AF_BLAS_MIN_WORK 32768u

/* A dot product in AF_LANES independent partial sums (the loop vectorizes; a single
 * running sum would not, float addition being ordered), then the lanes added up. */
#define AF_LANES 8

AF_CLONES static float af_dot_f32(const float *a, const float *b, size_t K) {
    float lane[AF_LANES] = {0};
    size_t k = 0;
    for (; k + AF_LANES <= K; k += AF_LANES)
        for (size_t l = 0; l < AF_LANES; l++) lane[l] += a[k + l] * b[k + l];
    float acc = 0.0f;
    for (; k < K; k++) acc += a[k] * b[k];
    for (size_t l = 0; l < AF_LANES; l++) acc += lane[l];
    return acc;
}

void af_gemm_nt_f32(size_t M, size_t N, size_t K, const float *A, size_t lda, const float *B, size_t ldb,
                    float *C, size_t ldc, int accumulate) {
    if (M * N * K >= AF_BLAS_MIN_WORK) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, A, (int)lda, B,
                    (int)ldb, accumulate ? 1.0f : 0.0f, C, (int)ldc);
        return;
    }
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            float acc = af_dot_f32(A + i * lda, B + j * ldb, K);
            C[i * ldc + j] = accumulate ? C[i * ldc + j] + acc : acc;
        }
}

void af_gemm_nt_f64(size_t M, size_t N, size_t K, const double *A, size_t lda, const double *B, size_t ldb,
                    double *C, size_t ldc, int accumulate) {
    if (M * N * K >= AF_BLAS_MIN_WORK) {
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0, A, (int)lda, B,
                    (int)ldb, accumulate ? 1.0 : 0.0, C, (int)ldc);
        return;
    }
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            double acc = 0.0;
            for (size_t k = 0; k < K; k++) acc += A[i * lda + k] * B[j * ldb + k];
            C[i * ldc + j] = accumulate ? C[i * ldc + j] + acc : acc;
        }
}

void af_gemm_nn_f32(size_t M, size_t N, size_t K, const float *A, size_t lda, const float *B, size_t ldb,
                    float *C, size_t ldc, int accumulate) {
    if (M * N * K >= AF_BLAS_MIN_WORK) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, A, (int)lda, B,
                    (int)ldb, accumulate ? 1.0f : 0.0f, C, (int)ldc);
        return;
    }
    for (size_t i = 0; i < M; i++) {
        float *c = C + i * ldc;
        if (!accumulate)
            for (size_t j = 0; j < N; j++) c[j] = 0.0f;
        for (size_t k = 0; k < K; k++) {
            float a = A[i * lda + k];
            const float *b = B + k * ldb;
            for (size_t j = 0; j < N; j++) c[j] += a * b[j];
        }
    }
}

void af_gemm_nn_f64(size_t M, size_t N, size_t K, const double *A, size_t lda, const double *B, size_t ldb,
                    double *C, size_t ldc, int accumulate) {
    if (M * N * K >= AF_BLAS_MIN_WORK) {
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0, A, (int)lda, B,
                    (int)ldb, accumulate ? 1.0 : 0.0, C, (int)ldc);
        return;
    }
    for (size_t i = 0; i < M; i++) {
        double *c = C + i * ldc;
        if (!accumulate)
            for (size_t j = 0; j < N; j++) c[j] = 0.0;
        for (size_t k = 0; k < K; k++) {
            double a = A[i * lda + k];
            const double *b = B + k * ldb;
            for (size_t j = 0; j < N; j++) c[j] += a * b[j];
        }
    }
}

void af_gemm_tn_f32(size_t M, size_t N, size_t K, const float *A, size_t lda, const float *B, size_t ldb,
                    float *C, size_t ldc, int accumulate) {
    if (M * N * K >= AF_BLAS_MIN_WORK) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, A, (int)lda, B,
                    (int)ldb, accumulate ? 1.0f : 0.0f, C, (int)ldc);
        return;
    }
    if (!accumulate)
        for (size_t i = 0; i < M; i++)
            for (size_t j = 0; j < N; j++) C[i * ldc + j] = 0.0f;
    for (size_t k = 0; k < K; k++) {
        const float *b = B + k * ldb;
        for (size_t i = 0; i < M; i++) {
            float a = A[k * lda + i];
            float *c = C + i * ldc;
            for (size_t j = 0; j < N; j++) c[j] += a * b[j];
        }
    }
}

void af_gemm_tn_f64(size_t M, size_t N, size_t K, const double *A, size_t lda, const double *B, size_t ldb,
                    double *C, size_t ldc, int accumulate) {
    if (M * N * K >= AF_BLAS_MIN_WORK) {
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0, A, (int)lda, B,
                    (int)ldb, accumulate ? 1.0 : 0.0, C, (int)ldc);
        return;
    }
    if (!accumulate)
        for (size_t i = 0; i < M; i++)
            for (size_t j = 0; j < N; j++) C[i * ldc + j] = 0.0;
    for (size_t k = 0; k < K; k++) {
        const double *b = B + k * ldb;
        for (size_t i = 0; i < M; i++) {
            double a = A[k * lda + i];
            double *c = C + i * ldc;
            for (size_t j = 0; j < N; j++) c[j] += a * b[j];
        }
    }
}

static inline uint32_t af_fbits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static inline float af_bitsf(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}
static inline uint64_t af_dbits(double x) {
    uint64_t u;
    memcpy(&u, &x, 8);
    return u;
}
static inline double af_bitsd(uint64_t u) {
    double x;
    memcpy(&x, &u, 8);
    return x;
}

static inline float af_expf_lane(float x) {
    const float magic = 12582912.0f; /* 1.5 * 2^23 */
    float xc = x > -104.0f ? x : -104.0f; /* also replaces NaN, restored below */
    xc = xc < 88.7f ? xc : 88.7f;
    float t = xc * 1.44269504088896341f + magic;
    float n = t - magic;
    int32_t ni = (int32_t)(af_fbits(t) - af_fbits(magic));
    float r = xc - n * 0.693359375f;  /* ln2 hi: exact product for |n| < 2^15 */
    r = r + n * 2.12194440e-4f;       /* ln2 lo (ln2 = hi - lo) */
    /* degree-7 Taylor polynomial by Estrin's scheme (dependency depth 3) */
    float r2 = r * r, r4 = r2 * r2;
    float p = (1.0f + r) + r2 * (0.5f + r * (1.0f / 6.0f)) +
              r4 * ((1.0f / 24.0f + r * (1.0f / 120.0f)) + r2 * (1.0f / 720.0f + r * (1.0f / 5040.0f)));
    /* 2^n in two normal factors, so results down to the subnormals stay exact */
    int32_t n1 = ni >> 1, n2 = ni - n1;
    float s1 = af_bitsf((uint32_t)(n1 + 127) << 23), s2 = af_bitsf((uint32_t)(n2 + 127) << 23);
    float y = p * s1 * s2;
    y = x > -104.0f ? y : 0.0f;
    return x != x ? x : y;
}

AF_CLONES float af_exp_sub_sum_f32(float *x, size_t n, float m, float k) {
    for (size_t j = 0; j < n; j++) x[j] = af_expf_lane((x[j] - m) * k);
    float lane[AF_LANES] = {0};
    size_t j = 0;
    for (; j + AF_LANES <= n; j += AF_LANES)
        for (size_t l = 0; l < AF_LANES; l++) lane[l] += x[j + l];
    float sum = 0.0f;
    for (; j < n; j++) sum += x[j];
    for (size_t l = 0; l < AF_LANES; l++) sum += lane[l];
    return sum;
}

static inline double af_exp_lane(double x) {
    const double magic = 6755399441055744.0; /* 1.5 * 2^52 */
    double xc = x > -708.3964 ? x : -708.3964; /* log(2^-1022) = -708.39642: normal results only */
    xc = xc < 709.0 ? xc : 709.0;
    double t = xc * 1.4426950408889634074 + magic;
    double n = t - magic;
    uint64_t ni = af_dbits(t) - af_dbits(magic); /* n, two's complement */
    double r = xc - n * 0.6931471803691238164; /* ln2 hi (33 bits): exact product */
    r = r - n * 1.9082149292705877000e-10;     /* ln2 lo */
    /* Estrin's scheme: the same degree-12 Taylor polynomial in a dependency chain of
     * depth 5 instead of 12, so the FMA latency of consecutive lanes overlaps */
    double r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
    double a01 = 1.0 + r, a23 = 0.5 + r * (1.0 / 6.0), a45 = 1.0 / 24.0 + r * (1.0 / 120.0);
    double a67 = 1.0 / 720.0 + r * (1.0 / 5040.0), a89 = 1.0 / 40320.0 + r * (1.0 / 362880.0);
    double a1011 = 1.0 / 3628800.0 + r * (1.0 / 39916800.0);
    double b0 = a01 + r2 * a23, b1 = a45 + r2 * a67, b2 = a89 + r2 * a1011 + r4 * (1.0 / 479001600.0);
    double p = b0 + r4 * b1 + r8 * b2;
    double s = af_bitsd((ni + 1023u) << 52);
    double y = p * s;
    y = x > -708.3964 ? y : 0.0;
    return x != x ? x : y;
}

AF_CLONES double af_exp_sub_sum_f64(double *x, size_t n, double m, double k) {
    for (size_t j = 0; j < n; j++) x[j] = af_exp_lane((x[j] - m) * k);
    double lane[AF_LANES] = {0};
    size_t j = 0;
    for (; j + AF_LANES <= n; j += AF_LANES)
        for (size_t l = 0; l < AF_LANES; l++) lane[l] += x[j + l];
    double sum = 0.0;
    for (; j < n; j++) sum += x[j];
    for (size_t l = 0; l < AF_LANES; l++) sum += lane[l];
    return sum;
}

AF_CLONES float af_max_f32(const float *x, size_t n, int *has_nan) {
    float lane[AF_LANES];
    int nan[AF_LANES] = {0};
    for (size_t l = 0; l < AF_LANES; l++) lane[l] = -INFINITY;
    size_t j = 0;
    for (; j + AF_LANES <= n; j += AF_LANES)
        for (size_t l = 0; l < AF_LANES; l++) {
            float v = x[j + l];
            lane[l] = v > lane[l] ? v : lane[l];
            nan[l] |= v != v;
        }
    float m = -INFINITY;
    int any = 0;
    for (; j < n; j++) {
        m = x[j] > m ? x[j] : m;
        any |= x[j] != x[j];
    }
    for (size_t l = 0; l < AF_LANES; l++) {
        m = lane[l] > m ? lane[l] : m;
        any |= nan[l];
    }
    *has_nan = any;
    return m;
}

AF_CLONES double af_max_f64(const double *x, size_t n, int *has_nan) {
    double lane[AF_LANES];
    int nan[AF_LANES] = {0};
    for (size_t l = 0; l < AF_LANES; l++) lane[l] = -HUGE_VAL;
    size_t j = 0;
    for (; j + AF_LANES <= n; j += AF_LANES)
        for (size_t l = 0; l < AF_LANES; l++) {
            double v = x[j + l];
            lane[l] = v > lane[l] ? v : lane[l];
            nan[l] |= v != v;
        }
    double m = -HUGE_VAL;
    int any = 0;
    for (; j < n; j++) {
        m = x[j] > m ? x[j] : m;
        any |= x[j] != x[j];
    }
    for (size_t l = 0; l < AF_LANES; l++) {
        m = lane[l] > m ? lane[l] : m;
        any |= nan[l];
    }
    *has_nan = any;
    return m;
}

#define AF_GATHER_LOOP(T, LOAD)                                                                    \
    for (size_t s = 0; s < S; s++) {                                                               \
        const unsigned char *row = base + s * v->nb[2];                                            \
        T *out = dst + s * ld;                                                                     \
        for (size_t d = 0; d < D; d++) out[d] = LOAD(row + d * v->nb[3]);                          \
    }

static inline float af_ld_f32(const unsigned char *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}
static inline float af_ld_f16(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return af_f16_to_f32(h);
}
static inline float af_ld_bf16(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return af_bf16_to_f32(h);
}
static inline double af_ld_f64(const unsigned char *p) {
    double x;
    memcpy(&x, p, 8);
    return x;
}
static inline double af_ld_f32d(const unsigned char *p) { return (double)af_ld_f32(p); }
static inline double af_ld_f16d(const unsigned char *p) { return (double)af_ld_f16(p); }
static inline double af_ld_bf16d(const unsigned char *p) { return (double)af_ld_bf16(p); }

/* An FP8 view dequantized: stored * descale, exact in float64; the f32 gather rounds that
 * once, as a kernel's f32 multiply does. */
static void af_gather_fp8(const af_view *v, size_t b, size_t h, double *dst64, float *dst32, size_t ld) {
    const unsigned char *base = (const unsigned char *)v->data + b * v->nb[0] + h * v->nb[1];
    size_t S = v->ne[2], D = v->ne[3];
    double lut[256];
    for (unsigned k = 0; k < 256; k++) lut[k] = af_fp8_to_f64((uint8_t)k, v->dtype) * (double)v->descale;
    for (size_t s = 0; s < S; s++) {
        const unsigned char *row = base + s * v->nb[2];
        for (size_t d = 0; d < D; d++) {
            double x = lut[row[d * v->nb[3]]];
            if (dst64) dst64[s * ld + d] = x;
            else dst32[s * ld + d] = (float)x;
        }
    }
}

void af_gather_f32(const af_view *v, size_t b, size_t h, float *dst, size_t ld) {
    const unsigned char *base = (const unsigned char *)v->data + b * v->nb[0] + h * v->nb[1];
    size_t S = v->ne[2], D = v->ne[3];
    if (af_dtype_is_fp8(v->dtype)) {
        af_gather_fp8(v, b, h, NULL, dst, ld);
    } else if (v->dtype == AF_F32 && v->nb[3] == 4) {
        for (size_t s = 0; s < S; s++) memcpy(dst + s * ld, base + s * v->nb[2], D * 4);
    } else if (v->dtype == AF_F32) {
        AF_GATHER_LOOP(float, af_ld_f32)
    } else if (v->dtype == AF_F16) {
        AF_GATHER_LOOP(float, af_ld_f16)
    } else {
        AF_GATHER_LOOP(float, af_ld_bf16)
    }
}

void af_gather_f64(const af_view *v, size_t b, size_t h, double *dst, size_t ld) {
    const unsigned char *base = (const unsigned char *)v->data + b * v->nb[0] + h * v->nb[1];
    size_t S = v->ne[2], D = v->ne[3];
    if (af_dtype_is_fp8(v->dtype)) {
        af_gather_fp8(v, b, h, dst, NULL, ld);
    } else if (v->dtype == AF_F32) {
        AF_GATHER_LOOP(double, af_ld_f32d)
    } else if (v->dtype == AF_F16) {
        AF_GATHER_LOOP(double, af_ld_f16d)
    } else if (v->dtype == AF_BF16) {
        AF_GATHER_LOOP(double, af_ld_bf16d)
    } else {
        AF_GATHER_LOOP(double, af_ld_f64)
    }
}

bool af_mask_row(const af_case_tensors *t, uint32_t b, uint32_t h, uint32_t i, uint32_t j0, uint32_t n,
                 float *add, uint8_t *live) {
    const af_case *c = t->c;
    int64_t lo, hi;
    af_mask_row_bounds(c, b, i, &lo, &hi);
    bool all = !c->bmask.present && lo <= (int64_t)j0 && hi >= (int64_t)j0 + n - 1;
    if (!all) {
        for (uint32_t k = 0; k < n; k++) {
            int64_t j = (int64_t)j0 + k;
            live[k] = j >= lo && j <= hi;
        }
    }
    if (c->bmask.present) {
        const unsigned char *row = (const unsigned char *)t->bm.data + af_view_offset(&t->bm, b, h, i, 0);
        for (uint32_t k = 0; k < n; k++) live[k] = (uint8_t)(live[k] & (row[(size_t)(j0 + k) * t->bm.nb[3]] != 0));
    }
    if (c->amask.present && add) {
        const af_view *am = &t->am;
        const unsigned char *row = (const unsigned char *)am->data + af_view_offset(am, b, h, i, 0);
        for (uint32_t k = 0; k < n; k++) add[k] = (float)af_dtype_load(am->dtype, row, (size_t)(j0 + k) * am->nb[3]);
    }
    return all;
}

size_t af_split_nonfinite_f32(float *v, size_t S, size_t Dv, uint32_t *rows, float *saved) {
    size_t count = 0;
    for (size_t s = 0; s < S; s++) {
        float *row = v + s * Dv;
        int bad = 0;
        for (size_t d = 0; d < Dv; d++) bad |= !isfinite(row[d]);
        if (!bad) continue;
        if (saved) memcpy(saved + count * Dv, row, Dv * sizeof *row);
        rows[count++] = (uint32_t)s;
        for (size_t d = 0; d < Dv; d++) row[d] = 0.0f;
    }
    return count;
}

size_t af_split_nonfinite_f64(double *v, size_t S, size_t Dv, uint32_t *rows, double *saved) {
    size_t count = 0;
    for (size_t s = 0; s < S; s++) {
        double *row = v + s * Dv;
        int bad = 0;
        for (size_t d = 0; d < Dv; d++) bad |= !isfinite(row[d]);
        if (!bad) continue;
        if (saved) memcpy(saved + count * Dv, row, Dv * sizeof *row);
        rows[count++] = (uint32_t)s;
        for (size_t d = 0; d < Dv; d++) row[d] = 0.0;
    }
    return count;
}

#define AF_ADD_BACK(T, SUFFIX)                                                                     \
    void af_add_back_keys_##SUFFIX(size_t rows, size_t Sk, const T *W, const T *F, const uint32_t *bad, size_t nbad, \
                                   const T *saved, size_t n, T *C) {                               \
        for (size_t b = 0; b < nbad; b++) {                                                        \
            size_t j = bad[b];                                                                     \
            for (size_t r = 0; r < rows; r++) {                                                    \
                if (W[r * Sk + j] == 0) continue;                                                  \
                T f = F[r * Sk + j];                                                               \
                for (size_t d = 0; d < n; d++) C[r * n + d] += f * saved[b * n + d];               \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    void af_add_back_rows_##SUFFIX(size_t r0, size_t rows, size_t Sk, const T *W, const T *F, const uint32_t *bad, \
                                   size_t nbad, const T *saved, size_t n, T *C) {                  \
        for (size_t b = 0; b < nbad; b++) {                                                        \
            size_t i = bad[b];                                                                     \
            if (i < r0 || i >= r0 + rows) continue;                                                \
            size_t r = i - r0;                                                                     \
            for (size_t j = 0; j < Sk; j++) {                                                      \
                if (W[r * Sk + j] == 0) continue;                                                  \
                T f = F[r * Sk + j];                                                               \
                for (size_t d = 0; d < n; d++) C[j * n + d] += f * saved[b * n + d];               \
            }                                                                                      \
        }                                                                                          \
    }
AF_ADD_BACK(float, f32)
AF_ADD_BACK(double, f64)
#undef AF_ADD_BACK
