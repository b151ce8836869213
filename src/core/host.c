/* host.c - the host's facts that known entries' scopes name (host.h): CPU flags read once,
 * the libraries a backend reports, version specifiers. */
#include "attnfuzz/host.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *af_host_lib(const af_host_libs *libs, const char *name) {
    for (int i = 0; libs && i < libs->n; i++)
        if (!strcmp(libs->name[i], name)) return libs->version[i];
    return NULL;
}

/* --- CPU flags ------------------------------------------------------------------------- */

/* A flags line is about 1.5 KiB on current x86 CPUs; a longer one is cut at a name. */
static char af_host_flags[16384];
static bool af_host_flags_known;
static pthread_once_t af_host_flags_once = PTHREAD_ONCE_INIT;

/* Copies the names of s (blanks or commas between them) into af_host_flags, one space
 * apart; a name that would not fit whole is left out. */
static void af_host_flags_set(const char *s) {
    size_t n = 0;
    while (*s) {
        while (*s == ' ' || *s == '\t' || *s == ',' || *s == '\n') s++;
        size_t w = strcspn(s, " \t,\n");
        if (w && n + w + 2 <= sizeof af_host_flags) {
            if (n) af_host_flags[n++] = ' ';
            memcpy(af_host_flags + n, s, w);
            n += w;
        }
        s += w;
    }
    af_host_flags[n] = 0;
    af_host_flags_known = true;
}

static void af_host_flags_read(void) {
    const char *env = getenv("ATTNFUZZ_CPU_FLAGS");
    if (env) {
        af_host_flags_set(env);
        return;
    }
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    /* "flags\t\t: fpu vme ..." (x86); other architectures say "Features" */
    static char line[sizeof af_host_flags];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) && strncmp(line, "Features", 8)) continue;
        const char *colon = strchr(line, ':');
        if (!colon) continue;
        af_host_flags_set(colon + 1);
        break;
    }
    fclose(f);
}

const char *af_host_cpu_flags(void) {
    pthread_once(&af_host_flags_once, af_host_flags_read);
    return af_host_flags_known ? af_host_flags : NULL;
}

bool af_host_has_flag(const char *flags, const char *flag) {
    size_t len = strlen(flag);
    if (!flags || !len) return false;
    for (const char *p = flags; *p;) {
        while (*p == ' ' || *p == ',') p++;
        size_t w = strcspn(p, " ,");
        if (w == len && !memcmp(p, flag, len)) return true;
        p += w;
    }
    return false;
}

/* --- versions --------------------------------------------------------------------------- */

#define AF_HOST_VER_PARTS 8

/* The release components of version s (a leading 'v' skipped; parsing stops at the first
 * character that is no digit or dot between digits); how many. */
static int af_host_parse(const char *s, unsigned long long part[AF_HOST_VER_PARTS]) {
    int n = 0;
    if (*s == 'v' || *s == 'V') s++;
    while (n < AF_HOST_VER_PARTS && isdigit((unsigned char)*s)) {
        unsigned long long v = 0;
        while (isdigit((unsigned char)*s)) {
            if (v < 1000000000000ULL) v = v * 10 + (unsigned long long)(*s - '0');
            s++;
        }
        part[n++] = v;
        if (s[0] != '.' || !isdigit((unsigned char)s[1])) break;
        s++;
    }
    return n;
}

static int af_host_cmp_parts(const unsigned long long *a, int na, const unsigned long long *b, int nb) {
    for (int i = 0; i < na || i < nb; i++) {
        unsigned long long x = i < na ? a[i] : 0, y = i < nb ? b[i] : 0;
        if (x != y) return x < y ? -1 : 1;
    }
    return 0;
}

int af_host_version_cmp(const char *a, const char *b) {
    unsigned long long pa[AF_HOST_VER_PARTS], pb[AF_HOST_VER_PARTS];
    int na = af_host_parse(a, pa), nb = af_host_parse(b, pb);
    return af_host_cmp_parts(pa, na, pb, nb);
}

typedef enum { AF_HV_EQ, AF_HV_NE, AF_HV_LE, AF_HV_GE, AF_HV_LT, AF_HV_GT, AF_HV_COMPAT } af_host_op;

/* One clause [s, s + len) of a specifier: its operator, version components and whether
 * it ends in ".*". false (why says it) when malformed. */
