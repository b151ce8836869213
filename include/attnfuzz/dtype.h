/* dtype.h - element types and exact conversions.
 *
 * Every rounding here is round-to-nearest-even, done once (float64 -> f16 never goes
 * through f32), with subnormals, overflow to Inf and NaN handled exactly. */
#ifndef ATTNFUZZ_DTYPE_H
#define ATTNFUZZ_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Case dtypes are the first three; F64, BOOL and I32 are tensor dtypes (reference output,
 * boolean masks stored one byte per element, nonzero = attend; the serving forms' integer
 * tables: cu_seqlens, block tables). E4M3 and E5M2 are the FP8 input formats of an FP8 case
 * (case.h, af_fp8_spec): e4m3fn (4 exponent bits, bias 7, 3 mantissa bits, no Inf, NaN only
 * at S.1111.111, largest finite 448) and e5m2 (IEEE-like: bias 15, Inf and NaN at exponent
 * 31, largest finite 57344). Their load and store (af_dtype_load / af_dtype_store) read and
 * write the stored value, without a descale. */
typedef enum af_dtype { AF_F32, AF_F16, AF_BF16, AF_F64, AF_BOOL, AF_I32, AF_E4M3, AF_E5M2, AF_DTYPE_COUNT } af_dtype;

#define AF_CASE_DTYPE_COUNT 3

extern const char *const af_dtype_names[AF_DTYPE_COUNT]; /* "f32", "f16", "bf16", "f64", "bool", "i32", "e4m3", "e5m2" */

static inline int af_dtype_is_fp8(af_dtype dt) { return dt == AF_E4M3 || dt == AF_E5M2; }

size_t af_dtype_size(af_dtype dt);
/* Name to dtype; returns -1 when unknown. */
int af_dtype_from_name(const char *name);

/* Largest finite value, smallest positive normal, smallest positive subnormal, and the
 * unit roundoff (2^-p) of a floating dtype. */
double af_dtype_max(af_dtype dt);
double af_dtype_min_normal(af_dtype dt);
double af_dtype_min_subnormal(af_dtype dt);
double af_dtype_eps(af_dtype dt);
/* Smallest magnitude that rounds to Inf: the largest finite plus half an ulp. */
double af_dtype_overflow(af_dtype dt);

/* Rounds x once to the nearest value of dt (F32, F16, BF16; F64 returns x). */
double af_round_f64(double x, af_dtype dt);
/* The same by a different method (frexp / nearbyint), for tests. */
double af_round_f64_reference(double x, af_dtype dt);
/* Rounds a float to dt (F32 returns x); vectorizable bit arithmetic. */
float af_round_f32(float x, af_dtype dt);
/* Rounds an f32 value to TF32 (10 explicit mantissa bits, f32 range); NaN/Inf unchanged. */
float af_round_tf32(float x);
/* Rounds every element of a float array in place. */
void af_round_f32_array(float *x, size_t n, af_dtype dt);
void af_round_tf32_array(float *x, size_t n);

/* Bit conversions. _from_f64 rounds once; _to_f32 is exact. */
uint16_t af_f16_from_f64(double x);
uint16_t af_bf16_from_f64(double x);
uint16_t af_f16_from_f32(float x);
uint16_t af_bf16_from_f32(float x);
float af_f16_to_f32(uint16_t h);
float af_bf16_to_f32(uint16_t b);

/* FP8 bit conversions. _from_f64 rounds x once to the nearest value (ties to even). Not
 * saturating (saturate false), as PyTorch's and ml_dtypes' casts: a magnitude that rounds past
 * the largest finite value gives NaN in e4m3 (it has no Inf: 464 = 448 + half an ulp still
 * rounds to 448, anything above gives NaN) and Inf in e5m2 (from 61440). Saturating, as
 * NVIDIA's __NV_SATFINITE conversions and the clamp before a cast in users' scaling code: such
 * magnitudes give the largest finite value instead, and Inf does too; NaN stays NaN (0x7f,
 * 0x7e with the sign). _to_f64 is exact. */
uint8_t af_fp8_from_f64(double x, af_dtype dt, int saturate);
double af_fp8_to_f64(uint8_t bits, af_dtype dt);

/* Reads element i of a contiguous array of dtype dt as double (BOOL gives 0 or 1). */
double af_dtype_load(af_dtype dt, const void *base, size_t byte_offset);
/* Stores x (already representable, or rounded once here) at byte_offset. */
void af_dtype_store(af_dtype dt, void *base, size_t byte_offset, double x);

#ifdef __cplusplus
}
#endif
#endif
