/* known_match.c - matching what an executor or a bundle holds against the known bugs
 * (known.h, its last section): the findings of an execution, with the failing backend's
 * stderr tail; a bundle's recorded finding, its output judged again for where the failing
 * elements sit. */
#include <stdio.h>
#include <string.h>

#include "attnfuzz/bundle.h"
#include "attnfuzz/exec.h"
#include "attnfuzz/known.h"
#include "attnfuzz/mem.h"
#include "backends/worker_proto.h"

/* Is backend name one of who's: "B", a side of "A,B", the B of "R@B"? */
static bool af_km_names(const char *who, const char *name) {
    const char *at = strchr(who, '@');
    if (at) return !strcmp(at + 1, name);
    if (!strcmp(who, name)) return true;
    size_t wn = strlen(who), n = strlen(name);
    if (n >= wn) return false;
    return (!strncmp(who, name, n) && who[n] == ',') || (!strcmp(who + wn - n, name) && who[wn - n - 1] == ',');
}

uint32_t af_known_exec_backends(const af_exec *x, const char *who) {
    uint32_t mask = 0;
    for (size_t k = 0; k < af_exec_backend_count(x) && k < 32; k++)
        if (af_km_names(who, af_backend_name(af_exec_backend_at(x, k)))) mask |= 1u << k;
    return mask;
}

/* The libraries the first of the backends be (bit k: af_exec_backend_at) that reports any
 * reports (its hello's libs), NULL when none does. */
static const af_host_libs *af_km_libs(const af_exec *x, uint32_t be) {
    for (size_t j = 0; x && j < af_exec_backend_count(x) && j < 32; j++) {
        const af_backend_ext *e = (be >> j & 1u) ? af_backend_ext_of(af_exec_backend_at(x, j)) : NULL;
        if (e && e->libs && e->libs->n) return e->libs;
    }
    return NULL;
}

long af_known_match_exec(const af_known *k, const af_exec *x, size_t i) {
    const af_finding *f = af_exec_finding(x, i);
    if (!k || !f) return -1;
    uint32_t be = af_known_exec_backends(x, f->who);
    const char *tail = NULL;
    for (size_t j = 0; j < af_exec_backend_count(x) && !tail; j++)
        if (be >> j & 1u) tail = af_exec_stderr_tail(x, j);
    af_known_host host = {NULL, af_km_libs(x, be)};
    af_known_finding kf = {f->kind, f->who, af_exec_case(x), &f->result, f->message, tail, f->tensor, &host, false};
    return af_known_match(k, &kf);
}

/* The failing backend's output judged again against the reference of the bundle's inputs,
 * under the conventions the backend declared (a NaN row it declared is no failing
 * element): the result with where its failing elements sit (older bundles do not record
 * that). */
static af_status af_km_rejudge(const af_bundle *b, const af_bundle_record *rec, af_result *res, af_error *err) {
    const char *backend = rec->backend;
    const af_case *c = af_bundle_case(b);
    af_inputs *in = af_inputs_create();
    af_oracle *o = af_oracle_create(NULL);
    double *out = NULL;
    af_status st = in && o ? AF_OK : af_error_set(err, AF_ERR_NOMEM, "out of memory");
    if (st == AF_OK) st = af_bundle_check_budget(b, 0, err);
    if (st == AF_OK) st = af_bundle_load_inputs(b, in, err);
    if (st == AF_OK) st = af_oracle_prepare(o, af_inputs_get(in), err);
    if (st == AF_OK) st = af_bundle_load_output(b, backend, &out, err);
    if (st == AF_OK) {
        af_tensor t;
        size_t ne[4] = {c->batch, c->q_heads, c->q_len, c->v_head_dim};
        af_tensor_contiguous(&t, AF_F64, 4, ne);
        t.data = out;
        af_conventions conv;
        memset(&conv, 0, sizeof conv);
        if (rec->conventions[0] && (st = af_wp_parse_conventions(rec->conventions, &conv, err)) != AF_OK)
            af_error_prefix(err, "%s/case.json: backend %s", af_bundle_dir(b), backend);
        if (st == AF_OK) st = af_oracle_compare_conv(o, &t, &conv, res, err);
    }
    af_free(out);
    af_oracle_destroy(o);
    af_inputs_destroy(in);
    return st;
}

af_status af_known_match_bundle(const af_known *k, const af_bundle *b, long *entry, af_error *err) {
    *entry = -1;
    af_kind kind = af_bundle_kind(b);
    const char *who = af_bundle_who(b);
    if (!af_known_count(k) || kind == AF_KIND_OK || !who[0]) return AF_OK;
    /* the failing backend's record: its error, its output (or, for a finding on a
     * gradient or the softmax statistics, their verdict and metrics: its output passed) */
    const af_bundle_record *rec = NULL;
    for (size_t i = 0; i < af_bundle_record_count(b) && !rec; i++) {
        const af_bundle_record *r = af_bundle_record_at(b, i);
        if (af_bundle_record_verdict(r) != AF_KIND_OK && strcmp(r->backend, "ref") && af_km_names(who, r->backend))
            rec = r;
    }
    const int grad = af_bundle_grad(b);
    af_result res;
    memset(&res, 0, sizeof res);
    bool have = false;
    if (rec && grad >= 0 && rec->has_grad[grad]) {
        res.kind = rec->grad_kind[grad];
        res.m = rec->grad_m[grad];
        have = true;
    } else if (rec && rec->has_lse && strcmp(af_bundle_tensor(b), "lse") == 0) { /* the statistics' record */
        res.kind = rec->lse_kind;
        res.m = rec->lse_m;
        have = true;
    } else if (rec) {
        res.kind = rec->kind;
        res.m = rec->m;
        have = true;
        bool numeric = kind != AF_KIND_ERROR && kind != AF_KIND_CRASH && kind != AF_KIND_TIMEOUT;
        if (numeric && rec->has_output && !strchr(who, '@')) {
            AF_TRY(af_km_rejudge(b, rec, &res, err));
            res.kind = kind;
        }
    }
    char *tail = NULL;
    size_t len = 0;
    AF_TRY(af_bundle_load_text(b, "stderr.txt", &tail, &len, err));
    af_known_finding kf = {kind, who, af_bundle_case(b), have ? &res : NULL, rec ? rec->error : NULL, tail,
                           af_bundle_tensor(b), NULL, true};
    *entry = af_known_match(k, &kf);
    af_free(tail);
    return AF_OK;
}

af_status af_known_bundle_scope(const af_known *k, const af_bundle *b, const af_exec *x, af_known_scope *scope,
                                long *entry, char *why, size_t len, af_error *err) {
    long e = -1;
    *scope = AF_KNOWN_SCOPE_IN;
    if (why && len) why[0] = 0;
    if (entry) *entry = -1;
    if (!af_known_count(k)) return AF_OK;
    AF_TRY(af_known_match_bundle(k, b, &e, err));
    if (entry) *entry = e;
    if (e < 0) return AF_OK;
    af_known_host host = {NULL, x ? af_km_libs(x, af_known_exec_backends(x, af_bundle_who(b))) : NULL};
    *scope = af_known_scope_of(k, (size_t)e, &host, why, len);
    return AF_OK;
}
