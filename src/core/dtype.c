/* dtype.c - exact conversions between float64, f32, f16, bf16, TF32 and the FP8 formats.
 *
 * Rounding is always round-to-nearest-even, once. af_round_f64 works in double
 * arithmetic (scale by a power of two, nearbyint, scale back: all exact), which makes
 * subnormals and the overflow threshold fall out of the same two lines. The float
 * versions use bit arithmetic so loops over arrays vectorize. */
#include "attnfuzz/dtype.h"

#include <math.h>
#include <string.h>

const char *const af_dtype_names[AF_DTYPE_COUNT] = {"f32", "f16", "bf16", "f64", "bool", "i32", "e4m3", "e5m2"};
_Static_assert(sizeof(af_dtype_names) / sizeof(af_dtype_names[0]) == AF_DTYPE_COUNT, "names");

size_t af_dtype_size(af_dtype dt) {
    switch (dt) {
    case AF_F32: return 4;
    case AF_F16: return 2;
    case AF_BF16: return 2;
    case AF_F64: return 8;
    case AF_BOOL: return 1;
    case AF_I32: return 4;
    case AF_E4M3:
    case AF_E5M2: return 1;
    case AF_DTYPE_COUNT: break;
    }
    return 0;
}

int af_dtype_from_name(const char *name) {
    for (int i = 0; i < AF_DTYPE_COUNT; i++)
        if (strcmp(name, af_dtype_names[i]) == 0) return i;
    /* accept the usual spellings of other tools */
    if (!strcmp(name, "float32") || !strcmp(name, "float")) return AF_F32;
    if (!strcmp(name, "float16") || !strcmp(name, "half")) return AF_F16;
    if (!strcmp(name, "bfloat16")) return AF_BF16;
    if (!strcmp(name, "float64") || !strcmp(name, "double")) return AF_F64;
    if (!strcmp(name, "float8_e4m3fn") || !strcmp(name, "e4m3fn")) return AF_E4M3;
    if (!strcmp(name, "float8_e5m2")) return AF_E5M2;
    return -1;
}

/* Format parameters: explicit mantissa bits, smallest normal exponent, largest finite. */
typedef struct af_fmt {
    int mant;
    int emin;
    double max;
} af_fmt;

static af_fmt af_dtype_fmt(af_dtype dt) {
    switch (dt) {
    case AF_F16: return (af_fmt){10, -14, 65504.0};
    case AF_BF16: return (af_fmt){7, -126, 0x1.fep127};
    case AF_F32: return (af_fmt){23, -126, 0x1.fffffep127};
    case AF_F64: return (af_fmt){52, -1022, 0x1.fffffffffffffp1023};
    case AF_E4M3: return (af_fmt){3, -6, 448.0};
    case AF_E5M2: return (af_fmt){2, -14, 57344.0};
    case AF_BOOL:
    case AF_I32:
    case AF_DTYPE_COUNT: break;
    }
    return (af_fmt){52, -1022, 0x1.fffffffffffffp1023};
}

double af_dtype_max(af_dtype dt) { return af_dtype_fmt(dt).max; }
double af_dtype_min_normal(af_dtype dt) { return ldexp(1.0, af_dtype_fmt(dt).emin); }
double af_dtype_min_subnormal(af_dtype dt) {
    af_fmt f = af_dtype_fmt(dt);
    return ldexp(1.0, f.emin - f.mant);
}
double af_dtype_eps(af_dtype dt) { return ldexp(1.0, -(af_dtype_fmt(dt).mant + 1)); }
double af_dtype_overflow(af_dtype dt) {
    af_fmt f = af_dtype_fmt(dt);
    int emax = ilogb(f.max);
    return f.max + ldexp(1.0, emax - f.mant - 1);
}

double af_round_f64(double x, af_dtype dt) {
    if (dt == AF_F64 || dt == AF_BOOL || dt == AF_DTYPE_COUNT) return x;
    if (dt == AF_F32) return (double)(float)x; /* IEEE conversion: RNE, subnormals, Inf */
    if (isnan(x)) return x;
    if (af_dtype_is_fp8(dt)) return af_fp8_to_f64(af_fp8_from_f64(x, dt, 0), dt);
    if (dt == AF_F16) return (double)af_f16_to_f32(af_f16_from_f64(x));
    return (double)af_bf16_to_f32(af_bf16_from_f64(x));
}

/* The same rounding in double arithmetic: scale by a power of two, nearbyint, scale
 * back (all exact); kept as the slow, obviously right twin the tests compare against. */
double af_round_f64_reference(double x, af_dtype dt) {
    if (dt == AF_F64 || dt == AF_BOOL || dt == AF_DTYPE_COUNT) return x;
    if (dt == AF_F32) return (double)(float)x;
    if (isnan(x) || isinf(x) || x == 0.0) return x;
    af_fmt f = af_dtype_fmt(dt);
    double a = fabs(x);
    int e;
    (void)frexp(a, &e); /* a = m * 2^e, m in [0.5, 1): unbiased exponent e - 1 */
    int ue = e - 1 < f.emin ? f.emin : e - 1;
    double quantum = ldexp(1.0, ue - f.mant);
    double r = nearbyint(a / quantum) * quantum; /* both scalings exact: RNE happens once */
    if (r > f.max) r = dt == AF_E4M3 ? (double)NAN : HUGE_VAL; /* e4m3fn has no Inf */
    return copysign(r, x);
}

