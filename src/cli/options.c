/* options.c - the check-selection options shared by fuzz and replay. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/bundle.h"
#include "attnfuzz/known.h"
#include "attnfuzz/mem.h"
#include "cli.h"
#include "core/fileio.h"

int af_cli_relation(af_exec_config *cfg, const char *name) {
    if (!strcmp(name, "all")) {
        for (int r = 0; r < AF_REL_COUNT; r++) cfg->relations[r] = true;
        return 1;
    }
    int r = af_relation_from_name(name);
    if (r < 0) {
        fprintf(stderr, "attnfuzz: unknown relation \"%s\" (known: all", name);
        for (int k = 0; k < AF_REL_COUNT; k++) fprintf(stderr, ", %s", af_relation_names[k]);
        fprintf(stderr, ")\n");
        return -1;
    }
    cfg->relations[r] = true;
    return 1;
}

int af_cli_exec_option(af_exec_config *cfg, int opt, const char *arg, int *selected) {
    switch (opt) {
    case AF_OPT_BACKEND:
        if (cfg->n_backends == AF_EXEC_MAX_BACKENDS) {
            fprintf(stderr, "attnfuzz: at most %d --backend options\n", AF_EXEC_MAX_BACKENDS);
            return -1;
        }
        cfg->backends[cfg->n_backends++] = arg;
        *selected |= 1;
        return 1;
    case AF_OPT_PAIR:
        if (cfg->n_pairs == AF_EXEC_MAX_BACKENDS) {
            fprintf(stderr, "attnfuzz: at most %d --pair options\n", AF_EXEC_MAX_BACKENDS);
            return -1;
        }
        cfg->pairs[cfg->n_pairs++] = arg;
        *selected |= 1;
        return 1;
    case AF_OPT_RELATION:
        *selected |= 2;
        return af_cli_relation(cfg, arg);
    case AF_OPT_BUDGET: {
        char *end;
        double mib = strtod(arg, &end);
        if (*end || !(mib > 0) || mib > 1 << 20) {
            fprintf(stderr, "attnfuzz: --budget wants MiB of tensors per case, got \"%s\"\n", arg);
            return -1;
        }
        cfg->budget = (size_t)(mib * 1048576.0);
        return 1;
    }
    case AF_OPT_WAIVE:
        if (strcmp(arg, "masked_row_nan") == 0) {
            cfg->oracle.waive_masked_row_nan = true;
        } else if (strcmp(arg, "masked_value_leak") == 0) {
            cfg->oracle.waive_masked_value_leak = true;
        } else {
            fprintf(stderr, "attnfuzz: only masked_row_nan and masked_value_leak can be waived, got \"%s\"\n", arg);
            return -1;
        }
        return 1;
    case AF_OPT_TIMEOUT:
    case AF_OPT_COMPILE_TIMEOUT: {
        char *end;
        double sec = strtod(arg, &end);
        if (*end || !(sec > 0) || sec > 1e6) {
            fprintf(stderr, "attnfuzz: --%s wants seconds, got \"%s\"\n",
                    opt == AF_OPT_TIMEOUT ? "timeout" : "compile-timeout", arg);
            return -1;
        }
        if (opt == AF_OPT_TIMEOUT)
            cfg->worker.timeout = sec;
        else
            cfg->worker.compile_timeout = sec;
        return 1;
    }
    default: return 0;
    }
}

/* The checks a bundle recorded: its backends (without ref, relation outputs and
 * expected comparisons) and its relation. */
void af_cli_config_from_bundle(const af_bundle *b, af_exec_config *cfg, char names[][AF_BACKEND_NAME_MAX]) {
    size_t n = 0;
    for (size_t i = 0; i < af_bundle_record_count(b) && n < AF_EXEC_MAX_BACKENDS; i++) {
        const char *name = af_bundle_record_at(b, i)->backend;
        if (!strcmp(name, "ref") || strchr(name, '@') || strchr(name, '~')) continue;
        snprintf(names[n], AF_BACKEND_NAME_MAX, "%s", name);
        cfg->backends[n] = names[n];
        n++;
    }
    cfg->n_backends = n;
    const char *rel = af_bundle_relation(b);
    if (rel && af_relation_from_name(rel) >= 0) cfg->relations[af_relation_from_name(rel)] = true;
    /* a nondeterministic finding: every execution runs the case twice */
    if (af_bundle_kind(b) == AF_KIND_NONDETERMINISTIC) cfg->determinism = 1.0;
    if (n == 0) { /* a bundle from another tool: the default pair */
        cfg->pairs[0] = "explicit,fused";
        cfg->n_pairs = 1;
    }
}


