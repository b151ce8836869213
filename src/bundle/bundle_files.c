/* bundle_files.c - names inside a bundle directory: the bundle's own name, joining, the
 * out.<backend> naming rule, and the check that a name recorded in case.json stays inside
 * the bundle. */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "bundle_internal.h"

void af_bundle_name(af_kind kind, uint64_t signature, char *buf, size_t len) {
    const char *k = (unsigned)kind < AF_KIND_COUNT ? af_kind_names[kind] : "unknown";
    snprintf(buf, len, "%s-%016llx", k, (unsigned long long)signature);
}

af_status af_bundle_join(char *buf, size_t len, const char *dir, const char *name, af_error *err) {
    int w = snprintf(buf, len, "%s/%s", dir, name);
    AF_RETURN_ERROR_IF(w < 0 || (size_t)w >= len, err, AF_ERR_IO, "%s/%s: path is too long", dir, name);
    return AF_OK;
}

bool af_bundle_is_file(const char *dir, const char *name) {
    char path[PATH_MAX];
    struct stat st;
    if (af_bundle_join(path, sizeof path, dir, name, NULL) != AF_OK) return false;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A name inside the bundle directory: no separators, no way out of it. */
bool af_bundle_plain_name(const char *s) {
    size_t n = strlen(s);
    return n > 0 && n < 256 && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* "<prefix>.<backend>.npy.zst" with the backend name made safe for a file name: worker and
 * plugin names hold paths and colons ("plugin:/opt/x.so:fast" -> "plugin__opt_x.so_fast"). */
void af_bundle_array_name(const char *prefix, const char *backend, char *buf, size_t len) {
    char safe[97];
    size_t n = 0;
    for (const char *p = backend; *p && n < sizeof safe - 1; p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                  ch == '-' || ch == '+' || ch == '.';
        safe[n++] = ok ? ch : '_';
    }
    safe[n] = 0;
    snprintf(buf, len, "%s.%s.npy.zst", prefix, n ? safe : "_");
}

void af_bundle_out_name(const char *backend, char *buf, size_t len) { af_bundle_array_name("out", backend, buf, len); }

void af_bundle_run2_name(const char *prefix, const char *backend, char *buf, size_t len) {
    char base[160];
    af_bundle_array_name(prefix, backend, base, sizeof base);
    base[strlen(base) - strlen(".npy.zst")] = 0;
    snprintf(buf, len, "%s.run2.npy.zst", base);
}

void af_bundle_shape_str(char *buf, size_t len, const size_t *shape, int ndim) {
    size_t n = 0;
    int w = snprintf(buf, len, "[");
    n = w > 0 ? (size_t)w : 0;
    for (int d = 0; d < ndim && n < len; d++) {
        w = snprintf(buf + n, len - n, "%s%zu", d ? ", " : "", shape[d]);
        if (w > 0) n += (size_t)w;
    }
    if (n < len) snprintf(buf + n, len - n, "]");
}