static bool af_host_clause(const char *s, size_t len, af_host_op *op, unsigned long long part[AF_HOST_VER_PARTS],
                           int *np, bool *prefix, const char **why) {
    while (len && (*s == ' ' || *s == '\t')) s++, len--;
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t')) len--;
    static const char *const ops[] = {"==", "!=", "<=", ">=", "<", ">", "~="};
    static const af_host_op codes[] = {AF_HV_EQ, AF_HV_NE, AF_HV_LE, AF_HV_GE, AF_HV_LT, AF_HV_GT, AF_HV_COMPAT};
    size_t ol = 0;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0] && !ol; i++) {
        size_t l = strlen(ops[i]);
        if (len >= l && !memcmp(s, ops[i], l)) {
            ol = l;
            *op = codes[i];
        }
    }
    if (!len) return *why = "an empty clause", false;
    if (!ol) return *why = "no operator (==, !=, <, <=, >, >=, ~=)", false;
    s += ol, len -= ol;
    while (len && (*s == ' ' || *s == '\t')) s++, len--;
    *prefix = len >= 2 && !memcmp(s + len - 2, ".*", 2);
    if (*prefix) {
        if (*op != AF_HV_EQ && *op != AF_HV_NE) return *why = ".* after an operator other than == or !=", false;
        len -= 2;
    }
    /* digits and dots, each dot between digits */
    if (!len || !isdigit((unsigned char)s[0]) || !isdigit((unsigned char)s[len - 1]))
        return *why = "the version must be numbers separated by dots", false;
    *np = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]) && !(s[i] == '.' && isdigit((unsigned char)s[i + 1])))
            return *why = "the version must be numbers separated by dots", false;
        if (s[i] == '.' || i == 0) (*np)++;
    }
    if (*np > AF_HOST_VER_PARTS) return *why = "more than 8 version components", false;
    if (*op == AF_HV_COMPAT && *np < 2) return *why = "~= needs at least two components", false;
    char buf[128];
    if (len >= sizeof buf) return *why = "a version too long", false;
    memcpy(buf, s, len);
    buf[len] = 0;
    *np = af_host_parse(buf, part);
    return true;
}

af_status af_host_spec_check(const char *spec, af_error *err) {
    const char *s = spec;
    for (;;) {
        size_t len = strcspn(s, ",");
        af_host_op op;
        unsigned long long part[AF_HOST_VER_PARTS];
        int np;
        bool prefix;
        const char *why = NULL;
        if (!af_host_clause(s, len, &op, part, &np, &prefix, &why))
            return af_error_set(err, AF_ERR_FORMAT, "version specifier \"%s\": \"%.*s\": %s", spec, (int)len, s, why);
        if (!s[len]) return AF_OK;
        s += len + 1;
    }
}

bool af_host_spec_holds(const char *spec, const char *version) {
    unsigned long long have[AF_HOST_VER_PARTS];
    int nh = af_host_parse(version, have);
    if (!nh) return false; /* no release number: nothing to compare */
    const char *s = spec;
    for (;;) {
        size_t len = strcspn(s, ",");
        af_host_op op;
        unsigned long long part[AF_HOST_VER_PARTS];
        int np;
        bool prefix;
        const char *why;
        if (!af_host_clause(s, len, &op, part, &np, &prefix, &why)) return false;
        int c = af_host_cmp_parts(have, nh, part, np);
        bool ok;
        if (prefix || op == AF_HV_COMPAT) {
            /* the first k components equal (a missing one is 0): ==X.*; ~=X.Y is >=X.Y and ==X.* */
            int k = op == AF_HV_COMPAT ? np - 1 : np;
            bool same = af_host_cmp_parts(have, nh < k ? nh : k, part, k) == 0;
            ok = op == AF_HV_NE ? !same : op == AF_HV_COMPAT ? same && c >= 0 : same;
        } else {
            switch (op) {
            case AF_HV_EQ: ok = c == 0; break;
            case AF_HV_NE: ok = c != 0; break;
            case AF_HV_LE: ok = c <= 0; break;
            case AF_HV_GE: ok = c >= 0; break;
            case AF_HV_LT: ok = c < 0; break;
            case AF_HV_GT: ok = c > 0; break;
            case AF_HV_COMPAT: ok = false; break; /* handled above */
            default: ok = false;
            }
        }
        if (!ok) return false;
        if (!s[len]) return true;
        s += len + 1;
    }
}
