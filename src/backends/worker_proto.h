/* worker_proto.h - the frames of the worker protocol (docs/worker-protocol.md), without
 * processes: encoding run requests, checking and decoding hello and result frames. The
 * process side (worker.c) moves the bytes; everything a frame may get wrong is decided
 * here, so a unit test can feed hand-written frames (tests/test_worker_proto.c). */
#ifndef ATTNFUZZ_WORKER_PROTO_H
#define ATTNFUZZ_WORKER_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/case.h"
#include "attnfuzz/case_key.h"
#include "attnfuzz/tensor.h"
#include "attnfuzz/worker.h"
#include "json_scan.h"
#include "json_write.h"

#define AF_WP_MAX_HEADER ((size_t)1 << 20) /* a reader refuses a header over 1 MiB */
#define AF_WP_MAX_PARTS 8                    /* payload pieces of a run frame (of one case: q, k, v or qkv,
                                                two masks, do; a serving case's buffer) */
#define AF_WP_MAX_BATCH 256                  /* cases per run frame, at most */

/* One tensor entry of a header, checked against the payload it points into. */
typedef struct af_wp_tensor {
    char name[32];
    af_dtype dtype;
    int ndim;
    size_t ne[AF_MAX_DIMS];
    size_t nb[AF_MAX_DIMS]; /* byte strides */
    size_t offset;          /* byte offset of element [0, ..., 0] */
    size_t end;             /* one past the last byte any element touches (offset when empty) */
} af_wp_tensor;

/* What a hello declares (defaults filled in for what it leaves out). */
typedef struct af_wp_hello {
    char name[128], version[64], variant[128];
    uint32_t caps;    /* AF_CAP_* bits (dropout "none" clears AF_CAP_DROPOUT) */
    uint32_t layouts; /* bit per af_layout */
    uint32_t dtypes;  /* bit per af_dtype among F32, F16, BF16 */
    uint64_t max_head_dim, head_dim_multiple, max_seq, max_batch, max_heads, max_bytes; /* 0 = none */
    uint64_t max_q_len;         /* queries per row at most (a decode kernel's), 0 = none */
    uint32_t diagonals;         /* bit per af_diag it implements (default all) */
    af_conventions conv;        /* every convention the oracle models (conventions.h) */
    enum { AF_WP_DROPOUT_COUNTER, AF_WP_DROPOUT_KEEP_MASK, AF_WP_DROPOUT_NONE } dropout;
    uint32_t compile_key; /* AF_KEY_* bits; AF_KEY_ALL when not given */
    uint32_t batch;       /* the most cases it takes in one run frame (1: no batches) */
    char conventions[512]; /* the conventions in effect as a compact JSON object */
    af_host_libs libs;     /* "libs": the stack's and its libraries' versions, "sm" (n 0: none) */
    uint32_t traits;       /* AF_TRAIT_* from "deterministic" and "batch_invariant" (backend.h) */
    bool lse_base2;        /* "lse_base": 2: its statistics are log2 sum exp (cap lse) */
    double compile_timeout; /* "compile_timeout": seconds a first build may take (0: not said) */
} af_wp_hello;

/* CRASH and NOT_RUN only in a batch answer: the item the worker faulted on (it exits after
 * the frame), then the items after it, which it did not run. */
typedef enum af_wp_status { AF_WP_OK, AF_WP_UNSUPPORTED, AF_WP_ERROR, AF_WP_CRASH, AF_WP_NOT_RUN } af_wp_status;

