/* host.h - the facts about the host that a known entry's scope names (docs/known.md,
 * "Scope"): the CPU's feature flags, read once from /proc/cpuinfo, and the libraries a
 * backend reports in its worker hello (`"libs": {"torch": "2.11.0", "cudnn": "9.19.0",
 * "sm": "90"}`), with PEP 440-style version specifiers to compare them against.
 *
 * Versions compare numerically component by component ("2.11.0" > "2.9.1"; a missing
 * component is 0, so "2.11" == "2.11.0"); only the release part counts: a local label
 * ("+cu124") and a pre/post/dev suffix ("rc1", ".dev2025") are ignored. */
#ifndef ATTNFUZZ_HOST_H
#define ATTNFUZZ_HOST_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AF_HOST_LIBS_MAX 16     /* libraries a hello may name */
#define AF_HOST_LIB_NAME_MAX 32 /* a library's name, NUL included */
#define AF_HOST_LIB_VER_MAX 64  /* its version, NUL included */

/* What a backend reports about the libraries under it (a worker's hello "libs"), and the
 * GPU it runs on as "sm" ("90"). A plain value: n == 0 reports nothing. */
typedef struct af_host_libs {
    int n;
    char name[AF_HOST_LIBS_MAX][AF_HOST_LIB_NAME_MAX];
    char version[AF_HOST_LIBS_MAX][AF_HOST_LIB_VER_MAX];
} af_host_libs;

/* The version libs reports for name, NULL when none (libs may be NULL). */
const char *af_host_lib(const af_host_libs *libs, const char *name);

/* This CPU's flags, space-separated, as the first "flags" line of /proc/cpuinfo lists them
 * ("avx2 fma f16c ..."). $ATTNFUZZ_CPU_FLAGS (spaces or commas between names), when set,
 * replaces them: tests pretend to be a host with or without a flag. Read once, on the
 * first call (thread-safe); the text lives as long as the process. NULL when neither
 * exists (not Linux): the flags are unknown. */
const char *af_host_cpu_flags(void);

/* Is flag one of the space- or comma-separated names in flags? (false for NULL flags) */
bool af_host_has_flag(const char *flags, const char *flag);

/* Compares versions a and b: <0, 0 or >0 (see the top of this file). */
int af_host_version_cmp(const char *a, const char *b);

/* Checks a version specifier: clauses separated by commas, all of which must hold, each
 * an operator (==, !=, <, <=, >, >=, ~=) and a version of digits and dots; == and != may
 * end in ".*" (a prefix: "==9.19.*"). AF_ERR_FORMAT says what is wrong. */
af_status af_host_spec_check(const char *spec, af_error *err);

/* Does version satisfy spec (a specifier af_host_spec_check accepts; one it does not is
 * never satisfied)? "~=2.11" is ">=2.11,==2.*"; "~=2.11.1" is ">=2.11.1,==2.11.*". */
bool af_host_spec_holds(const char *spec, const char *version);

#ifdef __cplusplus
}
#endif
#endif
