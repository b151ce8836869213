/* status.h - one status enum with stable numbers, and a caller-owned error buffer.
 *
 * Errors are values: every fallible function returns an af_status and, when given a
 * non-NULL af_error, writes a one-line message naming the object and the problem.
 * Two backends disagreeing is a finding (oracle.h), never an error. */
#ifndef ATTNFUZZ_STATUS_H
#define ATTNFUZZ_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Numbers are stable: they appear in logs and in the worker protocol. */
typedef enum af_status {
    AF_OK = 0,
    AF_ERR_NOMEM = 1,       /* an allocation failed */
    AF_ERR_INVALID = 2,     /* invalid argument or impossible case */
    AF_ERR_FORMAT = 3,      /* corrupt or unreadable data (bundle, JSON, npy, frame) */
    AF_ERR_IO = 4,          /* the operating system refused (open, write, rename, disk full) */
    AF_ERR_UNSUPPORTED = 5, /* a backend cannot run this case */
    AF_ERR_BACKEND = 6,     /* a backend reported an error */
    AF_ERR_CRASH = 7,       /* an external backend died */
    AF_ERR_TIMEOUT = 8,     /* an external backend did not answer in time */
    AF_ERR_EXISTS = 9,      /* the target already exists (bundles are never overwritten) */
    AF_ERR_INTERRUPTED = 10,/* stopped by a signal */
    AF_STATUS_COUNT
} af_status;

/* Caller-owned error record. msg is always NUL-terminated. */
typedef struct af_error {
    af_status code;
    char msg[512];
} af_error;

/* Stable lower-case name of a status ("ok", "nomem", ...); "unknown" if out of range. */
const char *af_status_str(af_status s);

/* Records code and a printf-style message in err (if err is not NULL); returns code. */
af_status af_error_set(af_error *err, af_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "context: " to the message already in err (if err is not NULL). */
void af_error_prefix(af_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Return early with a message when cond holds (zstd's RETURN_ERROR_IF). */
#define AF_RETURN_ERROR_IF(cond, err, code, ...)                                                   \
    do {                                                                                           \
        if (cond) return af_error_set((err), (code), __VA_ARGS__);                                 \
    } while (0)

/* Propagate a failing status unchanged. */
#define AF_TRY(expr)                                                                               \
    do {                                                                                           \
        af_status af_try_status_ = (expr);                                                         \
        if (af_try_status_ != AF_OK) return af_try_status_;                                        \
    } while (0)

/* An internal invariant; always on, also in release builds. */
#define AF_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) af_assert_fail(#cond, __FILE__, __LINE__);                                    \
    } while (0)
void af_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));

#ifdef __cplusplus
}
#endif
#endif