/* A checked result frame. */
typedef struct af_wp_result {
    af_wp_status status;
    char message[512];     /* reason (unsupported) or message (error, crash) */
    af_layout layout;      /* of out: one of the five unpacked layouts (a packed case's padded view) */
    bool thd;              /* out of a packed serving case in THD form [Tq, Hq, Dv] (layout "thd") */
    af_wp_tensor out;      /* ok: its shape is the layout's output shape */
    bool has_keep;
    af_wp_tensor keep;     /* bool [B, Hq, Sq, Sk] */
    bool has_lse;
    af_wp_tensor lse;      /* float [B, Hq, Sq]: the softmax statistics (cap lse, asked by want_lse) */
    af_wp_tensor grad[AF_GRAD_COUNT]; /* a backward case's, each it asks for: dq, dk, dv in layout
                                         (like out), dmask 4-D (a full dim where the mask broadcasts
                                         is summed by af_wp_copy_grad) */
    double compile_s, run_s; /* -1 when not given */
    af_guard_writes guard;   /* "guard_writes": the guard bands that changed (n 0: none) */
} af_wp_result;

/* A frame's header as tokens (json_scan.h), checked as JSON: in `local` when they fit,
 * else in `heap` (af_wp_header_free releases it). */
typedef struct af_wp_header {
    const char *text;   /* the header's text (inside the frame body) */
    const af_js_tok *tok; /* tok[0] is the header object */
    af_js_tok *heap;
    af_js_tok local[128];
} af_wp_header;
void af_wp_header_free(af_wp_header *h);

/* Splits a frame body (the N bytes after the length) into the header and the payload;
 * the caller af_wp_header_free's *h (also after an error). AF_ERR_FORMAT: no JSON object
 * followed by a newline within the first 1 MiB, or bad JSON. */
af_status af_wp_split(const uint8_t *body, size_t n, af_wp_header *h, const uint8_t **payload, size_t *payload_len,
                      af_error *err);

/* Checks the tensor entry at token `entry` of header h against a payload of payload_len
 * bytes: an object with a name, a known dtype, as many strides as dims, non-negative
 * integers, every element inside the payload. AF_ERR_FORMAT names the tensor and the
 * problem. */
af_status af_wp_tensor_parse(const af_wp_header *h, long entry, size_t payload_len, af_wp_tensor *t, af_error *err);

/* Checks a hello body. AF_ERR_FORMAT names what is wrong (not a hello, wrong protocol,
 * unknown capability, layout, dtype, convention or compile_key field, a libs that is not an
 * object of at most AF_HOST_LIBS_MAX names with string values). */
af_status af_wp_parse_hello(const uint8_t *body, size_t n, af_wp_hello *h, af_error *err);

/* The conventions of a JSON object as a hello's `conventions` (and a bundle's record of
 * them, the compact text af_wp_hello.conventions) into *conv: what judging a recorded
 * output again must model. Errors name the member that is wrong. */
af_status af_wp_parse_conventions(const char *text, af_conventions *conv, af_error *err);

/* Checks a result body for request id on case c (whose worker declared h). On AF_OK *r
 * holds the status; an ok result's tensors lie in *payload. AF_ERR_FORMAT for anything
 * that breaks the protocol: bad JSON, another type or id, unknown status, a missing,
 * misshapen or non-float out, a tensor outside the payload, a payload larger than its
 * tensors need, a missing keep mask under conventions.dropout "keep_mask", a gradient a
 * backward case asks for that is missing, misshapen or not float, or one it does not ask for. */
af_status af_wp_parse_result(const uint8_t *body, size_t n, uint64_t id, const af_case *c, const af_wp_hello *h,
                             af_wp_result *r, const uint8_t **payload, af_error *err);

/* Checks the answer to a batch: a result frame with a `batch` array holding one result per
 * request, in order (ids[i] for cases[i]); rs[i] as af_wp_parse_result fills it, every
 * item's tensors in the one payload. An item may be `crash` (the worker faulted on it and
 * exits after this frame) when every later item is `not_run`, and only then. AF_ERR_FORMAT
 * as for one result (the message names the item), for a count that differs from the
 * request's, or for `crash`/`not_run` out of that order. */
