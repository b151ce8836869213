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
 * tables: cu_seqlens, block tables). */
typedef enum af_dtype { AF_F32, AF_F16, AF_BF16, AF_F64, AF_BOOL, AF_I32, AF_DTYPE_COUNT } af_dtype;

#define AF_CASE_DTYPE_COUNT 3

extern const char *const af_dtype_names[AF_DTYPE_COUNT]; /* "f32", "f16", "bf16", "f64", "bool", "i32" */

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

/* Reads element i of a contiguous array of dtype dt as double (BOOL gives 0 or 1). */
double af_dtype_load(af_dtype dt, const void *base, size_t byte_offset);
/* Stores x (already representable, or rounded once here) at byte_offset. */
void af_dtype_store(af_dtype dt, void *base, size_t byte_offset, double x);

#ifdef __cplusplus
}
#endif
#endif
