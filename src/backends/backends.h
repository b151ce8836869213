/* backends.h - the built-in backend vtables (library-internal). One file per backend in
 * src/backends/, one per seeded-bug mutant family in src/backends/mutants.c. */
#ifndef ATTNFUZZ_BACKENDS_H
#define ATTNFUZZ_BACKENDS_H

#include "attnfuzz/backend.h"
#include "attnfuzz/mem.h"

extern const af_backend_vtable af_backend_ref;
extern const af_backend_vtable af_backend_explicit;
extern const af_backend_vtable af_backend_fused;

/* mutants.c */
extern const af_backend_vtable *const af_mutant_vtables[];
extern const size_t af_mutant_count;

#endif
