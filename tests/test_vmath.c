/* test_vmath.c - the vectorized kernels against libm and plain loops: exp within a few
 * ulp over the softmax range (and its specials), max with NaN detection, the small gemm
 * paths against a double-precision loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vmath.h"

static uint64_t xs = 0x9e3779b97f4a7c15ull;
static double uni(void) { /* xorshift64*, independent of the library's RNG */
    xs ^= xs >> 12, xs ^= xs << 25, xs ^= xs >> 27;
    return (double)((xs * 2685821657736338717ull) >> 11) * 0x1p-53;
}

static void test_exp_f64(void **state) {
    (void)state;
    enum { N = 200000 };
    double *x = malloc(N * sizeof *x), *want = malloc(N * sizeof *want);
    for (int i = 0; i < N; i++) x[i] = -750.0 * uni() * uni(); /* softmax arguments: <= 0 */
    x[0] = 0.0, x[1] = -HUGE_VAL, x[2] = (double)NAN, x[3] = -708.0, x[4] = -708.39, x[6] = -708.4, x[5] = -1e-300;
    double sum_want = 0.0;
    for (int i = 0; i < N; i++) {
        want[i] = exp(x[i]);
        if (!isnan(want[i])) sum_want += want[i];
    }
    double m = 0.0;
    double sum = af_exp_sub_sum_f64(x, N, m, 1.0);
    assert_true(isnan(sum)); /* the NaN lane propagates into the sum */
    for (int i = 0; i < N; i++) {
        if (isnan(want[i])) {
            assert_true(isnan(x[i]));
        } else if (want[i] < 0x1p-1022) {
            assert_true(x[i] == 0.0 || fabs(x[i] - want[i]) <= 0x1p-1022); /* flushed below the normals */
        } else if (fabs(x[i] - want[i]) > 4.0 * 0x1p-52 * want[i]) {
            fail_msg("exp(%.17g): %.17g, libm %.17g", x[i] + 0.0, x[i], want[i]);
        }
    }
    free(x);
    free(want);
}

static void test_exp_f32_scaled(void **state) {
    (void)state;
    enum { N = 200000 };
    float *x = malloc(N * sizeof *x);
    double *want = malloc(N * sizeof *want);
    const float m = 3.5f, k = 0.125f;
    for (int i = 0; i < N; i++) x[i] = (float)((double)m - 900.0 * uni() * uni());
    x[0] = m, x[1] = -INFINITY, x[2] = -0.0f;
    double sum_want = 0.0;
    for (int i = 0; i < N; i++) {
        want[i] = exp((double)((x[i] - m) * k));
        sum_want += want[i];
    }
    float sum = af_exp_sub_sum_f32(x, N, m, k);
    for (int i = 0; i < N; i++) {
        double tol = want[i] >= 0x1p-126 ? 3.0 * 0x1p-23 * want[i] : 0x1p-149; /* 3 ulp, or a subnormal quantum */
        if (fabs((double)x[i] - want[i]) > tol) fail_msg("expf element %d: %.9g, want %.9g", i, (double)x[i], want[i]);
    }
    assert_true(fabs((double)sum - sum_want) <= 1e-5 * sum_want);
    assert_true(x[1] == 0.0f); /* exp(-inf) = 0 */
    free(x);
    free(want);
}

static void test_max_nan(void **state) {
    (void)state;
    float v[37];
    for (int i = 0; i < 37; i++) v[i] = (float)i - 20.0f;
    int nan;
    assert_true(af_max_f32(v, 37, &nan) == 16.0f && !nan);
    v[33] = NAN;
    assert_true(af_max_f32(v, 37, &nan) == 16.0f && nan); /* max ignores NaN, the flag does not */
    double d[3] = {-HUGE_VAL, -HUGE_VAL, -HUGE_VAL};
    assert_true(af_max_f64(d, 3, &nan) == -HUGE_VAL && !nan);
}