af_status af_wp_parse_batch(const uint8_t *body, size_t n, const uint64_t *ids, const af_case *const *cases,
                            size_t count, const af_wp_hello *h, af_wp_result *rs, const uint8_t **payload,
                            af_error *err);

/* Copies a checked out tensor into dst, a contiguous [B, Hq, Sq, Dv] tensor whose dtype
 * the caller chose (F32 or F64; values converted, f16/bf16 exactly). A packed serving
 * case's rows past a segment's queries do not exist: 0 whatever the worker sent there
 * (THD rows scatter to their segments). */
void af_wp_copy_out(const af_wp_result *r, const uint8_t *payload, const af_case *c, af_tensor *dst);
/* Copies checked gradient g (af_grad_names order) into dst, a contiguous tensor of
 * af_case_grad_shape(c, g) with room for F64: F64 stays F64, f32 becomes F32, f16 and bf16
 * stay themselves (so that the oracle allows their final rounding); dst->dtype says which.
 * dmask is summed over the dims where the worker left it full and the mask broadcasts. */
af_status af_wp_copy_grad(const af_wp_result *r, const uint8_t *payload, const af_case *c, int g, af_tensor *dst,
                          af_error *err);
/* Whether a run frame for case c asks a worker that declared h for the statistics
 * (want_lse): cap lse, a forward case, not a packed serving one (whose rows are segments'). */
bool af_wp_want_lse(const af_wp_hello *h, const af_case *c);
/* Copies checked statistics into dst, a contiguous F64 [B, Hq, Sq] tensor, in natural log
 * (base2: times ln 2, as a hello's lse_base 2 says). */
void af_wp_copy_lse(const af_wp_result *r, const uint8_t *payload, const af_case *c, bool base2, af_tensor *dst);
/* Copies a checked keep mask into keep ([B, Hq, Sq, Sk] bytes, 1 = kept). */
void af_wp_copy_keep(const af_wp_result *r, const uint8_t *payload, const af_case *c, uint8_t *keep);

/* A payload piece of a run frame: bytes that already live in the case's tensors. */
typedef struct af_wp_part {
    const void *data;
    size_t len;
} af_wp_part;

/* Encodes the run request for the tensors t: *hdr receives the 4-byte length, the JSON
 * header and the newline; parts the payload pieces (each tensor buffer once: a packed
 * buffer travels once with three views, stride-0 dims are not expanded). The frame is
 * hdr then the parts in order. AF_ERR_NOMEM, or AF_ERR_INVALID for a frame over 4 GiB. */
af_status af_wp_encode_run(af_jw *hdr, uint64_t id, const af_case_tensors *t, af_wp_part parts[AF_WP_MAX_PARTS],
                           size_t *nparts, af_error *err);
/* The same with "want_lse": true in the request (want_lse: af_wp_want_lse). */
af_status af_wp_encode_run_lse(af_jw *hdr, uint64_t id, const af_case_tensors *t, bool want_lse,
                               af_wp_part parts[AF_WP_MAX_PARTS], size_t *nparts, af_error *err);

/* Encodes one run frame holding n requests (ids[i] for the tensors ts[i]: cases of one
 * compile key, for a worker that declared batch >= n), every item's tensors in one
 * payload; parts needs room for n * AF_WP_MAX_PARTS pieces. */
af_status af_wp_encode_batch(af_jw *hdr, const uint64_t *ids, const af_case_tensors *const *ts, size_t n,
                             af_wp_part *parts, size_t *nparts, af_error *err);
/* The same, item i with "want_lse": true where want_lse (NULL: none) has want_lse[i]. */
af_status af_wp_encode_batch_lse(af_jw *hdr, const uint64_t *ids, const af_case_tensors *const *ts,
                                 const bool *want_lse, size_t n, af_wp_part *parts, size_t *nparts, af_error *err);

/* The bye frame (length included) and its size. */
extern const uint8_t af_wp_bye[4 + 16];
#define AF_WP_BYE_LEN (4 + 16)

#endif
