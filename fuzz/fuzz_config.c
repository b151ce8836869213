/* fuzz_config.c - harness settings from ATTNFUZZ_* variables (see fuzz_config.h). */
#include "fuzz_config.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/relation.h"

/* Splits buf in place at sep into at most max non-empty tokens (blanks trimmed). */
static size_t af_fuzz_config_split(char *buf, char sep, const char **out, size_t max) {
    size_t n = 0;
    char *p = buf;
    while (p && *p) {
        char *end = strchr(p, sep);
        if (end) *end = 0;
        while (isspace((unsigned char)*p)) p++;
        size_t len = strlen(p);
        while (len > 0 && isspace((unsigned char)p[len - 1])) p[--len] = 0;
        if (len > 0) {
            if (n == max) return max + 1;
            out[n++] = p;
        }
        p = end ? end + 1 : NULL;
    }
    return n;
}

static af_status af_fuzz_config_copy(char *dst, size_t cap, const char *name, const char *val, af_error *err) {
    AF_RETURN_ERROR_IF(strlen(val) >= cap, err, AF_ERR_INVALID, "%s: value longer than %zu characters", name, cap - 1);
    memcpy(dst, val, strlen(val) + 1);
    return AF_OK;
}

static af_status af_fuzz_config_double(const char *name, const char *val, double lo, double hi, double *out,
                                       af_error *err) {
    char *end;
    double v = strtod(val, &end);
    AF_RETURN_ERROR_IF(end == val || *end || !(v >= lo && v <= hi), err, AF_ERR_INVALID,
                       "%s=\"%s\": want a number in [%g, %g]", name, val, lo, hi);
    *out = v;
    return AF_OK;
}

static bool af_fuzz_config_flag(const char *val) {
    return val && *val && strcmp(val, "0") != 0 && strcmp(val, "false") != 0 && strcmp(val, "no") != 0;
}

static af_status af_fuzz_config_relations(af_exec_config *x, char *list, af_error *err) {
    const char *names[32];
    size_t n = af_fuzz_config_split(list, ',', names, 32);
    AF_RETURN_ERROR_IF(n > 32, err, AF_ERR_INVALID, "ATTNFUZZ_RELATIONS: more than 32 names");
    for (size_t i = 0; i < n; i++) {
        if (strcmp(names[i], "all") == 0) {
            for (int r = 0; r < AF_REL_COUNT; r++) x->relations[r] = true;
            continue;
        }
        int r = af_relation_from_name(names[i]);
        if (r < 0) {
            char known[256] = "all";
            size_t k = strlen(known);
            for (int q = 0; q < AF_REL_COUNT && k < sizeof known; q++) {
                int w = snprintf(known + k, sizeof known - k, ", %s", af_relation_names[q]);
                if (w > 0) k += (size_t)w;
            }
            return af_error_set(err, AF_ERR_INVALID, "ATTNFUZZ_RELATIONS: unknown relation \"%s\" (known: %s)",
                                names[i], known);
        }
        x->relations[r] = true;
    }
    return AF_OK;
}

