/* ref_honest.h - the reference's honest (case-precision) mode: the roundings of the
 * explicit implementation, the sensitivity bound of score rounding and the checks that
 * flag outputs unstable at the case precision (library-internal; see ref_honest.c). */
#ifndef ATTNFUZZ_REF_HONEST_H
#define ATTNFUZZ_REF_HONEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnfuzz/dtype.h"
#include "attnfuzz/tensor.h"

/* fp32 partial sums past this may overflow in some order: such results are unstable */
#define AF_F32_RISK (0.25 * 0x1.fffffep127)

static inline double af_r32(double x) { return (double)(float)x; }
/* A value the explicit implementation holds in f32 and then stores in the dtype. */
static inline double af_rdt(double x, af_dtype dt) { return (double)af_round_f32((float)x, dt); }

void af_ref_scale_rows(double *x, size_t n, double f, af_dtype dt);
void af_ref_tf32(double *x, size_t n);
bool af_ref_tf32_overflows(const double *x, size_t n);
double af_sens_cap(double d, double x, double cap);
bool af_sens_weights(const double *s, double m, double *d, size_t n, const uint32_t *bad, size_t nbad,
                     double p_zero, double z);
bool af_ref_has_nonfinite(const double *x, size_t n);
double af_ref_min_abs(const double *x, size_t n);
double af_ref_maxabs(const double *x, size_t n);
bool af_ref_products_overflow(const double *q, const double *k, size_t Sk, size_t D, af_dtype dt, double scale);
void af_ref_to_f32(const double *x, float *y, size_t n);
void af_ref_gemm_f32(int nt, size_t M, size_t N, size_t K, const double *A, const double *B, double *C,
                     float *fa, float *fb, float *fc);
void af_ref_abs_gemm_nt(size_t M, size_t N, size_t K, const double *A, const double *B, double *C,
                        double *absa, double *absb);
void af_honest_score_bounds(const af_view *qv, const af_view *kv, size_t b, size_t h, size_t g, size_t r0, size_t rn,
                            size_t Sk, size_t D, double scale, double c_in, double h_abs, bool qk_risk,
                            double *absbuf, size_t big, uint8_t *risky, double *delta);

#endif
