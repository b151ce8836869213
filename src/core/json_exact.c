/* json_exact.c - exact JSON numbers (see json_exact.h). */
#include "json_exact.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

cJSON *af_json_double(double x) {
    if (isnan(x)) return cJSON_CreateString("nan");
    if (isinf(x)) return cJSON_CreateString(x > 0 ? "inf" : "-inf");
    char buf[40];
    if (x == trunc(x) && fabs(x) < 1e15) { /* an integer (most case fields): exact as such */
        snprintf(buf, sizeof buf, "%.0f", x);
        return cJSON_CreateRaw(buf);
    }
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, x);
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