static void test_small_gemm(void **state) {
    (void)state;
    /* shapes on both sides of the BLAS threshold */
    const size_t shapes[][3] = {{3, 5, 7}, {1, 1, 1}, {17, 9, 33}, {64, 64, 64}};
    for (size_t s = 0; s < 4; s++) {
        size_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        float *A = malloc(M * K * 4), *B = malloc(N * K * 4), *C = malloc(M * N * 4);
        for (size_t i = 0; i < M * K; i++) A[i] = (float)(uni() - 0.5);
        for (size_t i = 0; i < N * K; i++) B[i] = (float)(uni() - 0.5);
        af_gemm_nt_f32(M, N, K, A, K, B, K, C, N, 0);
        for (size_t i = 0; i < M; i++)
            for (size_t j = 0; j < N; j++) {
                double want = 0.0, mag = 0.0;
                for (size_t k = 0; k < K; k++) {
                    want += (double)A[i * K + k] * (double)B[j * K + k];
                    mag += fabs((double)A[i * K + k] * (double)B[j * K + k]);
                }
                assert_true(fabs((double)C[i * N + j] - want) <= (double)K * 0x1p-23 * mag + 1e-30);
            }
        free(A);
        free(B);
        free(C);
    }
}

/* C = A^T B (+ C): A stored [K x M]; both sides of the BLAS threshold, f32 and f64, with
 * accumulation, against a double loop; IEEE: an Inf meeting a 0 makes NaN on both paths. */
static void test_gemm_tn(void **state) {
    (void)state;
    const size_t shapes[][3] = {{3, 5, 7}, {1, 1, 1}, {17, 9, 33}, {64, 64, 64}};
    for (size_t s = 0; s < 4; s++) {
        size_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        double *A = malloc(M * K * 8), *B = malloc(N * K * 8), *C = malloc(M * N * 8), *C0 = malloc(M * N * 8);
        float *Af = malloc(M * K * 4), *Bf = malloc(N * K * 4), *Cf = malloc(M * N * 4);
        for (size_t i = 0; i < M * K; i++) Af[i] = (float)(uni() - 0.5), A[i] = Af[i];
        for (size_t i = 0; i < N * K; i++) Bf[i] = (float)(uni() - 0.5), B[i] = Bf[i];
        A[0] = 0.0, Af[0] = 0.0f, B[0] = HUGE_VAL, Bf[0] = INFINITY; /* 0 * Inf in C[0][0] */
        for (size_t i = 0; i < M * N; i++) C0[i] = uni(), C[i] = C0[i], Cf[i] = (float)C0[i];
        af_gemm_tn_f64(M, N, K, A, M, B, N, C, N, 1);
        af_gemm_tn_f32(M, N, K, Af, M, Bf, N, Cf, N, 1);
        for (size_t i = 0; i < M; i++)
            for (size_t j = 0; j < N; j++) {
                double want = 0.0, mag = 0.0;
                for (size_t k = 0; k < K; k++) {
                    want += A[k * M + i] * B[k * N + j];
                    mag += fabs(A[k * M + i] * B[k * N + j]);
                }
                want += C0[i * N + j];
                if (j == 0) { /* column 0 meets B's Inf: 0 * Inf in row 0, Inf times a nonzero below */
                    assert_true(i == 0 ? isnan(C[0]) && isnan(Cf[0]) : isinf(C[i * N]) && isinf(Cf[i * N]));
                    continue;
                }
                assert_true(fabs(C[i * N + j] - want) <= (double)K * 0x1p-52 * mag + 1e-300);
                assert_true(fabs((double)Cf[i * N + j] - want) <= (double)(K + 2) * 0x1p-23 * (mag + fabs(C0[i * N + j])));
            }
        af_gemm_tn_f64(M, N, K, A, M, B, N, C, N, 0); /* without accumulation: C0 is gone */
        double w11 = 0.0;
        for (size_t k = 0; k < K && M > 1 && N > 1; k++) w11 += A[k * M + 1] * B[k * N + 1];
        if (M > 1 && N > 1) assert_true(fabs(C[N + 1] - w11) <= 1e-12);
        free(A), free(B), free(C), free(C0), free(Af), free(Bf), free(Cf);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exp_f64),
        cmocka_unit_test(test_exp_f32_scaled),
        cmocka_unit_test(test_max_nan),
        cmocka_unit_test(test_small_gemm),
        cmocka_unit_test(test_gemm_tn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
