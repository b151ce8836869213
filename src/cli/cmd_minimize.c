/* cmd_minimize.c - `attnfuzz minimize`: shrink a failing bundle or input. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "attnfuzz/bundle.h"
#include "attnfuzz/minimize.h"
#include "cli.h"

static void af_minimize_usage(FILE *f) {
    fprintf(f,
            "usage: attnfuzz minimize [options] BUNDLE|INPUT\n"
            "\n"
            "Re-runs the bundle's checks (or, for a raw input, the default pair and relations)\n"
            "and shrinks the case while the same check keeps failing with the same kind:\n"
            "f32, BHSD, plain strides and values, masks and dropout off, default scale,\n"
            "smaller and equal shapes. Writes the result as a new bundle.\n"
            "\n"
            "  --crashes DIR     where the minimized bundle goes (default crashes/)\n"
            "  --max-execs N     executions to spend (default 400)\n"
            "  --backend NAME, --pair A,B, --relation NAME, --budget MIB, --timeout S,\n"
            "  --compile-timeout S as for replay\n"
            "\n"
            "exit: 1 a minimized finding was written, 0 the input does not fail, 2 error\n");
}

int af_cmd_minimize(int argc, char **argv) {
    af_exec_config cfg;
    memset(&cfg, 0, sizeof cfg);
    af_oracle_opts_default(&cfg.oracle);
    int selected = 0;
    const char *crashes = "crashes";
    unsigned max_execs = 400;
    static const struct option longopts[] = {AF_CLI_EXEC_OPTIONS,
                                             {"crashes", required_argument, 0, 'c'},
                                             {"max-execs", required_argument, 0, 'n'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int r = af_cli_exec_option(&cfg, opt, optarg, &selected);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (opt == 'c') {
            crashes = optarg;
        } else if (opt == 'n') {
            max_execs = (unsigned)strtoul(optarg, NULL, 10);
        } else if (opt == 'h') {
            af_minimize_usage(stdout);
            return 0;
        } else {
            af_minimize_usage(stderr);
            return 2;
        }
    }
    if (optind != argc - 1) {
        af_minimize_usage(stderr);
        return 2;
    }
    const char *path = argv[optind];
    af_error err = {0};
    af_case c;
    af_bundle *b = NULL;
    char names[AF_EXEC_MAX_BACKENDS][AF_BACKEND_NAME_MAX];
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "attnfuzz minimize: %s: no such file or directory\n", path);
        return 2;
    }
    if (S_ISDIR(sb.st_mode)) {
        if (af_bundle_read(path, &b, &err) != AF_OK) {
            fprintf(stderr, "attnfuzz minimize: %s\n", err.msg);
            return 2;
        }
        if (af_bundle_check_budget(b, cfg.budget, &err) != AF_OK) {
            fprintf(stderr, "attnfuzz minimize: %s\n", err.msg);
            af_bundle_free(b);
            return 2;
        }
        c = *af_bundle_case(b);
        if (!(selected & 1)) af_cli_config_from_bundle(b, &cfg, names);
    } else {
        uint8_t buf[1 << 16];
        size_t n = 0;
        if (af_cli_read_input(path, buf, sizeof buf, &n, &err) != 0) {
            fprintf(stderr, "attnfuzz minimize: %s\n", err.msg);
            return 2;
        }
        af_case_decode(&c, buf, n, cfg.budget);
        af_cli_default_checks(&cfg, selected);
    }
    int rc = 2;
    af_exec *x = af_exec_create(&cfg, &err);
    if (!x) goto out;
    if (af_exec_run_case(x, &c, &err) != AF_OK) goto out;
    if (af_exec_finding_count(x) == 0) {
        fprintf(stderr, "attnfuzz minimize: %s does not fail%s\n", path,
                b ? " when its case is generated from its seeds (the failure may need the bundle's arrays: "
                    "minimizing shrinks generated cases only)"
                  : "");
        rc = 0;
        goto out;
    }
    af_finding f = *af_exec_finding(x, 0);
    af_case before = c;
    unsigned spent = 0;
    if (af_minimize(x, f.check, f.kind, &c, max_execs, 0, &spent, NULL, &err) != AF_OK) goto out;
    const af_finding *fm = af_exec_finding_for(x, f.check);
    size_t fi = 0;
    while (fi < af_exec_finding_count(x) && af_exec_finding(x, fi) != fm) fi++;
    char out[1024];
    af_status ws = af_exec_write_bundle(x, fi, crashes, out, sizeof out, &err);
    if (ws != AF_OK && ws != AF_ERR_EXISTS) goto out;
    printf("%s %s: [%u,%u,%u,%u] x [%u,%u,%u,%u] -> [%u,%u,%u,%u] x [%u,%u,%u,%u] in %u executions\n%s%s\n",
           af_kind_names[fm->kind], fm->who, before.batch, before.q_heads, before.q_len, before.head_dim, before.batch,
           before.kv_heads, before.kv_len, before.v_head_dim, c.batch, c.q_heads, c.q_len, c.head_dim, c.batch,
           c.kv_heads, c.kv_len, c.v_head_dim, spent, out, ws == AF_ERR_EXISTS ? " (already stored)" : "");
    rc = 1;
out:
    if (rc == 2) fprintf(stderr, "attnfuzz minimize: %s\n", err.msg);
    af_exec_destroy(x);
    af_bundle_free(b);
    return rc;
}
