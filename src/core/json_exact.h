/* json_exact.h - JSON numbers that read back as the same double (library-internal).
 *
 * cJSON 1.7.15 prints a double with 15 digits whenever those read back within one ulp,
 * so about one double in ten comes back different: a scale of 0.022979362286534105
 * would replay as ...102 and a metric recomputed from a bundle's arrays would not match
 * the recorded one. These helpers print the fewest digits that read back exactly. */
#ifndef ATTNFUZZ_JSON_EXACT_H
#define ATTNFUZZ_JSON_EXACT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#define AF_JSON_NUMBER_MAX 40 /* room for any number af_json_format writes, NUL included */

/* The decimal digits of u into buf (24 bytes), after a '-' when neg; NUL-terminated.
 * Returns the text's length. */
size_t af_json_integer(char *buf, bool neg, unsigned long long u);
/* A finite double as JSON number text in buf (AF_JSON_NUMBER_MAX bytes): the shortest of
 * %.15g, %.16g, %.17g that reads back as x; integers below 1e15 as plain digits (-0 as
 * "-0"). Returns the text's length. x must be finite (JSON has no Inf or NaN). */
size_t af_json_format(char *buf, double x);
/* A double as raw JSON text: a number when finite, else the string "inf", "-inf" or
 * "nan" (JSON has no such numbers; cJSON would print null). NULL on allocation failure. */
cJSON *af_json_double(double x);
/* Turns every finite number under item (and its siblings) into exact raw text. */
bool af_json_exact_numbers(cJSON *item);

#endif
