/* relation.h - metamorphic relations: one backend run twice on transformed inputs that
 * must give the same answer (docs/design.md section 4). */
#ifndef ATTNFUZZ_RELATION_H
#define ATTNFUZZ_RELATION_H

#include <stdbool.h>

#include "backend.h"
#include "case.h"
#include "oracle.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum af_relation {
    AF_REL_LAYOUT,        /* same values in another layout (and contiguous strides) */
    AF_REL_PLACEMENT,     /* same case, another scale placement */
    AF_REL_BATCH_SPLIT,   /* one batch row alone equals its slice of the full output */
    AF_REL_HEAD_PERM,     /* permuting heads (whole GQA groups) permutes the output */
    AF_REL_KV_PERM,       /* permuting keys and values together changes nothing */
    AF_REL_MASKED_VALUES, /* new K/V values (NaN in V) at fully masked keys change nothing */
    AF_REL_COUNT
} af_relation;
extern const char *const af_relation_names[AF_REL_COUNT];
int af_relation_from_name(const char *name); /* -1 when unknown */

/* Does the relation apply to this case? (Dropout with 0 < p < 1 ties the mask to the
 * indices, so index-moving relations do not apply; key permutation needs no positional
 * mask; masked values need a fully masked key.) */
bool af_relation_applies(af_relation r, const af_case *c);

/* Scratch for running relations: the transformed inputs and output. */
typedef struct af_relation_ctx af_relation_ctx;
af_relation_ctx *af_relation_ctx_create(void);
void af_relation_ctx_destroy(af_relation_ctx *x);

/* Builds the transformed case and its tensors from src; the choice of layout, batch row
 * or permutation is a deterministic function of the case. Exposed for bundles. */
af_status af_relation_transform(af_relation r, const af_case_tensors *src, af_relation_ctx *x,
                                af_error *err);
/* The transformed case's tensors (valid after a transform) and the backend's output on
 * them (valid after af_relation_check). */
const af_case_tensors *af_relation_tensors(const af_relation_ctx *x);
const af_tensor *af_relation_output(const af_relation_ctx *x);
/* Which source row each row of the transformed output is ([B, H, S] flattened; NULL: the
 * same rows). Valid after a transform. */
const uint32_t *af_relation_row_map(const af_relation_ctx *x);

/* Transforms, runs be on the transformed inputs, maps its output back and compares it
 * with out_src (be's output on src) under o's tolerance (o prepared on src). An error
 * of the backend on the transformed input is reported as res->kind = AF_KIND_ERROR with
 * its message in err and AF_OK returned. AF_ERR_UNSUPPORTED when the relation does not
 * apply (for masked_values: when no key is fully masked). */
af_status af_relation_check(af_relation r, af_backend *be, const af_case_tensors *src,
                            const af_tensor *out_src, af_oracle *o, af_relation_ctx *x,
                            af_result *res, af_error *err);

/* af_relation_check for a backward case on a backend that runs backward (g_src: be's
 * gradients on src, NULL or a forward-only case: af_relation_check into res[0]): the
 * transformed run is a backward run too, its output compared into res[0] and each
 * gradient g the case asks for, mapped back through its own rows, into res[1 + g] (kind
 * AF_KIND_OK with zero metrics where not asked or not comparable: dmask broadcast over the
 * batch under batch_split). An error of the backend: res[0].kind AF_KIND_ERROR, its
 * message in err, AF_OK returned. */
af_status af_relation_check_backward(af_relation r, af_backend *be, const af_case_tensors *src,
                                     const af_tensor *out_src, const af_grads *g_src, af_oracle *o,
                                     af_relation_ctx *x, af_result res[1 + AF_GRAD_COUNT], af_error *err);
/* The transformed backward run's gradients (valid after af_relation_check_backward; a
 * gradient with data NULL: not run or not asked). */
const af_grads *af_relation_grads(const af_relation_ctx *x);

#ifdef __cplusplus
}
#endif
#endif
