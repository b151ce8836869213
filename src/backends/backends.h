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

/* The work buffers a built-in fp32 backward needs (explicit.c, fused.c), from slots slot0 ..
 * slot0 + AF_BWD_NSLOTS - 1 of ws: per key/value head k and v, their copies with the
 * non-finite rows zeroed (kz) or set aside (saved, bad: the rows), dK, dV; per query head
 * q, dO and the same copies; per block of `rows` query rows and `cols` keys the scores S
 * (and the softcap's inputs spre), the masks' live flags and additive values (add: cols),
 * the dropout keep flags, dP, and dQ of the block's rows. */
typedef struct af_bwd_bufs {
    float *q, *qz, *qsaved, *k, *kz, *ksaved, *v, *vsaved, *dO, *doz, *dosaved, *dk, *dv;
    uint32_t *qbad, *kbad, *vbad, *dobad;
    float *S, *spre, *add, *dP, *dq;
    uint8_t *live, *keep;
} af_bwd_bufs;
#define AF_BWD_NSLOTS 24
af_status af_bwd_bufs_get(af_scratch *ws, int slot0, const af_case *c, size_t rows, size_t cols, af_bwd_bufs *b,
                          af_error *err);
/* Dropout p = 1 drops every weight: the output is the constant 0 (docs/design.md section
 * 2), so every gradient gr holds is 0 whatever the inputs are. Zeroes them and returns true
 * then; false (gr untouched) for p < 1. */
bool af_bwd_all_dropped(const af_case *c, af_grads *gr);

/* backend.c: marks a run_lse's lse (its data and shape kept) as holding F32 values. */
void af_backend_lse_f32(af_tensor *lse);

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