void af_cli_default_checks(af_exec_config *cfg, int selected) {
    if (selected & 1) return;
    cfg->pairs[0] = "explicit,fused";
    cfg->n_pairs = 1;
    if (!(selected & 2))
        for (int r = 0; r < AF_REL_COUNT; r++) cfg->relations[r] = true;
}

int af_cli_read_input(const char *path, uint8_t *buf, size_t cap, size_t *n, af_error *err) {
    char *data = NULL;
    size_t len = 0;
    *n = 0;
    if (af_file_read(path, AF_CASE_INPUT_MAX, &data, &len, err) != AF_OK) return -1;
    *n = len < cap ? len : cap;
    memcpy(buf, data, *n);
    af_free(data);
    return 0;
}

int af_cli_known_option(af_cli_known *ko, int opt, const char *arg) {
    if (opt == AF_OPT_NO_KNOWN) {
        ko->none = true;
        return 1;
    }
    if (opt != AF_OPT_KNOWN) return 0;
    if (ko->n == AF_CLI_KNOWN_MAX) {
        fprintf(stderr, "attnfuzz: at most %d --known options\n", AF_CLI_KNOWN_MAX);
        return -1;
    }
    ko->files[ko->n++] = arg;
    return 1;
}

int af_cli_known_load(const af_cli_known *ko, const char *cmd, bool verbose, af_known **out) {
    *out = NULL;
    if (ko->none) {
        if (ko->n) fprintf(stderr, "attnfuzz %s: --no-known: the --known files are not loaded either\n", cmd);
        return 0;
    }
    af_known *k = af_known_create();
    if (!k) {
        fprintf(stderr, "attnfuzz %s: out of memory\n", cmd);
        return -1;
    }
    af_error err = {0}, where = {0};
    size_t files = 0;
    char dir[4096] = "";
    if (af_known_locate(dir, sizeof dir, &where) == AF_OK && af_known_load_root(k, dir, &files, &err) != AF_OK) {
        fprintf(stderr, "attnfuzz %s: %s (--no-known runs without known bugs)\n", cmd, err.msg);
        af_known_destroy(k);
        return -1;
    }
    size_t repo = af_known_count(k);
    for (size_t i = 0; i < ko->n; i++) {
        if (af_known_load(k, ko->files[i], &err) != AF_OK) {
            fprintf(stderr, "attnfuzz %s: --known %s\n", cmd, err.msg);
            af_known_destroy(k);
            return -1;
        }
    }
    /* one line, first: how many and from where, or that none was found (even when quiet:
     * a campaign without its known bugs re-finds and re-minimizes every triaged one) */
    char extra[64] = "";
    if (ko->n) snprintf(extra, sizeof extra, " (and %zu from --known)", af_known_count(k) - repo);
    if (!af_known_count(k))
        fprintf(stderr, "attnfuzz %s: no known bugs loaded (%s%s; --known FILE)\n", cmd,
                files ? "the known.json files hold no entry" : where.msg[0] ? where.msg : "none found",
                ko->n ? "; the --known files hold none either" : "");
    else if (verbose && files)
        fprintf(stderr, "attnfuzz %s: %zu known bugs from %zu known.json files under %s/corpus/findings%s "
                        "(--no-known: none)\n",
                cmd, repo, files, dir, extra);
    else if (verbose)
        fprintf(stderr, "attnfuzz %s: %zu known bugs from --known only (%s) (--no-known: none)\n", cmd,
                af_known_count(k), where.msg[0] ? where.msg : "no known.json files in corpus/findings");
    *out = k;
    return 0;
}

void af_cli_known_text(const af_known *k, long entry, char *buf, size_t len) {
    if (len) buf[0] = 0;
    if (!k || entry < 0) return;
    af_known_info info;
    af_known_info_of(k, (size_t)entry, &info);
    snprintf(buf, len, "  [known bug %s (%s)%s%s]", info.id, af_known_class_names[info.cls], info.title[0] ? ": " : "",
             info.title);
}
