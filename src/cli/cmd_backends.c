/* cmd_backends.c - `attnfuzz backends`: what can be run, and what it supports. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/case_key.h"
#include "attnfuzz/worker.h"
#include "cli.h"

static void af_print_caps(const af_backend_vtable *vt) {
    printf("%-30s caps:", "");
    if ((vt->caps & AF_CAP_ALL) == AF_CAP_ALL) {
        printf(" all");
    } else {
        for (int b = 0; b < 17; b++)
            if (vt->caps & (1u << b)) printf(" %s", af_cap_names[b]);
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

/* The real targets as `python -m attnfuzz.targets --list` reports them (the project's
 * Python; a stack that does not import is listed with the reason). */
static void af_backends_targets(void) {
    const char *pythonpath = NULL;
    const char *python = af_worker_python(&pythonpath);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s%s%s%s '%s' -m attnfuzz.targets --list 2>&1", pythonpath ? "PYTHONPATH='" : "",
             pythonpath ? pythonpath : "", pythonpath ? "'" : "", pythonpath && getenv("PYTHONPATH") ? ":$PYTHONPATH" : "",
             python);
    FILE *p = popen(cmd, "r");
    char *text = NULL;
    size_t n = 0, cap = 0;
    if (p) {
        char buf[4096];
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, p)) > 0) {
            if (n + got + 1 > cap) {
                cap = 2 * (n + got + 1);
                char *t = realloc(text, cap);
                if (!t) break;
                text = t;
            }
            memcpy(text + n, buf, got);
            n += got;
        }
        pclose(p);
    }
    if (text) text[n] = 0;
    cJSON *list = text ? cJSON_Parse(text) : NULL;
    printf("\nreal targets (target:STACK/VARIANT, run by %s):\n", python);
    if (!cJSON_IsArray(list)) {
        printf("  none listed: `%s -m attnfuzz.targets --list` did not answer with a list: %.400s\n", python,
               text && text[0] ? text : "(no output)");
    } else {
        const cJSON *t;
        cJSON_ArrayForEach(t, list) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "target");
            const cJSON *ok = cJSON_GetObjectItemCaseSensitive(t, "available");
            const cJSON *why = cJSON_GetObjectItemCaseSensitive(t, "reason");
            const cJSON *sum = cJSON_GetObjectItemCaseSensitive(t, "summary");
            char spec[160];
            snprintf(spec, sizeof spec, "target:%s", cJSON_IsString(name) ? name->valuestring : "?");
            if (cJSON_IsTrue(ok))
                printf("  %-32s %s\n", spec, cJSON_IsString(sum) ? sum->valuestring : "");
            else
                printf("  %-32s unavailable: %s\n", spec, cJSON_IsString(why) ? why->valuestring : "?");
        }
    }
    cJSON_Delete(list);
    free(text);
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
    printf("\nplugin:PATH.so[:ARGS]          a shared library exporting the plugin ABI (include/attnfuzz/plugin.h)\n"
           "worker:COMMAND                 an external process speaking the worker protocol (docs/worker-protocol.md)\n"
           "target:STACK/VARIANT           a real target's worker: python -m attnfuzz.targets.STACK VARIANT\n");
    if (targets) af_backends_targets();
    return 0;
}