static inline uint32_t af_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static inline float af_bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* f32 -> f16 -> f32 in one rounding. Normal f16 range: drop 13 mantissa bits with RNE
 * (add 0xfff plus the kept lsb, then truncate). Subnormal f16 range (|x| < 2^-14): the
 * quantum is 2^-24, the ulp of [0.5, 1) in f32, so (|x| + 0.5) - 0.5 rounds it exactly. */
static inline float af_round_f32_to_f16(float x) {
    uint32_t u = af_f32_bits(x);
    uint32_t a = u & 0x7fffffffu;
    uint32_t s = u & 0x80000000u;
    uint32_t normal = (a + 0xfffu + ((a >> 13) & 1u)) & ~0x1fffu;
    float fa = af_bits_f32(a);
    uint32_t sub = af_f32_bits((fa + 0.5f) - 0.5f);
    uint32_t r = a >= 0x38800000u ? normal : sub;
    r = a >= 0x477ff000u ? 0x7f800000u : r; /* >= 65520 rounds to Inf */
    r = a > 0x7f800000u ? (a | 0x00400000u) : r; /* NaN stays (quiet) NaN */
    return af_bits_f32(s | r);
}

static inline float af_round_f32_to_bf16(float x) {
    uint32_t u = af_f32_bits(x);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    r = (u & 0x7fffffffu) > 0x7f800000u ? (u | 0x00400000u) : r;
    return af_bits_f32(r);
}

float af_round_tf32(float x) {
    uint32_t u = af_f32_bits(x);
    uint32_t r = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
    r = (u & 0x7fffffffu) >= 0x7f800000u ? u : r;
    return af_bits_f32(r);
}

float af_round_f32(float x, af_dtype dt) {
    switch (dt) {
    case AF_F16: return af_round_f32_to_f16(x);
    case AF_BF16: return af_round_f32_to_bf16(x);
    case AF_E4M3:
    case AF_E5M2: return (float)af_fp8_to_f64(af_fp8_from_f64((double)x, dt, 0), dt);
    case AF_F32:
    case AF_F64:
    case AF_BOOL:
    case AF_I32:
    case AF_DTYPE_COUNT: break;
    }
    return x;
}

void af_round_f32_array(float *x, size_t n, af_dtype dt) {
    if (dt == AF_F16) {
        for (size_t i = 0; i < n; i++) x[i] = af_round_f32_to_f16(x[i]);
    } else if (dt == AF_BF16) {
        for (size_t i = 0; i < n; i++) x[i] = af_round_f32_to_bf16(x[i]);
    }
}

void af_round_tf32_array(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = af_round_tf32(x[i]);
}

/* float64 -> 16-bit format in one rounding, on the bits. Normal range: add half an ulp
 * of the target minus one plus the kept lsb (ties to even), drop the low mantissa bits,
 * rebias the exponent; a carry into the exponent is the correct rounding up. Subnormal
 * range: the quantum is fixed (2^-24, 2^-133), so nearbyint of the scaled value is the
 * encoding (and 1 << mant there is the smallest normal, encoded the same way). */
static uint16_t af_half_from_f64(double x, int mant, int bias, uint64_t inf_from, uint64_t normal_from,
                                 double sub_scale, uint16_t inf_bits, uint16_t nan_bits) {
    uint64_t u;
    memcpy(&u, &x, 8);
    uint16_t sign = (uint16_t)((u >> 48) & 0x8000u);
    uint64_t a = u & 0x7fffffffffffffffull;
    if (a > 0x7ff0000000000000ull) return (uint16_t)(sign | nan_bits);
    if (a >= inf_from) return (uint16_t)(sign | inf_bits);
    if (a >= normal_from) {
        int drop = 52 - mant;
        uint64_t r = (a + ((1ull << (drop - 1)) - 1) + ((a >> drop) & 1)) >> drop;
        return (uint16_t)(sign | (uint16_t)(r - ((uint64_t)(1023 - bias) << mant)));
    }
    return (uint16_t)(sign | (uint16_t)nearbyint(fabs(x) * sub_scale));
}

uint16_t af_f16_from_f64(double x) {
    /* Inf from 65520 (the tie above 65504 rounds to even, 2^16), normal from 2^-14 */
    return af_half_from_f64(x, 10, 15, 0x40effe0000000000ull, 0x3f10000000000000ull, 0x1p24, 0x7c00u, 0x7e00u);
}

uint16_t af_bf16_from_f64(double x) {
    /* Inf from (2 - 2^-8) 2^127, normal from 2^-126 */
    return af_half_from_f64(x, 7, 127, 0x47eff00000000000ull, 0x3810000000000000ull, 0x1p133, 0x7f80u, 0x7fc0u);
}

