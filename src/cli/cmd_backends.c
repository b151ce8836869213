/* cmd_backends.c - `attnfuzz backends`: what can be run, and what it supports. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/case_key.h"
#include "attnfuzz/mem.h"
#include "cli.h"
#include "core/proc.h"

static void af_print_caps(const af_backend_vtable *vt) {
    printf("%-30s caps:", "");
    /* as af_backend_caps has them: backward only with a run_backward */
    uint32_t caps = vt->caps & (vt->run_backward ? AF_CAP_ALL : AF_CAP_FORWARD_ALL);
    if (caps == AF_CAP_ALL) {
        printf(" all");
    } else if (caps == AF_CAP_FORWARD_ALL) {
        printf(" all forward");
    } else {
        for (int b = 0; b < AF_CAP_COUNT; b++)
            if (caps & (1u << b)) printf(" %s", af_cap_names[b]);
    }
    printf("   layouts:");
    if ((vt->layouts & AF_LAYOUTS_ALL) == AF_LAYOUTS_ALL) {
        printf(" all\n");
    } else {
        for (int l = 0; l < AF_LAYOUT_COUNT; l++)
            if (vt->layouts & (1u << l)) printf(" %s", af_layout_names[l]);
        printf("\n");
    }
}

/* Starts the worker of spec and prints what its hello declared. */
static int af_backends_describe(const char *spec) {
    af_backend *be = NULL;
    af_error err;
    if (af_backend_open(spec, &be, &err) != AF_OK) {
        fprintf(stderr, "attnfuzz backends: %s\n", err.msg);
        return 2;
    }
    const af_backend_vtable *vt = af_backend_vt(be);
    const af_backend_ext *e = af_backend_ext_of(be);
    printf("%-30s v%-3s out %-4s %s\n", af_backend_name(be), af_backend_version(be), af_dtype_names[vt->out_dtype],
           e && e->describe ? e->describe : vt->summary ? vt->summary : "");
    af_print_caps(vt);
    if (e) {
        printf("%-30s conventions: %s\n", "", e->conventions ? e->conventions : "{}");
        printf("%-30s compile_key:", "");
        for (int k = 0; k < AF_KEY_COUNT_; k++)
            if (e->compile_key & (1u << k)) printf(" %s", af_key_names[k]);
        printf("%s\n", e->compile_key ? "" : " (none: nothing is compiled per structure)");
    }
    af_backend_close(be);
    return 0;
}

/* Bytes of `--list` output kept (its JSON is a few KiB), of its stderr, and how long it
 * may take: it imports every stack, which on a cold cache takes tens of seconds. */
#define AF_BACKENDS_LIST_MAX ((size_t)1 << 20)
#define AF_BACKENDS_LIST_ERR_MAX ((size_t)64 << 10)
#define AF_BACKENDS_LIST_TIMEOUT 180.0

/* The last non-empty line of text (at most len - 1 bytes of it) into line. */
static void af_backends_last_line(const char *text, char *line, size_t len) {
    size_t end = strlen(text);
    while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r' || text[end - 1] == ' ')) end--;
    size_t from = end;
    while (from > 0 && text[from - 1] != '\n') from--;
    snprintf(line, len, "%.*s", (int)(end - from), text + from);
}

/* The real targets as `python -m attnfuzz.targets --list` reports them (the project's
 * Python, run without a shell; a stack that does not import is listed with the reason). */
