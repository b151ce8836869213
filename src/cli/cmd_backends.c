/* cmd_backends.c - `attnfuzz backends`: what can be run, and what it supports. */
#include <stdio.h>
#include <string.h>

#include "attnfuzz/backend.h"
#include "cli.h"

int af_cmd_backends(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: attnfuzz backends\n\nLists the built-in backends with version, output dtype,\n"
               "capabilities and layouts. Use the names with --backend and --pair.\n");
        return 0;
    }
    for (size_t i = 0; i < af_backend_builtin_count(); i++) {
        const af_backend_vtable *vt = af_backend_builtin(i);
        printf("%-30s v%-3s out %-4s %s\n", vt->name, vt->version, af_dtype_names[vt->out_dtype], vt->summary);
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
    printf("\nplugin:PATH.so[:ARGS]          a shared library exporting the plugin ABI (include/attnfuzz/plugin.h)\n"
           "worker:COMMAND                 an external process (DESIGN.md section 7): not in this build yet\n");
    return 0;
}
