/* backends.h - the built-in backend vtables (library-internal). One file per backend in
 * src/backends/, one per seeded-bug mutant family in src/backends/mutants.c. */
#ifndef ATTNFUZZ_BACKENDS_H
#define ATTNFUZZ_BACKENDS_H

#include "attnfuzz/backend.h"
#include "attnfuzz/mem.h"
#include "scratch.h"

extern const af_backend_vtable af_backend_ref;
extern const af_backend_vtable af_backend_explicit;
extern const af_backend_vtable af_backend_fused;

/* The state of a backend that needs only work buffers: an af_scratch (backend.c). */
af_status af_scratch_state_create(const char *args, void **state, af_error *err);
void af_scratch_state_destroy(void *state);

/* backend.c: the registered backend named name (exactly), NULL when none is. */
const af_backend_vtable *af_backend_builtin_find(const char *name);

/* plugin.c: "plugin:PATH.so[:ARGS]" */
af_status af_plugin_open(const char *spec, af_backend **out, af_error *err);
/* backend.c: wraps a table and an already made state (destroyed by vt->destroy). */
af_status af_backend_open_state(const af_backend_vtable *vt, void *state, af_backend **out, af_error *err);

/* mutants.c */
extern const af_backend_vtable *const af_mutant_vtables[];
extern const size_t af_mutant_count;

#endif