static void af_backends_targets(void) {
    af_proc_python py;
    af_error err;
    char **envp = NULL;
    char *out = af_malloc(AF_BACKENDS_LIST_MAX), *errtext = af_malloc(AF_BACKENDS_LIST_ERR_MAX);
    char why[600] = "";
    const char *python = "python3";
    cJSON *list = NULL;
    if (!out || !errtext) {
        snprintf(why, sizeof why, "out of memory");
    } else if (af_proc_python_find(&py, &err) != AF_OK || af_proc_python_env(&py, &envp, &err) != AF_OK) {
        snprintf(why, sizeof why, "%s", err.msg);
    } else {
        python = py.exe;
        char *argv[] = {py.exe, "-m", "attnfuzz.targets", "--list", NULL};
        af_proc_buf ob = {out, AF_BACKENDS_LIST_MAX, 0, false}, eb = {errtext, AF_BACKENDS_LIST_ERR_MAX, 0, false};
        int ws = 0;
        af_status st = af_proc_capture(argv, envp, AF_BACKENDS_LIST_TIMEOUT, &ob, &eb, &ws, &err);
        list = st == AF_OK && !ob.truncated ? cJSON_Parse(out) : NULL;
        if (!cJSON_IsArray(list)) {
            char how[128] = "", last[400] = "";
            if (st == AF_OK) af_proc_describe(ws, how, sizeof how);
            af_backends_last_line(errtext, last, sizeof last);
            if (st != AF_OK)
                snprintf(why, sizeof why, "%s", err.msg);
            else if (ob.truncated)
                snprintf(why, sizeof why, "its output is over %zu bytes", AF_BACKENDS_LIST_MAX);
            else
                snprintf(why, sizeof why, "it %s without a list: %.400s", how,
                         last[0] ? last : out[0] ? out : "(no output)");
        }
        af_free(envp);
    }
    printf("\nreal targets (target:STACK/VARIANT, run by %s):\n", python);
    if (!cJSON_IsArray(list)) {
        printf("  none listed: `%s -m attnfuzz.targets --list`: %s\n", python, why);
    } else {
        const cJSON *t;
        cJSON_ArrayForEach(t, list) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "target");
            const cJSON *ok = cJSON_GetObjectItemCaseSensitive(t, "available");
            const cJSON *reason = cJSON_GetObjectItemCaseSensitive(t, "reason");
            const cJSON *sum = cJSON_GetObjectItemCaseSensitive(t, "summary");
            char spec[160];
            snprintf(spec, sizeof spec, "target:%s", cJSON_IsString(name) ? name->valuestring : "?");
            /* which variants answer backward cases (the inference stacks' never do) */
            const char *bwd = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "backward")) ? "fwd+bwd" : "fwd only";
            if (cJSON_IsTrue(ok))
                printf("  %-32s %-8s %s\n", spec, bwd, cJSON_IsString(sum) ? sum->valuestring : "");
            else
                printf("  %-32s unavailable: %s\n", spec, cJSON_IsString(reason) ? reason->valuestring : "?");
        }
    }
    cJSON_Delete(list);
    af_free(out);
    af_free(errtext);
}

int af_cmd_backends(int argc, char **argv) {
    bool targets = true;
    int first = 1;
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: attnfuzz backends [--no-targets]\n"
               "       attnfuzz backends SPEC...\n\n"
               "Lists the built-in backends with version, output dtype, capabilities and layouts,\n"
               "then the real targets (target:STACK/VARIANT) the project's Python can run, with the\n"
               "reason for each that cannot (--no-targets skips them: listing imports every stack).\n"
               "With SPECs (worker:COMMAND, target:STACK/VARIANT, plugin:PATH.so, a built-in), starts\n"
               "each and prints what it declares: capabilities, layouts, conventions, compile key.\n"
               "Use the names with --backend and --pair.\n");
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--no-targets")) {
        targets = false;
        first = 2;
    }
    if (first < argc && argv[first][0] != '-') {
        int rc = 0;
        for (int i = first; i < argc; i++) {
            int r = af_backends_describe(argv[i]);
            if (r > rc) rc = r;
        }
        return rc;
    }
    if (first < argc) {
        fprintf(stderr, "attnfuzz backends: unknown option %s (see --help)\n", argv[first]);
        return 2;
    }
    for (size_t i = 0; i < af_backend_builtin_count(); i++) {
        const af_backend_vtable *vt = af_backend_builtin(i);
        printf("%-30s v%-3s out %-4s %s\n", vt->name, vt->version, af_dtype_names[vt->out_dtype], vt->summary);
        af_print_caps(vt);
    }
    size_t np;
    const af_backend_prefix *pt = af_backend_prefix_table(&np);
    printf("\n");
    for (size_t i = 0; i < np; i++) printf("%-30s %s\n", pt[i].form, pt[i].summary);
    if (targets) af_backends_targets();
    return 0;
}
