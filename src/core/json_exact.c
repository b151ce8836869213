/* json_exact.c - exact JSON numbers (see json_exact.h). */
#include "json_exact.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Decimal digits of an integer of magnitude below 2^63 into buf (no printf: this runs
 * for every field of every case a worker is sent). */
static void af_json_integer(char *buf, double x) {
    char tmp[24];
    int n = 0;
    unsigned long long u = (unsigned long long)fabs(x);
    do tmp[n++] = (char)('0' + u % 10); while ((u /= 10) != 0);
    char *p = buf;
    if (signbit(x)) *p++ = '-'; /* -0 stays -0 */
    while (n) *p++ = tmp[--n];
    *p = '\0';
}

cJSON *af_json_double(double x) {
    if (isnan(x)) return cJSON_CreateString("nan");
    if (isinf(x)) return cJSON_CreateString(x > 0 ? "inf" : "-inf");
    char buf[40];
    if (x == trunc(x) && fabs(x) < 1e15) { /* an integer (most case fields): exact as such */
        af_json_integer(buf, x);
        return cJSON_CreateRaw(buf);
    }
    static const char *const fmts[] = {"%.15g", "%.16g", "%.17g"};
    for (int i = 0; i < 3; i++) {
        snprintf(buf, sizeof buf, fmts[i], x);
        if (strtod(buf, NULL) == x) break;
    }
    return cJSON_CreateRaw(buf);
}

bool af_json_exact_numbers(cJSON *item) {
    for (cJSON *it = item; it; it = it->next) {
        if (cJSON_IsNumber(it) && isfinite(it->valuedouble)) {
            cJSON *raw = af_json_double(it->valuedouble);
            if (!raw || !cJSON_IsRaw(raw)) {
                cJSON_Delete(raw);
                return false;
            }
            it->type = cJSON_Raw; /* take over raw's text; the key and links stay */
            it->valuestring = raw->valuestring;
            raw->valuestring = NULL;
            cJSON_Delete(raw);
        } else if ((cJSON_IsObject(it) || cJSON_IsArray(it)) && !af_json_exact_numbers(it->child)) {
            return false;
        }
    }
    return true;
}

