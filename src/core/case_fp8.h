/* case_fp8.h - the FP8 part of a case inside the library: the hooks case.c, case_codec.c,
 * case_json.c, case_gen.c and case_mutate.c call (case_fp8.c), so those files name the FP8
 * part once each and know nothing of its fields. */
#ifndef ATTNFUZZ_CASE_FP8_H
#define ATTNFUZZ_CASE_FP8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnfuzz/case.h"
#include "json_write.h"

/* Repair, first of all: the format's range, f16 or bf16 as the case dtype, forward-only, no
 * serving form, each descale positive and finite within AF_FP8_DESCALE_MIN..MAX (1 without
 * FP8). */
void af_fp8_repair(af_case *c);
/* AF_OK or AF_ERR_INVALID naming the field ("fp8.descale[1] (0) must be positive"). */
af_status af_fp8_validate(const af_case *c, af_error *err);
bool af_fp8_equal(const af_case *a, const af_case *b);

/* The FP8 record, after the serving one: format (low two bits, mod 3) and kv_only (bit 2),
 * then each descale's float32 bits.
 * Missing bytes read 0 (no FP8). */
#define AF_FP8_BYTES 13
void af_fp8_decode(af_case *c, const uint8_t *p, size_t n);
void af_fp8_encode(const af_case *c, uint8_t out[AF_FP8_BYTES]);

/* "fp8": {"format": ..., "descale": [q, k, v]} (nothing without FP8); reading "fp8" of the
 * case object o (a cJSON *; absent or null: none). */
void af_fp8_write_json(af_jw *w, const af_case *c);
af_status af_fp8_read_json(af_case *c, const void *o, af_error *err);

/* Makes c an FP8 case: a format, f16 or bf16 output, descales as users compute them from
 * each tensor's amax (sometimes off by a factor). The caller repairs. */
struct af_rng;
void af_fp8_generate(af_case *c, struct af_rng *r);
/* New descales for an FP8 case's tensors as they are now (no compile key names them);
 * nothing for another case. The caller repairs. */
void af_fp8_revalue(af_case *c, struct af_rng *r);
/* One edit of an FP8 case: the other format, back to f16/bf16 inputs (no FP8), Q in or out
 * of FP8 (kv_only), or a descale redrawn. The caller repairs. */
void af_fp8_mutate(af_case *c, struct af_rng *r);

#endif
