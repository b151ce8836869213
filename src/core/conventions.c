/* conventions.c - the names of the conventions a backend may declare (conventions.h). */
#include "attnfuzz/conventions.h"

const char *const af_masked_rows_names[AF_ROWS_COUNT] = {"zero", "nan", "mean", "unmasked"};
_Static_assert(sizeof(af_masked_rows_names) / sizeof(af_masked_rows_names[0]) == AF_ROWS_COUNT, "names");
const char *const af_lse_masked_names[AF_LSE_MASKED_COUNT] = {"-inf", "zero", "inf", "nan"};
_Static_assert(sizeof(af_lse_masked_names) / sizeof(af_lse_masked_names[0]) == AF_LSE_MASKED_COUNT, "names");
const char *const af_fp8_out_names[AF_FP8_OUT_COUNT] = {"dtype", "v_amax"};
_Static_assert(sizeof(af_fp8_out_names) / sizeof(af_fp8_out_names[0]) == AF_FP8_OUT_COUNT, "names");