uint16_t af_f16_from_f32(float x) { return af_f16_from_f64((double)x); }

uint16_t af_bf16_from_f32(float x) { return (uint16_t)(af_f32_bits(af_round_f32_to_bf16(x)) >> 16); }

float af_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    if (em >= 0x7c00u) return af_bits_f32(sign | 0x7f800000u | ((em & 0x3ffu) << 13));
    /* Place exponent and mantissa in f32 position, then rebias by 2^112 (= 2^(127-15));
     * the multiply also normalizes f16 subnormals exactly. */
    float f = af_bits_f32(em << 13) * 0x1p112f;
    return af_bits_f32(sign | af_f32_bits(f));
}

float af_bf16_to_f32(uint16_t b) { return af_bits_f32((uint32_t)b << 16); }

/* float64 -> FP8: round the magnitude once in double arithmetic (the quantum of its binade,
 * or of the smallest normal one below it, as af_round_f64_reference does), then place
 * exponent and mantissa. A result past the largest finite value is the overflow encoding:
 * NaN (S.1111.111) for e4m3fn, Inf (S.11111.00) for e5m2. */
uint8_t af_fp8_from_f64(double x, af_dtype dt, int saturate) {
    const af_fmt f = af_dtype_fmt(dt);
    const int bias = dt == AF_E5M2 ? 15 : 7;
    const uint8_t sign = signbit(x) ? 0x80u : 0u;
    const uint8_t nan = dt == AF_E5M2 ? 0x7eu : 0x7fu, over = dt == AF_E5M2 ? 0x7cu : 0x7fu;
    if (isnan(x)) return (uint8_t)(sign | nan);
    double a = fabs(x);
    if (saturate && a > f.max) a = f.max;
    if (isinf(a)) return (uint8_t)(sign | over);
    if (a == 0.0) return sign;
    int e;
    (void)frexp(a, &e);
    int ue = e - 1 < f.emin ? f.emin : e - 1;
    double quantum = ldexp(1.0, ue - f.mant);
    double r = nearbyint(a / quantum) * quantum;
    if (r > f.max) return (uint8_t)(sign | over);
    if (r == 0.0) return sign;
    int re = ilogb(r);
    if (re < f.emin) /* subnormal: exponent field 0, the mantissa counts quanta of 2^(emin - mant) */
        return (uint8_t)(sign | (uint8_t)(r / ldexp(1.0, f.emin - f.mant)));
    unsigned m = (unsigned)((r / ldexp(1.0, re) - 1.0) * (double)(1u << f.mant));
    return (uint8_t)(sign | (unsigned)(re + bias) << f.mant | m);
}

double af_fp8_to_f64(uint8_t bits, af_dtype dt) {
    const int e5 = dt == AF_E5M2;
    const int mant = e5 ? 2 : 3, bias = e5 ? 15 : 7;
    const unsigned em = bits & 0x7fu, ex = em >> mant, m = em & ((1u << mant) - 1u);
    const double s = (bits & 0x80u) ? -1.0 : 1.0;
    if (!e5 && em == 0x7fu) return copysign((double)NAN, s);
    if (e5 && ex == 31u) return m ? copysign((double)NAN, s) : s * HUGE_VAL;
    if (ex == 0) return s * ldexp((double)m, 1 - bias - mant);
    return s * ldexp((double)((1u << mant) | m), (int)ex - bias - mant);
}

double af_dtype_load(af_dtype dt, const void *base, size_t off) {
    const unsigned char *p = (const unsigned char *)base + off;
    switch (dt) {
    case AF_F32: {
        float f;
        memcpy(&f, p, 4);
        return (double)f;
    }
    case AF_F16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return (double)af_f16_to_f32(h);
    }
    case AF_BF16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return (double)af_bf16_to_f32(h);
    }
    case AF_F64: {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    case AF_BOOL: return *p ? 1.0 : 0.0;
    case AF_I32: {
        int32_t i;
        memcpy(&i, p, 4);
        return (double)i;
    }
    case AF_E4M3:
    case AF_E5M2: return af_fp8_to_f64(*p, dt);
    case AF_DTYPE_COUNT: break;
    }
    return 0.0;
}

void af_dtype_store(af_dtype dt, void *base, size_t off, double x) {
    unsigned char *p = (unsigned char *)base + off;
    switch (dt) {
    case AF_F32: {
        float f = (float)x;
        memcpy(p, &f, 4);
        return;
    }
    case AF_F16: {
        uint16_t h = af_f16_from_f64(x);
        memcpy(p, &h, 2);
        return;
    }
    case AF_BF16: {
        uint16_t h = af_bf16_from_f64(x);
        memcpy(p, &h, 2);
        return;
    }
    case AF_F64: memcpy(p, &x, 8); return;
    case AF_BOOL: *p = (x != 0.0) ? 1 : 0; return;
    case AF_I32: {
        int32_t i = (int32_t)x;
        memcpy(p, &i, 4);
        return;
    }
    case AF_E4M3:
    case AF_E5M2: *p = af_fp8_from_f64(x, dt, 0); return;
    case AF_DTYPE_COUNT: break;
    }
}
