/* status.c - status names and the caller-owned error buffer. */
#include "attnfuzz/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const af_status_names[AF_STATUS_COUNT] = {
    "ok", "nomem", "invalid", "format", "io", "unsupported",
    "backend", "crash", "timeout", "exists", "interrupted",
};
_Static_assert(sizeof(af_status_names) / sizeof(af_status_names[0]) == AF_STATUS_COUNT,
               "every status has a name");

const char *af_status_str(af_status s) {
    if ((unsigned)s >= AF_STATUS_COUNT) return "unknown";
    return af_status_names[s];
}

af_status af_error_set(af_error *err, af_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

void af_error_prefix(af_error *err, const char *fmt, ...) {
    if (!err) return;
    char head[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(head, sizeof head - 2, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    size_t hn = strlen(head);
    memcpy(head + hn, ": ", 3);
    hn += 2;
    size_t old = strnlen(err->msg, sizeof err->msg - 1);
    if (hn + old >= sizeof err->msg) old = sizeof err->msg - 1 - hn; /* keep the tail short */
    memmove(err->msg + hn, err->msg, old);
    memcpy(err->msg, head, hn);
    err->msg[hn + old] = 0;
}

void af_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "attnfuzz: internal invariant failed: %s (%s:%d)\n", expr, file, line);
    abort();
}