af_status af_fuzz_config_from_env(af_fuzz_config *cfg, af_error *err) {
    memset(cfg, 0, sizeof *cfg);
    af_exec_config *x = &cfg->exec;
    af_oracle_opts_default(&x->oracle);
    cfg->crashes = "crashes";
    cfg->max_flops = AF_FUZZ_DEFAULT_MAX_FLOPS;

    const char *v;
    bool selected = false, relations = false;
    if ((v = getenv("ATTNFUZZ_BACKENDS")) && *v) {
        AF_TRY(af_fuzz_config_copy(cfg->backends_buf, sizeof cfg->backends_buf, "ATTNFUZZ_BACKENDS", v, err));
        x->n_backends = af_fuzz_config_split(cfg->backends_buf, ',', x->backends, AF_EXEC_MAX_BACKENDS);
        AF_RETURN_ERROR_IF(x->n_backends > AF_EXEC_MAX_BACKENDS, err, AF_ERR_INVALID,
                           "ATTNFUZZ_BACKENDS: more than %d backends", AF_EXEC_MAX_BACKENDS);
        selected = x->n_backends > 0;
    }
    if ((v = getenv("ATTNFUZZ_PAIRS")) && *v) {
        AF_TRY(af_fuzz_config_copy(cfg->pairs_buf, sizeof cfg->pairs_buf, "ATTNFUZZ_PAIRS", v, err));
        x->n_pairs = af_fuzz_config_split(cfg->pairs_buf, ';', x->pairs, AF_EXEC_MAX_BACKENDS);
        AF_RETURN_ERROR_IF(x->n_pairs > AF_EXEC_MAX_BACKENDS, err, AF_ERR_INVALID,
                           "ATTNFUZZ_PAIRS: more than %d pairs", AF_EXEC_MAX_BACKENDS);
        for (size_t i = 0; i < x->n_pairs; i++) {
            const char *comma = strchr(x->pairs[i], ',');
            AF_RETURN_ERROR_IF(!comma || comma == x->pairs[i] || !comma[1], err, AF_ERR_INVALID,
                               "ATTNFUZZ_PAIRS: \"%s\" is not A,B (pairs are separated by ';')", x->pairs[i]);
        }
        selected = selected || x->n_pairs > 0;
    }
    if ((v = getenv("ATTNFUZZ_RELATIONS")) && *v) {
        char buf[512];
        AF_TRY(af_fuzz_config_copy(buf, sizeof buf, "ATTNFUZZ_RELATIONS", v, err));
        AF_TRY(af_fuzz_config_relations(x, buf, err));
        relations = true;
    }
    if (!selected) {
        /* the default pair, with every relation unless a list was given */
        bool rel[AF_REL_COUNT];
        memcpy(rel, x->relations, sizeof rel);
        af_oracle_opts oracle = x->oracle;
        af_exec_config_default(x);
        x->oracle = oracle;
        if (relations) memcpy(x->relations, rel, sizeof rel);
    }
    x->sample_relations = true;
    if ((v = getenv("ATTNFUZZ_SAMPLE_RELATIONS")) && *v) x->sample_relations = af_fuzz_config_flag(v);

    if ((v = getenv("ATTNFUZZ_CRASHES")) && *v) {
        AF_TRY(af_fuzz_config_copy(cfg->crashes_buf, sizeof cfg->crashes_buf, "ATTNFUZZ_CRASHES", v, err));
        cfg->crashes = cfg->crashes_buf;
    }
    if ((v = getenv("ATTNFUZZ_STATS")) && *v) {
        AF_TRY(af_fuzz_config_copy(cfg->stats_buf, sizeof cfg->stats_buf - 16, "ATTNFUZZ_STATS", v, err));
        cfg->stats = cfg->stats_buf;
    }
    cfg->abort_on_finding = af_fuzz_config_flag(getenv("ATTNFUZZ_ABORT"));
    if ((v = getenv("ATTNFUZZ_MINIMIZE")) && *v) cfg->no_minimize = !af_fuzz_config_flag(v);
    if ((v = getenv("ATTNFUZZ_MINIMIZE_EXECS")) && *v) {
        double n = 0.0;
        AF_TRY(af_fuzz_config_double("ATTNFUZZ_MINIMIZE_EXECS", v, 1.0, 1e6, &n, err));
        cfg->minimize_execs = (unsigned)n;
    }
    cfg->print_features = af_fuzz_config_flag(getenv("ATTNFUZZ_PRINT_FEATURES"));
    cfg->quiet = af_fuzz_config_flag(getenv("ATTNFUZZ_QUIET"));
    if ((v = getenv("ATTNFUZZ_BUDGET_MIB")) && *v) {
        double mib = 0.0;
        AF_TRY(af_fuzz_config_double("ATTNFUZZ_BUDGET_MIB", v, 1.0 / 1024.0, 1 << 20, &mib, err));
        x->budget = (size_t)(mib * 1048576.0);
    }
    if ((v = getenv("ATTNFUZZ_MAX_FLOPS")) && *v)
        AF_TRY(af_fuzz_config_double("ATTNFUZZ_MAX_FLOPS", v, 1.0, 1e18, &cfg->max_flops, err));
    if ((v = getenv("ATTNFUZZ_KNOWN")) && *v) {
        if (!strcmp(v, "0") || !strcmp(v, "none")) {
            cfg->no_known = true;
        } else {
            AF_TRY(af_fuzz_config_copy(cfg->known_buf, sizeof cfg->known_buf, "ATTNFUZZ_KNOWN", v, err));
            cfg->n_known = af_fuzz_config_split(cfg->known_buf, ':', cfg->known, 8);
            AF_RETURN_ERROR_IF(cfg->n_known > 8, err, AF_ERR_INVALID, "ATTNFUZZ_KNOWN: more than 8 files");
        }
    }
    if ((v = getenv("ATTNFUZZ_WAIVE")) && *v) {
        bool row = strcmp(v, "masked_row_nan") == 0, leak = strcmp(v, "masked_value_leak") == 0;
        AF_RETURN_ERROR_IF(!row && !leak, err, AF_ERR_INVALID,
                           "ATTNFUZZ_WAIVE=\"%s\": only masked_row_nan or masked_value_leak can be waived", v);
        x->oracle.waive_masked_row_nan |= row;
        x->oracle.waive_masked_value_leak |= leak;
    }
    return AF_OK;
}

void af_fuzz_config_take_flags(int *argc, char **argv) {
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        const char *body = strncmp(a, "--attnfuzz_", 11) == 0 ? a + 2 : strncmp(a, "-attnfuzz_", 10) == 0 ? a + 1 : NULL;
        const char *eq = body ? strchr(body, '=') : NULL;
        if (!eq) {
            argv[out++] = argv[i];
            continue;
        }
        char name[128];
        size_t len = (size_t)(eq - body);
        if (len >= sizeof name) len = sizeof name - 1;
        for (size_t k = 0; k < len; k++) name[k] = (char)toupper((unsigned char)body[k]);
        name[len] = 0;
        setenv(name, eq + 1, 1);
    }
    argv[out] = NULL;
    *argc = out;
}

void af_fuzz_config_fix_blas(char **argv) {
    const char *core = af_blas_better_coretype();
    if (!core) return;
    setenv("OPENBLAS_CORETYPE", core, 1);
    execv("/proc/self/exe", argv); /* returns only on failure: then run as we are */
    fprintf(stderr, "attnfuzz: OpenBLAS runs generic kernels; set OPENBLAS_CORETYPE=%s for speed\n", core);
}
