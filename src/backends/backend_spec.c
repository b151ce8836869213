/* backend_spec.c - backend names: the one place a command-line name is parsed. A small
 * table maps prefixes to the code that opens them (plugin: to plugin.c, worker: and
 * target: to worker.c); any other name is looked up in the registry (backend.c). This file
 * sits above the three, so the registry needs to know nothing of plugins or workers, and
 * plugin.c and worker.c use the registry's wrapper without a circle. */
#include <stdio.h>
#include <string.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/worker.h"
#include "backends.h"

const char *const af_backend_kind_names[AF_BACKEND_KIND_COUNT] = {"builtin", "plugin", "worker"};
_Static_assert(sizeof af_backend_kind_names / sizeof af_backend_kind_names[0] == AF_BACKEND_KIND_COUNT,
               "a name per backend kind");

/* A plugin runs in-process: worker options do not apply. */
static af_status af_backend_spec_plugin(const char *spec, const af_worker_opts *wopts, af_backend **out,
                                        af_error *err) {
    (void)wopts;
    return af_plugin_open(spec, out, err);
}

static const af_backend_prefix af_backend_prefixes[] = {
    {"plugin:", "plugin:PATH.so[:ARGS]", "a shared library exporting the plugin ABI (include/attnfuzz/plugin.h)",
     AF_BACKEND_PLUGIN, af_backend_spec_plugin},
    {"worker:", "worker:COMMAND", "an external process speaking the worker protocol (docs/worker-protocol.md)",
     AF_BACKEND_WORKER, af_worker_open},
    {"target:", "target:STACK/VARIANT", "a real target's worker: python -m attnfuzz.targets.STACK VARIANT",
     AF_BACKEND_WORKER, af_worker_open},
};
#define AF_BACKEND_PREFIX_COUNT (sizeof af_backend_prefixes / sizeof af_backend_prefixes[0])

const af_backend_prefix *af_backend_prefix_table(size_t *n) {
    *n = AF_BACKEND_PREFIX_COUNT;
    return af_backend_prefixes;
}

const af_backend_prefix *af_backend_prefix_of(const char *spec) {
    for (size_t i = 0; i < AF_BACKEND_PREFIX_COUNT; i++)
        if (strncmp(spec, af_backend_prefixes[i].prefix, strlen(af_backend_prefixes[i].prefix)) == 0)
            return &af_backend_prefixes[i];
    return NULL;
}

af_backend_kind af_backend_spec_kind(const char *spec) {
    const af_backend_prefix *p = af_backend_prefix_of(spec);
    return p ? p->kind : AF_BACKEND_BUILTIN;
}

af_status af_backend_spec_open(const char *spec, const af_worker_opts *wopts, af_backend **out, af_error *err) {
    *out = NULL;
    const af_backend_prefix *p = af_backend_prefix_of(spec);
    if (p) return p->open(spec, wopts, out, err);
    const af_backend_vtable *vt = af_backend_builtin_find(spec);
    if (vt) return af_backend_open_vtable(vt, NULL, out, err);
    /* the plain names, the prefixed forms, then the mutants (the message is cut at its
     * buffer's end; `attnfuzz backends` lists everything) */
    char known[1024];
    size_t n = 0, b = af_backend_builtin_count();
    for (int pass = 0; pass < 3; pass++) {
        size_t count = pass == 1 ? (size_t)AF_BACKEND_PREFIX_COUNT : b;
        for (size_t i = 0; i < count && n < sizeof known; i++) {
            const char *name = pass == 1 ? af_backend_prefixes[i].form : af_backend_builtin(i)->name;
            if (pass != 1 && (strncmp(name, "mutant:", 7) == 0) != (pass == 2)) continue;
            int w = snprintf(known + n, sizeof known - n, "%s%s", n ? ", " : "", name);
            if (w < 0) break;
            n += (size_t)w;
        }
    }
    return af_error_set(err, AF_ERR_INVALID, "unknown backend \"%s\" (known: %s)", spec, known);
}

af_status af_backend_open(const char *spec, af_backend **out, af_error *err) {
    return af_backend_spec_open(spec, NULL, out, err);
}
