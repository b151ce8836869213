/* conventions.c - the names of the conventions a backend may declare (conventions.h). */
#include "attnfuzz/conventions.h"

const char *const af_masked_rows_names[AF_ROWS_COUNT] = {"zero", "nan", "mean", "unmasked"};
_Static_assert(sizeof(af_masked_rows_names) / sizeof(af_masked_rows_names[0]) == AF_ROWS_COUNT, "names");
