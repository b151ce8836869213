/* vmath.h - numeric kernels shared by the built-in backends (library-internal).
 *
 * Matrix products go through CBLAS (OpenBLAS, one thread) when the shape is large
 * enough to pay for the call, else through plain loops; both follow IEEE arithmetic, so
 * NaN and Inf propagate the same way. All matrices are row-major. */
#ifndef ATTNFUZZ_VMATH_H
#define ATTNFUZZ_VMATH_H

#include <stddef.h>
#include <stdint.h>

#include "attnfuzz/tensor.h"

/* C[M x N] = A[M x K] . B[N x K]^T  (+ C when accumulate) */
void af_gemm_nt_f32(size_t M, size_t N, size_t K, const float *A, size_t lda, const float *B, size_t ldb,
                    float *C, size_t ldc, int accumulate);
void af_gemm_nt_f64(size_t M, size_t N, size_t K, const double *A, size_t lda, const double *B, size_t ldb,
                    double *C, size_t ldc, int accumulate);
/* C[M x N] = A[M x K] . B[K x N]  (+ C when accumulate) */
void af_gemm_nn_f32(size_t M, size_t N, size_t K, const float *A, size_t lda, const float *B, size_t ldb,
                    float *C, size_t ldc, int accumulate);
void af_gemm_nn_f64(size_t M, size_t N, size_t K, const double *A, size_t lda, const double *B, size_t ldb,
                    double *C, size_t ldc, int accumulate);

/* C[M x N] = A[K x M]^T . B[K x N]  (+ C when accumulate): the products of a backward
 * that sum over query rows (dV = P^T dO, dK = dS^T Q) */
void af_gemm_tn_f32(size_t M, size_t N, size_t K, const float *A, size_t lda, const float *B, size_t ldb,
                    float *C, size_t ldc, int accumulate);
void af_gemm_tn_f64(size_t M, size_t N, size_t K, const double *A, size_t lda, const double *B, size_t ldb,
                    double *C, size_t ldc, int accumulate);

/* x[j] = exp((x[j] - m) * k) for j < n; returns the sum. Max error 2 ulp; exp(-inf) =
 * 0, NaN stays NaN. The f64 version flushes results below 2^-1022 to 0. With k = the
 * softmax scale (> 0) and m = the row max of the unscaled scores, the scale costs no pass
 * of its own (FlashAttention folds it into exp2 the same way). */
float af_exp_sub_sum_f32(float *x, size_t n, float m, float k);
double af_exp_sub_sum_f64(double *x, size_t n, double m, double k);

/* Row maximum, and whether the row holds a NaN (max alone would hide it). */
float af_max_f32(const float *x, size_t n, int *has_nan);
double af_max_f64(const double *x, size_t n, int *has_nan);

/* dst[s * ld + d] = v(b, h, s, d) for every s < S, d < D (exact conversion). */
void af_gather_f32(const af_view *v, size_t b, size_t h, float *dst, size_t ld);
void af_gather_f64(const af_view *v, size_t b, size_t h, double *dst, size_t ld);

/* One query row's masks over keys j0 .. j0+n-1, to apply on scores:
 * add[j] the additive mask value (only if the case has one; add may be NULL otherwise),
 * live[j] 0 where a set-semantics mask (structural or boolean) removes the key.
 * Returns true when every key is live; live is then left untouched (no pass needed). */
#include <stdbool.h>
bool af_mask_row(const af_case_tensors *t, uint32_t b, uint32_t h, uint32_t i, uint32_t j0, uint32_t n,
                 float *add, uint8_t *live);

/* Rows of a gathered V [S x Dv] with a NaN or Inf: their indices go to rows (returns the
 * count), their values are copied to saved [count x Dv] and zeroed in v. Masked keys have
 * probability 0 and must not turn 0 * NaN into NaN, so products use the zeroed rows and
 * live keys add their non-finite part back. */
size_t af_split_nonfinite_f32(float *v, size_t S, size_t Dv, uint32_t *rows, float *saved);
size_t af_split_nonfinite_f64(double *v, size_t S, size_t Dv, uint32_t *rows, double *saved);

/* The split rows added back to a product for the terms of nonzero weight only (rule 5: a
 * term of weight 0 gives nothing, even with a NaN or Inf factor). W and F are [rows x Sk]
 * (W decides which terms count, F is the factor): for a key-side operand split by
 * af_split_nonfinite (bad keys j, values saved), C[r] += F[r][j] saved_j where W[r][j] != 0
 * (C [rows x n], dQ = dS K); for a query-side operand of rows r0 .. r0+rows-1 (bad rows i),
 * C[j] += F[i][j] saved_i where W[i][j] != 0 (C [Sk x n], dK = dS^T Q, dV = P^T dO). */
void af_add_back_keys_f32(size_t rows, size_t Sk, const float *W, const float *F, const uint32_t *bad, size_t nbad,
                          const float *saved, size_t n, float *C);
void af_add_back_keys_f64(size_t rows, size_t Sk, const double *W, const double *F, const uint32_t *bad, size_t nbad,
                          const double *saved, size_t n, double *C);
void af_add_back_rows_f32(size_t r0, size_t rows, size_t Sk, const float *W, const float *F, const uint32_t *bad,
                          size_t nbad, const float *saved, size_t n, float *C);
void af_add_back_rows_f64(size_t r0, size_t rows, size_t Sk, const double *W, const double *F, const uint32_t *bad,
                          size_t nbad, const double *saved, size_t n, double *C);

#endif
