/* json_exact.c - exact JSON numbers (see json_exact.h). */
#include "json_exact.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* No printf: this runs for every field of every case a worker is sent. */
size_t af_json_integer(char *buf, bool neg, unsigned long long u) {
    char tmp[24];
    size_t n = 0, k = 0;
    do tmp[n++] = (char)('0' + u % 10); while ((u /= 10) != 0);
    if (neg) buf[k++] = '-';
    while (n) buf[k++] = tmp[--n];
    buf[k] = '\0';
    return k;
}

size_t af_json_format(char *buf, double x) {
    double a = fabs(x);
    if (x == trunc(x) && a < 1e15) /* an integer (most case fields): exact as such */
        return af_json_integer(buf, signbit(x), (unsigned long long)a);
    if (a < 0x1p30 && a * 16.0 == trunc(a * 16.0)) {
        /* a multiple of 1/16 (log10 magnitudes are quarters): integer part, a point and
         * at most four exact decimals, as %.15g would print it (at most 14 digits) */
        double ip = trunc(a);
        size_t k = af_json_integer(buf, signbit(x), (unsigned long long)ip);
        unsigned frac = (unsigned)((a - ip) * 16.0) * 625u; /* ten-thousandths, exact */
        buf[k++] = '.';
        for (unsigned div = 1000; frac; div /= 10) {
            buf[k++] = (char)('0' + frac / div);
            frac %= div;
        }
        buf[k] = '\0';
        return k;
    }
    static const char *const fmts[] = {"%.15g", "%.16g", "%.17g"};
    int w = 0;
    for (int i = 0; i < 3; i++) {
        w = snprintf(buf, AF_JSON_NUMBER_MAX, fmts[i], x);
        if (strtod(buf, NULL) == x) break;
    }
    return w > 0 ? (size_t)w : 0;
}

cJSON *af_json_double(double x) {
    if (isnan(x)) return cJSON_CreateString("nan");
    if (isinf(x)) return cJSON_CreateString(x > 0 ? "inf" : "-inf");
    char buf[AF_JSON_NUMBER_MAX];
    af_json_format(buf, x);
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
