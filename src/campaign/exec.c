/* exec.c - one execution of the configured checks on one case (see exec.h). */
#include "attnfuzz/exec.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "attnfuzz/backend_pool.h"
#include "attnfuzz/mem.h"
#include "clock.h"
#include "parallel.h"
#include "scratch.h"

/* A backend's judged results: the output, each gradient, the softmax statistics; the
 * tensor index of the statistics (-1 is the output's, g a gradient's). */
#define AF_EXEC_NRES (2 + AF_GRAD_COUNT)
#define AF_EXEC_LSE AF_GRAD_COUNT

typedef enum af_check_type {
    AF_CHECK_BACKEND,
    AF_CHECK_PAIR,
    AF_CHECK_RELATION,
    AF_CHECK_EXPECTED,
    AF_CHECK_DETERMINISM /* backend a run a second time, bitwise equal (a share of executions) */
} af_check_type;

typedef struct af_check {
    af_check_type type;
    size_t a, b;     /* backend indices (b for pairs); a = SIZE_MAX: the reference itself */
    af_relation rel;
    char name[160];
} af_check;

/* A failing relation check's transformed run, kept in its execution's record for the
 * bundle (af_exec_write_bundle_with): the relation's results (r[0] the output's, r[1 + g]
 * gradient g's), the transformed output as the bundle holds it (the case's shape: a
 * batch_split row set into a copy of the source output), its gradients where they have
 * the case's shapes, the backend's message when it failed on the transformed inputs. */
typedef struct af_exec_relrun {
    bool kept;                /* this execution's (reset when the slot runs again) */
    af_result r[AF_EXEC_NRES];
    af_tensor out;            /* data NULL: the backend failed on the transformed inputs */
    af_grads grads;
    bool has_grads;
    char msg[512];
    af_scratch buf;           /* slot 0 the output, 1 + g gradient g */
} af_exec_relrun;

/* Everything one execution needs and leaves behind: a batch has one per case. Its record
 * (inputs, outputs, each backend's judged results, each check's result, a failing
 * relation's transformed run) stays valid until the slot runs again. */
typedef struct af_exec_record {
    unsigned kept; /* holds on it out of x's slots (af_exec_keep), 0: one of x's slots */
    af_inputs *in;
    af_oracle *oracle;
    af_scratch outs; /* slot k: output of backend k */
    af_scratch gouts[AF_EXEC_MAX_BACKENDS]; /* backend k's gradients, slot g */
    af_scratch lses; /* slot k: backend k's softmax statistics */
    /* backends that drew their own dropout keep mask (worker conventions "keep_mask"): the
     * reference that follows it, on a copy of the tensors pointing at that mask */
    af_oracle *keep_oracle[AF_EXEC_MAX_BACKENDS];
    af_case_tensors keep_t[AF_EXEC_MAX_BACKENDS];
    bool use_keep[AF_EXEC_MAX_BACKENDS];
    af_scratch keeps; /* slot k: backend k's keep mask, copied (the worker's lasts only until its next run) */
    /* guard bands: each output buffer's bytes as allocated (between its two margins), per
     * backend the output's (0) and each gradient's (1 + g); what the margins show after a run */
    size_t guarded[AF_EXEC_MAX_BACKENDS][1 + AF_GRAD_COUNT];
    af_guard_writes guard[AF_EXEC_MAX_BACKENDS];
    /* a determinism check's second run of backend k (made where the backends run, before
     * the checks: af_exec_again): its buffers (slot 0 the output, 1 + g gradient g, then the
     * statistics), output, gradients and statistics; ran2 when it answered, else st2 and
     * msg2 say how it failed (AF_OK: not run) */
    af_scratch again[AF_EXEC_MAX_BACKENDS];
    af_tensor out2[AF_EXEC_MAX_BACKENDS];
    af_grads grads2[AF_EXEC_MAX_BACKENDS];
    af_tensor lse2[AF_EXEC_MAX_BACKENDS];
    bool ran2[AF_EXEC_MAX_BACKENDS];
    af_status st2[AF_EXEC_MAX_BACKENDS];
    char msg2[AF_EXEC_MAX_BACKENDS][512];

    af_case c;
    uint8_t bytes[AF_CASE_ENCODED_MAX];
    size_t nbytes;
    af_tensor out[AF_EXEC_MAX_BACKENDS];
    af_grads grads[AF_EXEC_MAX_BACKENDS]; /* a backward case's, where backward[k] */
    af_tensor lse[AF_EXEC_MAX_BACKENDS];  /* the statistics backend k returned (ndim 0: none) */
    bool backward[AF_EXEC_MAX_BACKENDS];  /* backend k runs the case backward */
    bool supported[AF_EXEC_MAX_BACKENDS];
    af_status st[AF_EXEC_MAX_BACKENDS];
    char msg[AF_EXEC_MAX_BACKENDS][512];
    const char *tail[AF_EXEC_MAX_BACKENDS]; /* the stderr its run left (af_run_result.stderr_tail, copied
                                               into tails: a worker's lasts only until its next run;
                                               NULL in-process) */
    af_scratch tails;
    bool check_ran[AF_EXEC_MAX_CHECKS];
    af_result results[AF_EXEC_MAX_CHECKS];
    int result_tensor[AF_EXEC_MAX_CHECKS]; /* what results[i] is on: -1 the output, else a gradient
                                              (AF_EXEC_LSE: the statistics) */
    af_finding findings[AF_EXEC_MAX_CHECKS];
    size_t nfind;
    /* each backend judged once per execution (af_exec_judged), by a check or, for a
     * determinism check's bundle, by the bundle writer: its results (the output, each
     * gradient, the statistics) and the index of the one that decides */
    bool judged[AF_EXEC_MAX_BACKENDS];
    af_result jres[AF_EXEC_MAX_BACKENDS][AF_EXEC_NRES];
    int jtensor[AF_EXEC_MAX_BACKENDS];
    af_exec_relrun *relrun[AF_EXEC_MAX_CHECKS]; /* per relation check, allocated when one fails */
    double compile_s; /* seconds the backends spent compiling */
    uint32_t skip;    /* backends this case leaves out for their known bugs (af_exec_skip_next) */
    af_status prep;   /* of preparing (or checking) the slot on a helper thread */
    uint64_t unjudged; /* gradients its checks on a helper thread could not judge */
    af_error prep_err;
} af_exec_slot;

/* exec.h names the record af_exec_record */

/* A bank of slots: one batch's executions (see "batches" below). */
typedef enum af_exec_bank_state { AF_BANK_IDLE, AF_BANK_SENT, AF_BANK_COLLECTED } af_exec_bank_state;
typedef struct af_exec_bank {
    af_exec_slot *slots[AF_EXEC_MAX_BATCH];
    size_t nslots;        /* slots that exist */
    size_t n;             /* cases of its batch */
    af_exec_bank_state state;
    bool begun[AF_EXEC_MAX_BACKENDS];                   /* backend k was sent the batch */
    size_t idx[AF_EXEC_MAX_BACKENDS][AF_EXEC_MAX_BATCH]; /* backend k's cases: slot numbers */
    size_t cnt[AF_EXEC_MAX_BACKENDS];
} af_exec_bank;

struct af_exec {
    af_exec_config cfg;
    af_backend *be[AF_EXEC_MAX_BACKENDS];
    char be_spec[AF_EXEC_MAX_BACKENDS][256]; /* as opened: a plugin or worker names itself otherwise */
    size_t nbe;
    af_check checks[AF_EXEC_MAX_CHECKS];
    size_t nchecks;

    af_oracle *exp_oracle;
    af_relation_ctx *rel;
    af_exec_slot *single; /* single executions (af_exec_run_case, _check, _bundle) */
    af_exec_bank bank[2]; /* batches */
    af_exec_bank *cur;    /* the batch checked last, while its bank is not reused */
    af_exec_slot *sel;    /* the execution the public accessors read (exec.h): set by the
                             public entry points alone (a single run, af_exec_select, a
                             batch's check), never moved by the stages, which each take the
                             slot they act on */
    bool has_expected;
    af_exec_timing timing;
    af_run_result bres[AF_EXEC_MAX_BATCH]; /* one batch's answers from one backend */
    uint32_t skip_next; /* backends the next single execution does not run (af_exec_skip_next) */
    uint64_t skipped;   /* backend runs skipped that way */
    uint64_t grads_unjudged;
    /* an executor beside another (af_exec_create_beside) that borrows its backends: it
     * closes none of them, and its single executions first collect the lender's batch in
     * flight (a worker takes one frame at a time) */
    af_exec *lender;
};

void af_exec_config_default(af_exec_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->pairs[0] = "explicit,fused";
    cfg->n_pairs = 1;
    for (int r = 0; r < AF_REL_COUNT; r++) cfg->relations[r] = true;
    af_oracle_opts_default(&cfg->oracle);
}

/* Index of backend `name`, opening it the first time. A backend is the same one when it
 * was opened with the same spec: "plugin:/opt/x.so" calls itself "plugin:x" (its own
 * name), and comparing with that would open it twice (and run and print every check of it
 * twice). */
static af_status af_exec_backend(af_exec *x, const char *name, size_t len, size_t *idx, af_error *err) {
    char buf[sizeof x->be_spec[0]];
    AF_RETURN_ERROR_IF(len >= sizeof buf, err, AF_ERR_INVALID, "backend name too long");
    memcpy(buf, name, len);
    buf[len] = 0;
    for (size_t k = 0; k < x->nbe; k++)
        if (strcmp(x->be_spec[k], buf) == 0) {
            *idx = k;
            return AF_OK;
        }
    AF_RETURN_ERROR_IF(x->nbe == AF_EXEC_MAX_BACKENDS, err, AF_ERR_INVALID, "too many backends (max %d)",
                       AF_EXEC_MAX_BACKENDS);
    if (x->lender) {
        size_t j = 0;
        while (j < x->lender->nbe && strcmp(x->lender->be_spec[j], buf) != 0) j++;
        AF_RETURN_ERROR_IF(j == x->lender->nbe, err, AF_ERR_INVALID, "%s: not a backend of the executor beside", buf);
        x->be[x->nbe] = x->lender->be[j];
    } else if (x->cfg.pool) {
        AF_TRY(af_backend_pool_open(x->cfg.pool, buf, &x->cfg.worker, &x->be[x->nbe], err));
    } else {
        AF_TRY(af_backend_spec_open(buf, &x->cfg.worker, &x->be[x->nbe], err));
    }
    memcpy(x->be_spec[x->nbe], buf, len + 1);
    *idx = x->nbe++;
    return AF_OK;
}

static af_check *af_exec_add_check(af_exec *x, af_check_type type, af_error *err) {
    if (x->nchecks == AF_EXEC_MAX_CHECKS) {
        af_error_set(err, AF_ERR_INVALID, "too many checks (max %d)", AF_EXEC_MAX_CHECKS);
        return NULL;
    }
    af_check *ck = &x->checks[x->nchecks++];
    memset(ck, 0, sizeof *ck);
    ck->type = type;
    return ck;
}

static af_status af_exec_setup(af_exec *x, af_error *err) {
    const af_exec_config *cfg = &x->cfg;
    for (size_t i = 0; i < cfg->n_backends; i++) {
        size_t k;
        AF_TRY(af_exec_backend(x, cfg->backends[i], strlen(cfg->backends[i]), &k, err));
        af_check *ck = af_exec_add_check(x, AF_CHECK_BACKEND, err);
        if (!ck) return AF_ERR_INVALID;
        ck->a = k;
        snprintf(ck->name, sizeof ck->name, "%s", af_backend_name(x->be[k]));
    }
    for (size_t i = 0; i < cfg->n_pairs; i++) {
        const char *p = cfg->pairs[i];
        const char *comma = strchr(p, ',');
        AF_RETURN_ERROR_IF(!comma || comma == p || !comma[1], err, AF_ERR_INVALID,
                           "--pair \"%s\": expected two backends as A,B", p);
        size_t a, b;
        AF_TRY(af_exec_backend(x, p, (size_t)(comma - p), &a, err));
        AF_TRY(af_exec_backend(x, comma + 1, strlen(comma + 1), &b, err));
        af_check *ck = af_exec_add_check(x, AF_CHECK_PAIR, err);
        if (!ck) return AF_ERR_INVALID;
        ck->a = a;
        ck->b = b;
        snprintf(ck->name, sizeof ck->name, "%s,%s", af_backend_name(x->be[a]), af_backend_name(x->be[b]));
    }
    for (int r = 0; r < AF_REL_COUNT; r++) {
        if (!cfg->relations[r]) continue;
        for (size_t k = 0; k < x->nbe; k++) {
            af_check *ck = af_exec_add_check(x, AF_CHECK_RELATION, err);
            if (!ck) return AF_ERR_INVALID;
            ck->a = k;
            ck->rel = (af_relation)r;
            snprintf(ck->name, sizeof ck->name, "%s@%s", af_relation_names[r], af_backend_name(x->be[k]));
        }
    }
    for (size_t k = 0; cfg->determinism > 0.0 && k < x->nbe; k++) {
        af_check *ck = af_exec_add_check(x, AF_CHECK_DETERMINISM, err);
        if (!ck) return AF_ERR_INVALID;
        ck->a = k;
        snprintf(ck->name, sizeof ck->name, "determinism@%s", af_backend_name(x->be[k]));
    }
    AF_RETURN_ERROR_IF(x->nchecks == 0, err, AF_ERR_INVALID, "nothing to check: give --backend, --pair or --relation with a backend");
    return AF_OK;
}

static void af_exec_slot_destroy(af_exec_slot *sl) {
    if (!sl) return;
    for (size_t k = 0; k < AF_EXEC_MAX_BACKENDS; k++) af_oracle_destroy(sl->keep_oracle[k]);
    af_inputs_destroy(sl->in);
    af_oracle_destroy(sl->oracle);
    af_scratch_release(&sl->outs);
    af_scratch_release(&sl->keeps);
    af_scratch_release(&sl->tails);
    for (size_t k = 0; k < AF_EXEC_MAX_BACKENDS; k++) {
        af_scratch_release(&sl->gouts[k]);
        af_scratch_release(&sl->again[k]);
    }
    af_scratch_release(&sl->lses);
    for (size_t i = 0; i < AF_EXEC_MAX_CHECKS; i++) {
        if (!sl->relrun[i]) continue;
        af_scratch_release(&sl->relrun[i]->buf);
        af_free(sl->relrun[i]);
    }
    af_free(sl);
}

static af_exec_slot *af_exec_slot_create(const af_exec_config *cfg) {
    af_exec_slot *sl = af_calloc(1, sizeof *sl);
    if (!sl) return NULL;
    sl->in = af_inputs_create();
    sl->oracle = af_oracle_create(&cfg->oracle);
    if (!sl->in || !sl->oracle) {
        af_exec_slot_destroy(sl);
        return NULL;
    }
    return sl;
}

/* Slots 0 .. n-1 of bank b exist. */
static af_status af_exec_bank_slots(af_exec *x, af_exec_bank *b, size_t n, af_error *err) {
    AF_RETURN_ERROR_IF(n > AF_EXEC_MAX_BATCH, err, AF_ERR_INVALID, "a batch of %zu cases (at most %d)", n,
                       AF_EXEC_MAX_BATCH);
    while (b->nslots < n) {
        b->slots[b->nslots] = af_exec_slot_create(&x->cfg);
        AF_RETURN_ERROR_IF(!b->slots[b->nslots], err, AF_ERR_NOMEM, "out of memory");
        b->nslots++;
    }
    return AF_OK;
}

/* An executor of cfg; lender: NULL, or the executor whose backends it borrows. */
static af_exec *af_exec_create_from(const af_exec_config *cfg, af_exec *lender, af_error *err) {
    af_exec *x = af_calloc(1, sizeof *x);
    if (!x) {
        af_error_set(err, AF_ERR_NOMEM, "out of memory");
        return NULL;
    }
    x->cfg = *cfg;
    x->lender = lender;
    x->exp_oracle = af_oracle_create(&cfg->oracle);
    x->rel = af_relation_ctx_create();
    x->single = af_exec_slot_create(cfg);
    if (!x->exp_oracle || !x->rel || !x->single) {
        af_error_set(err, AF_ERR_NOMEM, "out of memory");
        af_exec_destroy(x);
        return NULL;
    }
    x->sel = x->single;
    if (af_exec_setup(x, err) != AF_OK) {
        af_exec_destroy(x);
        return NULL;
    }
    return x;
}

af_exec *af_exec_create(const af_exec_config *cfg, af_error *err) { return af_exec_create_from(cfg, NULL, err); }

af_exec *af_exec_create_beside(af_exec *x, bool own_backends, af_error *err) {
    af_exec_config cfg = x->cfg;
    if (own_backends) cfg.pool = NULL;
    return af_exec_create_from(&cfg, own_backends ? NULL : x, err);
}

void af_exec_destroy(af_exec *x) {
    if (!x) return;
    if (!x->cfg.pool && !x->lender) /* borrowed backends stay open in their pool or executor */
        for (size_t k = 0; k < x->nbe; k++) af_backend_close(x->be[k]);
    af_exec_slot_destroy(x->single);
    for (size_t b = 0; b < 2; b++)
        for (size_t i = 0; i < x->bank[b].nslots; i++) af_exec_slot_destroy(x->bank[b].slots[i]);
    af_oracle_destroy(x->exp_oracle);
    af_relation_ctx_destroy(x->rel);
    af_free(x);
}

static af_kind af_kind_of_status(af_status st) {
    if (st == AF_ERR_CRASH) return AF_KIND_CRASH;
    if (st == AF_ERR_TIMEOUT) return AF_KIND_TIMEOUT;
    return AF_KIND_ERROR;
}

/* Precedence of kinds for a pair: the first in enum order that is not ok. */
static const af_result *af_worse(const af_result *a, const af_result *b) {
    if (a->kind == AF_KIND_OK) return b;
    if (b->kind == AF_KIND_OK) return a;
    return a->kind <= b->kind ? a : b;
}

/* Of an output's result, its gradients' and its statistics' (res[0 .. AF_EXEC_NRES - 1]),
 * the one that decides (af_worse; the output first on a tie): -1 the output, else the
 * gradient (AF_EXEC_LSE the statistics). */
static int af_exec_worst(const af_result *res) {
    int w = -1;
    for (int g = 0; g < AF_EXEC_NRES - 1; g++)
        if (af_worse(&res[1 + w], &res[1 + g]) != &res[1 + w]) w = g;
    return w;
}

static const char *af_exec_tensor_name(int tensor) {
    return tensor < 0 ? "out" : tensor == AF_EXEC_LSE ? "lse" : af_grad_names[tensor];
}
/* The gradient a buffer name is, -1 for the output or anything else. */
static int af_exec_grad_index(const char *name) {
    for (int g = 0; g < AF_GRAD_COUNT; g++)
        if (strcmp(name, af_grad_names[g]) == 0) return g;
    return -1;
}

static void af_exec_error_result(const af_exec_slot *sl, size_t k, af_result *res) {
    memset(res, 0, sizeof *res);
    res->kind = af_kind_of_status(sl->st[k]);
}

/* The one relation a sampled execution runs on backend k: a function of the case's seeds,
 * so a given input always runs the same checks. */
static af_relation af_exec_sampled_relation(const af_exec *x, const af_case *c, size_t k) {
    af_relation cand[AF_REL_COUNT];
    unsigned n = 0;
    for (int r = 0; r < AF_REL_COUNT; r++)
        if (x->cfg.relations[r] && af_relation_applies((af_relation)r, c)) cand[n++] = (af_relation)r;
    if (n == 0) return AF_REL_COUNT;
    uint64_t h = (uint64_t)c->t[AF_Q].seed * 0x9e3779b97f4a7c15ull ^ (uint64_t)c->t[AF_V].seed ^ (k * 0x85ebca6bu);
    return cand[(h >> 17) % n];
}

/* The oracle backend k's output is compared with: the reference, or the one following
 * the keep mask it drew. */
static af_oracle *af_exec_oracle_for(af_exec_slot *sl, size_t k) { return sl->use_keep[k] ? sl->keep_oracle[k] : sl->oracle; }

/* Compares backend k's output with o under the conventions the backend declared
 * (conventions.h: fully masked rows NaN, the mean of V or unmasked, IEEE 0 * NaN through
 * zero-weight keys, IEEE masking of non-finite scores, flushed denormals, scores in the
 * dtype); the oracle models each. */
static af_status af_exec_compare(const af_exec *x, size_t k, af_oracle *o, const af_tensor *out, af_result *res,
                                 af_error *err) {
    const af_backend_ext *e = af_backend_ext_of(x->be[k]);
    return af_oracle_compare_conv(o, out, e ? &e->conv : NULL, res, err);
}

/* Judges backend k on slot sl: its output (res[0]) and, where it ran the case backward,
 * each gradient the case asks for (res[1 + g]; ok where not asked or where its
 * conventions change the gradient in a way the oracle does not model; *unjudged counts
 * those), and the statistics it returned (res[1 + AF_EXEC_LSE]). Returns the index of the result that decides: the first failing in precedence
 * order (af_worse), -1 for the output. Touches nothing of x but its backends' declarations:
 * slots may be judged on helper threads. */
static af_status af_exec_judge(const af_exec *x, af_exec_slot *sl, size_t k, af_oracle *o,
                               af_result res[AF_EXEC_NRES], int *tensor, uint64_t *unjudged, af_error *err) {
    memset(res, 0, AF_EXEC_NRES * sizeof *res);
    AF_TRY(af_exec_compare(x, k, o, &sl->out[k], &res[0], err));
    if (sl->backward[k]) {
        const af_backend_ext *e = af_backend_ext_of(x->be[k]);
        for (int g = 0; g < AF_GRAD_COUNT; g++) {
            const af_tensor *gt = af_grads_get(&sl->grads[k], g);
            if (!gt->data) continue;
            af_error gerr;
            af_status st = af_oracle_compare_grad_conv(o, g, gt, e ? &e->conv : NULL, &res[1 + g], &gerr);
            if (st == AF_ERR_UNSUPPORTED) {
                memset(&res[1 + g], 0, sizeof res[1 + g]);
                (*unjudged)++;
                continue;
            }
            if (st != AF_OK) return af_error_set(err, st, "%s", gerr.msg);
        }
    }
    if (sl->lse[k].ndim == 3) {
        const af_backend_ext *e = af_backend_ext_of(x->be[k]);
        AF_TRY(af_oracle_compare_lse(o, &sl->lse[k], e ? &e->conv : NULL, &res[1 + AF_EXEC_LSE], err));
    }
    *tensor = af_exec_worst(res);
    if (sl->guard[k].n) { /* a write outside the buffer decides, whatever the values inside */
        int g = af_exec_grad_index(sl->guard[k].w[0].buffer);
        *tensor = g >= 0 && sl->backward[k] ? g : -1;
        res[1 + *tensor].kind = AF_KIND_GUARD_WRITE;
    }
    return AF_OK;
}

/* Backend k judged on slot sl (af_exec_judge, by the oracle it follows), once per
 * execution: the first call judges and keeps the results in the slot's record, later ones
 * (another check of the same backend, the bundle writer) read them. *res: its
 * AF_EXEC_NRES results, *tensor the one that decides. */
static af_status af_exec_judged(const af_exec *x, af_exec_slot *sl, size_t k, const af_result **res, int *tensor,
                                uint64_t *unjudged, af_error *err) {
    if (!sl->judged[k]) {
        AF_TRY(af_exec_judge(x, sl, k, af_exec_oracle_for(sl, k), sl->jres[k], &sl->jtensor[k], unjudged, err));
        sl->judged[k] = true;
    }
    *res = sl->jres[k];
    *tensor = sl->jtensor[k];
    return AF_OK;
}

/* After backend k ran on slot sl: when it returned its own dropout keep mask (keep, NULL
 * when none), prepares the reference that follows it. */
static af_status af_exec_keep_reference(const af_exec *x, af_exec_slot *sl, size_t k, const af_case_tensors *t,
                                        const uint8_t *keep, af_error *err) {
    sl->use_keep[k] = false;
    if (!keep || !(t->c->dropout_p > 0.0)) return AF_OK;
    if (!sl->keep_oracle[k]) {
        sl->keep_oracle[k] = af_oracle_create(&x->cfg.oracle);
        AF_RETURN_ERROR_IF(!sl->keep_oracle[k], err, AF_ERR_NOMEM, "out of memory");
    }
    const af_case *c = t->c;
    size_t n = c->batch * c->q_heads * c->q_len * c->kv_len;
    uint8_t *own = af_scratch_get(&sl->keeps, (int)k, n, err);
    if (!own) return AF_ERR_NOMEM;
    memcpy(own, keep, n);
    sl->keep_t[k] = *t;
    sl->keep_t[k].dropout_keep = own;
    AF_TRY(af_oracle_prepare(sl->keep_oracle[k], &sl->keep_t[k], err));
    sl->use_keep[k] = true;
    return AF_OK;
}

/* A relation runs a backend again; one that draws its own dropout mask cannot repeat it. */
static bool af_exec_repeatable(const af_exec *x, size_t k, const af_case *c) {
    const af_backend_ext *e = af_backend_ext_of(x->be[k]);
    return !(e && e->own_dropout && c->dropout_p > 0.0);
}

/* The current slot, its inputs generated: its case and bytes, nothing found yet. */
static void af_exec_slot_begin(af_exec_slot *sl) {
    const af_case_tensors *t = af_inputs_get(sl->in);
    sl->c = *t->c;
    sl->nbytes = af_case_encode(t->c, sl->bytes, sizeof sl->bytes);
    sl->nfind = 0;
    sl->compile_s = 0;
    memset(sl->judged, 0, sizeof sl->judged);
    for (size_t i = 0; i < AF_EXEC_MAX_CHECKS; i++)
        if (sl->relrun[i]) sl->relrun[i]->kept = false;
}

/* Does check ck need backend k? */
static bool af_exec_check_uses(const af_check *ck, size_t k) {
    return ck->a == k || (ck->type == AF_CHECK_PAIR && ck->b == k);
}

/* --- guard bands ---
 * Every buffer a backend writes (its output, its gradients) lies between two margins of
 * all-ones bytes, which are NaN in every float dtype, each one output row wide (Dv
 * elements of the widest dtype, at least 64 bytes, so the buffer stays 64-byte aligned);
 * the buffer itself is filled the same way before each run, so an element a backend never
 * writes reads NaN. After the run a margin byte that changed is a guard write
 * (AF_KIND_GUARD_WRITE). A cost of two memsets and a scan of two rows per buffer. */
#define AF_EXEC_GUARD_FILL 0xFF

static size_t af_exec_guard_margin(const af_case *c) {
    size_t m = ((size_t)c->v_head_dim * 8 + 63) & ~(size_t)63;
    return m < 64 ? 64 : m;
}

/* Slot k of s as a guarded buffer of span bytes: every byte (margins and buffer) filled;
 * returns the buffer (after the first margin). */
static void *af_exec_guarded(af_scratch *s, int k, size_t span, size_t margin, af_error *err) {
    uint8_t *p = af_scratch_get(s, k, span + 2 * margin, err);
    if (!p) return NULL;
    memset(p, AF_EXEC_GUARD_FILL, span + 2 * margin);
    return p + margin;
}

/* Appends to g what the margins of buffer t (span bytes as allocated) show: per margin the
 * first changed element (in t's dtype after the run, counted from the margin's start) and
 * how many changed. */
static void af_exec_guard_scan(const af_tensor *t, size_t span, size_t margin, const char *name, af_guard_writes *g) {
    const uint8_t *base = (const uint8_t *)t->data;
    const uint8_t *m[2] = {base - margin, base + span};
    size_t es = af_dtype_size(t->dtype);
    for (int side = 0; side < 2 && g->n < AF_GUARD_MAX; side++) {
        uint64_t first = 0, count = 0;
        for (size_t e = 0; e + es <= margin; e += es) {
            bool changed = false;
            for (size_t b = 0; b < es; b++) changed |= m[side][e + b] != AF_EXEC_GUARD_FILL;
            if (changed && count++ == 0) first = e / es;
        }
        if (!count) continue;
        af_guard_write *w = &g->w[g->n++];
        snprintf(w->buffer, sizeof w->buffer, "%s", name);
        w->margin = side ? AF_MARGIN_AFTER : AF_MARGIN_BEFORE;
        w->offset = first;
        w->count = count;
    }
}

/* Backend k's guard bands on slot sl after a run (out, grads: that run's buffers). */
static void af_exec_guard_check(const af_exec_slot *sl, size_t k, const af_tensor *out, const af_grads *grads,
                                af_guard_writes *g) {
    size_t margin = af_exec_guard_margin(&sl->c);
    af_exec_guard_scan(out, sl->guarded[k][0], margin, "out", g);
    for (int gi = 0; sl->backward[k] && gi < AF_GRAD_COUNT; gi++) {
        const af_tensor *gt = af_grads_get(grads, gi);
        if (gt->data) af_exec_guard_scan(gt, sl->guarded[k][1 + gi], margin, af_grad_names[gi], g);
    }
}

/* Backend k's buffers for a run on slot sl: out and grads shaped, out in slot oslot of s,
 * gradient g in slot gbase + g of gs, all guarded. */
static af_status af_exec_buffers(const af_exec *x, af_exec_slot *sl, size_t k, af_scratch *s, int oslot, af_scratch *gs,
                                 int gbase, af_tensor *out, af_grads *grads, af_error *err) {
    size_t margin = af_exec_guard_margin(&sl->c);
    af_backend_out_shape(x->be[k], &sl->c, out);
    sl->guarded[k][0] = af_tensor_span(out);
    out->data = af_exec_guarded(s, oslot, sl->guarded[k][0], margin, err);
    if (!out->data) return AF_ERR_NOMEM;
    memset(grads, 0, sizeof *grads);
    if (!sl->backward[k]) return AF_OK;
    af_backend_grads_shape(x->be[k], &sl->c, grads);
    for (int g = 0; g < AF_GRAD_COUNT; g++) {
        af_tensor *gt = af_grads_at(grads, g);
        if (!gt->ndim) continue;
        sl->guarded[k][1 + g] = af_tensor_span(gt);
        gt->data = af_exec_guarded(gs, gbase + g, sl->guarded[k][1 + g], margin, err);
        if (!gt->data) return AF_ERR_NOMEM;
    }
    return AF_OK;
}

/* Which backends support slot sl's case (with only != SIZE_MAX: only those check `only`
 * needs); their output buffers. */
static af_status af_exec_slot_outputs(af_exec *x, af_exec_slot *sl, size_t only, af_error *err) {
    for (size_t k = 0; k < x->nbe; k++) {
        sl->supported[k] = (only == SIZE_MAX || af_exec_check_uses(&x->checks[only], k)) &&
                           af_backend_supports(x->be[k], &sl->c, NULL, 0);
        if (sl->supported[k] && (sl->skip >> k & 1u)) { /* left out for a known bug */
            sl->supported[k] = false;
            x->skipped++;
        }
        sl->use_keep[k] = false;
        sl->judged[k] = false;
        sl->tail[k] = NULL;
        sl->lse[k].ndim = 0;
        sl->lse[k].data = NULL;
        sl->st[k] = AF_OK;
        sl->msg[k][0] = 0;
        sl->guard[k].n = 0;
        sl->ran2[k] = false;
        sl->st2[k] = AF_OK;
        if (!sl->supported[k]) continue;
        /* a backend that supports a backward case declared the capability (af_case_required_caps) */
        sl->backward[k] = sl->c.bwd.grads != 0;
        /* the statistics of a forward run, from a backend that returns them (1/Dv of the
         * output's size: asked on every case) */
        if (!sl->backward[k] && (af_backend_caps(x->be[k]) & AF_CAP_LSE)) {
            af_backend_lse_shape(&sl->c, &sl->lse[k]);
            sl->lse[k].data = af_scratch_get(&sl->lses, (int)k, af_tensor_span(&sl->lse[k]), err);
            if (!sl->lse[k].data) return AF_ERR_NOMEM;
        }
        AF_TRY(af_exec_buffers(x, sl, k, &sl->outs, (int)k, &sl->gouts[k], 0, &sl->out[k], &sl->grads[k], err));
    }
    return AF_OK;
}

/* The statistics backend k returned on slot sl (lse: NULL none, else a contiguous [B, Hq,
 * Sq] F32 or F64 tensor, the backend's): copied into the slot's buffer, which an in-process
 * run already wrote (lse is then the slot's own). */
static void af_exec_keep_lse(af_exec_slot *sl, size_t k, const af_tensor *lse) {
    af_tensor *own = &sl->lse[k];
    if (!lse || lse->ndim != 3 || !own->data) {
        own->ndim = 0;
        return;
    }
    if (lse == own) return;
    void *data = own->data;
    *own = *lse;
    own->data = data;
    memcpy(data, lse->data, af_tensor_span(lse));
}

/* What backend k's run on slot sl gave: st (err's message), the keep mask it drew, the
 * statistics it returned, the seconds it compiled. */
static af_status af_exec_took(const af_exec *x, af_exec_slot *sl, size_t k, af_status st, const af_error *berr,
                              const uint8_t *keep, const af_tensor *lse, double compile_s,
                              const af_guard_writes *reported, af_error *err) {
    sl->st[k] = st;
    af_exec_keep_lse(sl, k, st == AF_OK ? lse : NULL);
    sl->compile_s += compile_s;
    /* out of memory, or a worker that can no longer be started: not a finding */
    if (st == AF_ERR_NOMEM || st == AF_ERR_IO) return af_error_set(err, st, "%s", berr->msg);
    if (st == AF_ERR_UNSUPPORTED) { /* the backend declined after all: not run */
        sl->supported[k] = false;
        sl->st[k] = AF_OK;
        return AF_OK;
    }
    if (st != AF_OK) snprintf(sl->msg[k], sizeof sl->msg[k], "%s", berr->msg);
    if (st != AF_OK) return AF_OK;
    /* what the worker saw in its own bands, then what ours show */
    for (size_t i = 0; i < reported->n && sl->guard[k].n < AF_GUARD_MAX; i++) sl->guard[k].w[sl->guard[k].n++] = reported->w[i];
    af_exec_guard_check(sl, k, &sl->out[k], &sl->grads[k], &sl->guard[k]);
    return af_exec_keep_reference(x, sl, k, af_inputs_get(sl->in), keep, err);
}

/* Backend k's answer r on slot sl, from a run alone or a batch (one path for both): its
 * timings into x's, then what it gave (af_exec_took). A backend that reports no compile
 * time compiled for the whole wall time of a run on a compile key new to it (an upper
 * bound). */
static af_status af_exec_take(af_exec *x, af_exec_slot *sl, size_t k, const af_run_result *r, af_error *err) {
    double compile = r->compile_s >= 0 ? r->compile_s : r->new_key ? r->wall_s : 0.0;
    x->timing.compile_s += compile;
    if (r->run_s > 0) x->timing.target_s += r->run_s;
    sl->tail[k] = NULL;
    if (r->stderr_tail && r->stderr_tail[0]) { /* the record's own copy */
        size_t n = strlen(r->stderr_tail) + 1;
        char *own = af_scratch_get(&sl->tails, (int)k, n, err);
        if (!own) return AF_ERR_NOMEM;
        memcpy(own, r->stderr_tail, n);
        sl->tail[k] = own;
    }
    return af_exec_took(x, sl, k, r->st, &r->err, r->dropout_keep, r->lse, compile, &r->guard, err);
}

/* Runs backend k on slot sl, alone: its facts come back in its result as a batch's do
 * (af_backend_execute; an in-process backend reports no timings). */
static af_status af_exec_run_backend(af_exec *x, af_exec_slot *sl, size_t k, af_error *err) {
    if (!sl->supported[k]) return AF_OK;
    af_run_result r;
    af_error ignored; /* the run's message is r.err's */
    double t0 = af_now();
    af_backend_execute(x->be[k], af_inputs_get(sl->in), &sl->out[k], sl->backward[k] ? &sl->grads[k] : NULL,
                       !sl->backward[k] && sl->lse[k].data ? &sl->lse[k] : NULL, &r, &ignored);
    x->timing.backends_s += af_now() - t0;
    return af_exec_take(x, sl, k, &r, err);
}

/* Does a sampled execution run backend k's determinism check on c? A function of the
 * case's seeds (another mix than the relations'), below the configured share. */
static bool af_exec_determinism_sampled(const af_exec *x, const af_case *c, size_t k) {
    uint64_t h = 0x243f6a8885a308d3ull ^ k;
    for (int t = 0; t < AF_QKV_COUNT; t++) { /* splitmix64's finalizer over each seed in turn */
        h = (h ^ (uint64_t)c->t[t].seed) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 30;
        h *= 0xbf58476d1ce4e5b9ull;
        h ^= h >> 27;
        h *= 0x94d049bb133111ebull;
        h ^= h >> 31;
    }
    return (double)(h >> 11) * 0x1p-53 < x->cfg.determinism;
}

/* Does backend k declare every pass slot sl runs nondeterministic (nothing to check)? */
static bool af_exec_all_nondet(const af_exec *x, const af_exec_slot *sl, size_t k) {
    uint32_t tr = af_backend_traits(x->be[k]);
    return (tr & AF_TRAIT_NONDET_FORWARD) && (!sl->backward[k] || (tr & AF_TRAIT_NONDET_BACKWARD));
}

/* The determinism check's second run of backend k on slot sl (run once already,
 * successfully): the case again into fresh guarded NaN-filled buffers (out2, grads2), the
 * statistics asked again where the first run returned them (lse2). Made where the backends
 * run (a single execution's run, a batch's collection: no batch is in the workers' hands
 * then), so that the check itself only compares, on any thread, and batches stay pipelined. */
static af_status af_exec_again(af_exec *x, af_exec_slot *sl, size_t k, af_error *err) {
    double t0 = af_now();
    AF_TRY(af_exec_buffers(x, sl, k, &sl->again[k], 0, &sl->again[k], 1, &sl->out2[k], &sl->grads2[k], err));
    const af_case_tensors *t = af_inputs_get(sl->in);
    af_tensor *lse2 = &sl->lse2[k];
    memset(lse2, 0, sizeof *lse2);
    bool want_lse = !sl->backward[k] && sl->lse[k].ndim && sl->lse[k].data;
    if (want_lse) {
        af_backend_lse_shape(&sl->c, lse2);
        lse2->data = af_scratch_get(&sl->again[k], 1 + AF_GRAD_COUNT, af_tensor_span(lse2), err);
        if (!lse2->data) return AF_ERR_NOMEM;
    }
    af_run_result r;
    af_error berr;
    af_status st = af_backend_execute(x->be[k], t, &sl->out2[k], sl->backward[k] ? &sl->grads2[k] : NULL,
                                      want_lse ? lse2 : NULL, &r, &berr);
    x->timing.determinism_s += af_now() - t0;
    if (st == AF_ERR_NOMEM || st == AF_ERR_IO) return af_error_set(err, st, "%s", berr.msg);
    if (st == AF_ERR_UNSUPPORTED) return AF_OK; /* declined this time: not checked */
    x->timing.determinism_runs++;
    if (st != AF_OK) {
        sl->st2[k] = st;
        snprintf(sl->msg2[k], sizeof sl->msg2[k], "%s", berr.msg);
        return AF_OK;
    }
    sl->ran2[k] = true;
    return AF_OK;
}

/* The second runs slot sl's determinism checks ask for (every sampled one, or check
 * `only` whatever the sample), after its backends ran. */
static af_status af_exec_twins(af_exec *x, af_exec_slot *sl, size_t only, af_error *err) {
    for (size_t i = 0; i < x->nchecks; i++) {
        const af_check *ck = &x->checks[i];
        size_t k = ck->a;
        if (ck->type != AF_CHECK_DETERMINISM || (only != SIZE_MAX && i != only)) continue;
        if (!sl->supported[k] || sl->st[k] != AF_OK || !af_exec_repeatable(x, k, &sl->c) || af_exec_all_nondet(x, sl, k))
            continue;
        if (only == SIZE_MAX && !af_exec_determinism_sampled(x, &sl->c, k)) continue;
        AF_TRY(af_exec_again(x, sl, k, err));
    }
    return AF_OK;
}

/* The determinism check of backend k on slot sl, whose second run was made
 * (af_exec_again): bitwise against the first run, the output (res[0]) unless the backend
 * declares its forward nondeterministic, each gradient (res[1 + g]) unless it declares its
 * backward so, the statistics (res[1 + AF_EXEC_LSE]) with the output. A second run that
 * failed is res[0] of the failure's kind. Reads x, writes sl and res alone. */
static af_status af_exec_determinism(const af_exec *x, const af_exec_slot *sl, size_t k, af_result res[AF_EXEC_NRES],
                                     af_error *err) {
    memset(res, 0, AF_EXEC_NRES * sizeof *res);
    if (sl->st2[k] != AF_OK) {
        res[0].kind = af_kind_of_status(sl->st2[k]);
        return AF_OK;
    }
    uint32_t tr = af_backend_traits(x->be[k]);
    const af_tensor *lse2 = &sl->lse2[k];
    bool want_lse = lse2->data != NULL; /* af_exec_again asked for them again */
    if (!(tr & AF_TRAIT_NONDET_FORWARD)) {
        AF_TRY(af_oracle_compare_bitwise(&sl->out[k], &sl->out2[k], NULL, AF_KIND_NONDETERMINISTIC, &res[0], err));
        /* a worker's statistics are its own until its next run: the first run's were copied
         * into the slot (af_exec_keep_lse); a run that returned none the second time differs */
        if (want_lse && lse2->ndim == 3 && lse2->dtype == sl->lse[k].dtype)
            AF_TRY(af_oracle_compare_bitwise(&sl->lse[k], lse2, NULL, AF_KIND_NONDETERMINISTIC, &res[1 + AF_EXEC_LSE],
                                             err));
        else if (want_lse)
            res[1 + AF_EXEC_LSE].kind = AF_KIND_NONDETERMINISTIC;
    }
    for (int g = 0; sl->backward[k] && !(tr & AF_TRAIT_NONDET_BACKWARD) && g < AF_GRAD_COUNT; g++) {
        const af_tensor *a = af_grads_get(&sl->grads[k], g), *b = af_grads_get(&sl->grads2[k], g);
        if (a->data && b->data)
            AF_TRY(af_oracle_compare_bitwise(a, b, NULL, AF_KIND_NONDETERMINISTIC, &res[1 + g], err));
    }
    return AF_OK;
}

/* Relation check i failed on slot sl (its results r, msg the backend's message when it
 * failed on the transformed inputs, else NULL): its transformed run, which x->rel holds
 * until the next relation runs, kept in the slot's record for the bundle. The output as
 * the bundle holds it: the case's shape; one that covers fewer rows (batch_split's row
 * alone) is set into a copy of the source output at the rows it maps to, so the two files
 * differ exactly where the relation failed (its gradients, of other shapes, are not kept). */
static af_status af_exec_keep_relrun(const af_exec *x, af_exec_slot *sl, size_t i, const af_result r[AF_EXEC_NRES],
                                     const char *msg, af_error *err) {
    if (!sl->relrun[i]) {
        sl->relrun[i] = af_calloc(1, sizeof *sl->relrun[i]);
        AF_RETURN_ERROR_IF(!sl->relrun[i], err, AF_ERR_NOMEM, "out of memory");
    }
    af_exec_relrun *rr = sl->relrun[i];
    const af_check *ck = &x->checks[i];
    rr->kept = true;
    memcpy(rr->r, r, sizeof rr->r);
    snprintf(rr->msg, sizeof rr->msg, "%s", msg ? msg : "");
    memset(&rr->out, 0, sizeof rr->out);
    memset(&rr->grads, 0, sizeof rr->grads);
    rr->has_grads = false;
    if (msg) return AF_OK;
    const af_tensor *src = &sl->out[ck->a], *rout = af_relation_output(x->rel);
    bool same_rows = rout->ne[0] == src->ne[0] || rout->dtype != src->dtype;
    const af_tensor *base = same_rows ? rout : src;
    rr->out = *base;
    rr->out.data = af_scratch_get(&rr->buf, 0, af_tensor_span(base), err);
    if (!rr->out.data) return AF_ERR_NOMEM;
    memcpy(rr->out.data, base->data, af_tensor_span(base));
    if (!same_rows) {
        const uint32_t *rows = af_relation_row_map(x->rel);
        size_t row = src->ne[3] * af_dtype_size(src->dtype), n = rout->ne[0] * rout->ne[1] * rout->ne[2];
        for (size_t j = 0; j < n; j++)
            memcpy((uint8_t *)rr->out.data + (rows ? rows[j] : j) * row, (const uint8_t *)rout->data + j * row, row);
    }
    if (!sl->backward[ck->a] || !same_rows) return AF_OK;
    const af_grads *gr = af_relation_grads(x->rel);
    rr->grads = *gr;
    for (int g = 0; g < AF_GRAD_COUNT; g++) {
        const af_tensor *gt = af_grads_get(gr, g);
        if (!gt->data) continue;
        af_tensor *own = af_grads_at(&rr->grads, g);
        own->data = af_scratch_get(&rr->buf, 1 + g, af_tensor_span(gt), err);
        if (!own->data) return AF_ERR_NOMEM;
        memcpy(own->data, gt->data, af_tensor_span(gt));
    }
    rr->has_grads = true;
    return AF_OK;
}

/* Evaluates every check (or check `only`) on slot sl, whose backends have run; *unjudged
 * counts the gradients no check could judge. Backend and pair checks read x and write sl
 * alone (af_exec_checks_parallel); a relation runs a backend again and an expected output
 * has one oracle: those belong to one thread. */
static af_status af_exec_checks_slot(af_exec *x, af_exec_slot *sl, size_t only, uint64_t *unjudged, af_error *err) {
    const af_case_tensors *t = af_inputs_get(sl->in);
    const af_case *c = t->c;
    for (size_t i = 0; i < x->nchecks; i++) {
        const af_check *ck = &x->checks[i];
        af_result *res = &sl->results[i];
        memset(res, 0, sizeof *res);
        sl->check_ran[i] = false;
        int *tensor = &sl->result_tensor[i];
        *tensor = -1;
        af_result rs[AF_EXEC_NRES];
        const char *message = "";
        const af_guard_writes *guard = NULL;
        if (only != SIZE_MAX && i != only) continue;
        switch (ck->type) {
        case AF_CHECK_BACKEND:
            if (!sl->supported[ck->a]) break;
            sl->check_ran[i] = true;
            if (sl->st[ck->a] != AF_OK) {
                af_exec_error_result(sl, ck->a, res);
                message = sl->msg[ck->a];
            } else {
                const af_result *jr;
                AF_TRY(af_exec_judged(x, sl, ck->a, &jr, tensor, unjudged, err));
                *res = jr[1 + *tensor];
                if (res->kind == AF_KIND_GUARD_WRITE) guard = &sl->guard[ck->a];
            }
            break;
        case AF_CHECK_PAIR: {
            if (!sl->supported[ck->a] || !sl->supported[ck->b]) break;
            sl->check_ran[i] = true;
            af_result side[2];
            int st[2] = {-1, -1};
            size_t sides[2] = {ck->a, ck->b};
            for (int s = 0; s < 2; s++) {
                if (sl->st[sides[s]] != AF_OK) {
                    af_exec_error_result(sl, sides[s], &side[s]);
                    message = sl->msg[sides[s]];
                } else {
                    const af_result *jr;
                    AF_TRY(af_exec_judged(x, sl, sides[s], &jr, &st[s], unjudged, err));
                    side[s] = jr[1 + st[s]];
                }
            }
            const af_result *w = af_worse(&side[0], &side[1]);
            *res = *w;
            *tensor = st[w == &side[0] ? 0 : 1];
            if (res->kind == AF_KIND_GUARD_WRITE) guard = &sl->guard[sides[w == &side[0] ? 0 : 1]];
            break;
        }
        case AF_CHECK_RELATION: {
            if (!sl->supported[ck->a] || sl->st[ck->a] != AF_OK || !af_relation_applies(ck->rel, c) ||
                !af_exec_repeatable(x, ck->a, c))
                break;
            if (x->cfg.sample_relations && only == SIZE_MAX && ck->rel != af_exec_sampled_relation(x, c, ck->a))
                break;
            af_error rerr;
            memset(rs, 0, sizeof rs);
            double t0 = af_now();
            af_status st = af_relation_check_backward(ck->rel, x->be[ck->a], t, &sl->out[ck->a],
                                                      sl->backward[ck->a] ? &sl->grads[ck->a] : NULL,
                                                      sl->oracle, x->rel, rs, &rerr);
            x->timing.relations_s += af_now() - t0;
            if (st == AF_ERR_UNSUPPORTED) break;
            if (st != AF_OK) return af_error_set(err, st, "%s: %s", ck->name, rerr.msg);
            sl->check_ran[i] = true;
            *tensor = af_exec_worst(rs);
            *res = rs[1 + *tensor];
            if (res->kind == AF_KIND_ERROR) message = rerr.msg;
            if (res->kind != AF_KIND_OK) AF_TRY(af_exec_keep_relrun(x, sl, i, rs, rs[0].kind == AF_KIND_ERROR ? rerr.msg : NULL, err));
            break;
        }
        case AF_CHECK_DETERMINISM: {
            size_t k = ck->a;
            if (!sl->ran2[k] && sl->st2[k] == AF_OK) break; /* no second run this time */
            AF_TRY(af_exec_determinism(x, sl, k, rs, err));
            sl->check_ran[i] = true;
            *tensor = af_exec_worst(rs);
            *res = rs[1 + *tensor];
            if (sl->st2[k] != AF_OK) message = sl->msg2[k];
            break;
        }
        case AF_CHECK_EXPECTED: {
            sl->check_ran[i] = true;
            if (ck->a == SIZE_MAX) {
                af_tensor ref;
                size_t ne[4] = {c->batch, c->q_heads, c->q_len, c->v_head_dim};
                af_tensor_contiguous(&ref, AF_F64, 4, ne);
                ref.data = (void *)(uintptr_t)af_oracle_ref(sl->oracle);
                AF_TRY(af_oracle_compare(x->exp_oracle, &ref, res, err));
            } else if (!sl->supported[ck->a]) {
                sl->check_ran[i] = false;
            } else if (sl->st[ck->a] != AF_OK) {
                af_exec_error_result(sl, ck->a, res);
                message = sl->msg[ck->a];
            } else {
                AF_TRY(af_exec_compare(x, ck->a, x->exp_oracle, &sl->out[ck->a], res, err));
            }
            break;
        }
        }
        if (sl->check_ran[i] && res->kind != AF_KIND_OK) {
            af_finding *f = &sl->findings[sl->nfind++];
            memset(f, 0, sizeof *f);
            f->kind = res->kind;
            f->check = i;
            f->result = *res;
            snprintf(f->who, sizeof f->who, "%s", ck->name);
            snprintf(f->tensor, sizeof f->tensor, "%s", af_exec_tensor_name(*tensor));
            snprintf(f->message, sizeof f->message, "%s", message);
            if (guard) f->guard = *guard;
            f->error_class = f->kind == AF_KIND_ERROR ? af_error_class(f->who, f->message) : 0;
            f->signature = af_signature_finding(f->kind, f->who, f->tensor, f->error_class, c);
        }
    }
    return AF_OK;
}

/* The checks of slot sl (af_exec_checks_slot), timed. */
static af_status af_exec_checks(af_exec *x, af_exec_slot *sl, size_t only, af_error *err) {
    double t0 = af_now();
    af_status st = af_exec_checks_slot(x, sl, only, &x->grads_unjudged, err);
    x->timing.checks_s += af_now() - t0;
    return st;
}

/* Runs the checks on the inputs in slot sl: every check and every backend (only ==
 * SIZE_MAX), or check `only` alone with the backends it needs and nothing else (a sampled
 * relation then runs whatever the sample says: it was named). */
static af_status af_exec_execute(af_exec *x, af_exec_slot *sl, size_t only, af_error *err) {
    af_exec_slot_begin(sl);
    double t0 = af_now();
    AF_TRY(af_oracle_prepare(sl->oracle, af_inputs_get(sl->in), err));
    x->timing.reference_s += af_now() - t0;
    AF_TRY(af_exec_slot_outputs(x, sl, only, err));
    for (size_t k = 0; k < x->nbe; k++) AF_TRY(af_exec_run_backend(x, sl, k, err));
    AF_TRY(af_exec_twins(x, sl, only, err));
    return af_exec_checks(x, sl, only, err);
}

/* Drops the checks against an expected output of a previous bundle. */
static void af_exec_drop_expected(af_exec *x) {
    while (x->nchecks > 0 && x->checks[x->nchecks - 1].type == AF_CHECK_EXPECTED) x->nchecks--;
    x->has_expected = false;
}

/* A single execution of c (every check, or check `only`) in the single slot, leaving out
 * the backends of skip; it is then the one the accessors read. */
static af_status af_exec_run_single(af_exec *x, size_t only, const af_case *c, uint32_t skip, af_error *err) {
    AF_TRY(af_exec_batch_collect(x, err)); /* the workers are free for a single case */
    if (x->lender) AF_TRY(af_exec_batch_collect(x->lender, err));
    af_exec_slot *sl = x->sel = x->single;
    sl->skip = skip;
    double t0 = af_now();
    AF_TRY(af_inputs_generate(sl->in, c, err));
    x->timing.generate_s += af_now() - t0;
    x->timing.cases++;
    return af_exec_execute(x, sl, only, err);
}

af_status af_exec_run_case(af_exec *x, const af_case *c, af_error *err) {
    af_exec_drop_expected(x);
    uint32_t skip = x->skip_next;
    x->skip_next = 0;
    return af_exec_run_single(x, SIZE_MAX, c, skip, err);
}

af_status af_exec_run_check(af_exec *x, size_t check, const af_case *c, af_error *err) {
    af_exec_drop_expected(x);
    AF_RETURN_ERROR_IF(check >= x->nchecks, err, AF_ERR_INVALID, "no check %zu (the executor has %zu)", check,
                       x->nchecks);
    return af_exec_run_single(x, check, c, 0, err);
}

/* --- batches ----------------------------------------------------------------------------- */

/* A batch moves through a bank of slots: sent (inputs generated, frames sent, references
 * computed), collected (every backend's answers in), checked (the accessors may read it:
 * af_exec_select). Two banks let one batch be checked and stored while the next is in the
 * workers' hands (af_exec_batch_send's pipelining); one batch at most is sent and not yet
 * collected, since a worker takes one frame at a time. */

/* How long the frames are pushed beside the references at most; what is left then (a
 * worker that does not read) is written by batch_end within the batch's own timeout. */
#define AF_EXEC_PUSH_SECONDS 10.0

typedef struct af_exec_batch_ctx {
    af_exec *x;
    af_exec_bank *b;
    const af_case *cases;
} af_exec_batch_ctx;

/* On a helper thread: slot i's inputs (touching nothing but the slot). */
static void af_exec_generate_one(void *arg, size_t i) {
    af_exec_batch_ctx *b = arg;
    af_exec_slot *sl = b->b->slots[i];
    sl->prep = af_inputs_generate(sl->in, &b->cases[i], &sl->prep_err);
    if (sl->prep == AF_OK) af_exec_slot_begin(sl);
}

/* On a helper thread: slot i's float64 reference. */
static void af_exec_reference_one(void *arg, size_t i) {
    af_exec_batch_ctx *b = arg;
    af_exec_slot *sl = b->b->slots[i];
    sl->prep = af_oracle_prepare(sl->oracle, af_inputs_get(sl->in), &sl->prep_err);
}

/* On a helper thread: slot i's checks, when every check only compares. */
static void af_exec_check_one(void *arg, size_t i) {
    af_exec_batch_ctx *b = arg;
    af_exec_slot *sl = b->b->slots[i];
    sl->unjudged = 0;
    sl->prep = af_exec_checks_slot(b->x, sl, SIZE_MAX, &sl->unjudged, &sl->prep_err);
}

/* On this thread while the helpers compute the references: the begun batches' frames
 * written whole, to every worker at once as each pipe takes more, so that each worker
 * starts on its cases now. A frame larger than the pipe would otherwise wait for
 * batch_end, after the references: the workers idle meanwhile. */
static void af_exec_push_batches(void *arg) {
    af_exec_batch_ctx *b = arg;
    double deadline = af_now() + AF_EXEC_PUSH_SECONDS;
    for (;;) {
        struct pollfd pf[AF_EXEC_MAX_BACKENDS];
        nfds_t np = 0;
        for (size_t k = 0; k < b->x->nbe; k++) {
            int fd = b->b->begun[k] ? af_backend_batch_push(b->x->be[k]) : -1;
            if (fd >= 0) pf[np++] = (struct pollfd){fd, POLLOUT, 0};
        }
        double left = deadline - af_now();
        if (np == 0 || left <= 0) return;
        if (poll(pf, np, (int)ceil(left * 1000.0)) < 0 && errno != EINTR) return;
    }
}

bool af_exec_checks_parallel(const af_exec *x) {
    /* a determinism check compares runs made before it (af_exec_twins): it only compares */
    for (size_t i = 0; i < x->nchecks; i++)
        if (x->checks[i].type == AF_CHECK_RELATION || x->checks[i].type == AF_CHECK_EXPECTED) return false;
    return true;
}

/* The first slot of bank b whose preparation failed, as the batch's error. */
static af_status af_exec_prep_status(const af_exec_bank *b, af_error *err) {
    for (size_t i = 0; i < b->n; i++)
        if (b->slots[i]->prep != AF_OK) return af_error_set(err, b->slots[i]->prep, "%s", b->slots[i]->prep_err.msg);
    return AF_OK;
}

/* The bank in state st, or NULL. */
static af_exec_bank *af_exec_bank_in(af_exec *x, af_exec_bank_state st) {
    for (size_t i = 0; i < 2; i++)
        if (x->bank[i].state == st) return &x->bank[i];
    return NULL;
}

af_status af_exec_batch_send(af_exec *x, const af_case *cases, const uint32_t *skips, size_t n, unsigned threads,
                             af_error *err) {
    af_exec_drop_expected(x);
    AF_RETURN_ERROR_IF(n == 0, err, AF_ERR_INVALID, "an empty batch");
    AF_RETURN_ERROR_IF(af_exec_bank_in(x, AF_BANK_SENT), err, AF_ERR_INVALID,
                       "a batch is in flight: collect it before sending another");
    /* the bank that holds no batch waiting to be checked (the one checked last is done) */
    af_exec_bank *b = x->bank[0].state == AF_BANK_COLLECTED ? &x->bank[1] : &x->bank[0];
    AF_TRY(af_exec_bank_slots(x, b, n, err));
    b->state = AF_BANK_IDLE; /* until it is sent whole */
    b->n = n;
    if (x->cur == b) x->cur = NULL; /* its slots are overwritten: nothing to select */
    x->skip_next = 0; /* for single executions only */
    for (size_t i = 0; i < n; i++) b->slots[i]->skip = skips ? skips[i] : 0;
    memset(b->begun, 0, sizeof b->begun);
    af_exec_batch_ctx ctx = {x, b, cases};
    /* 1. every case's inputs, on the helper threads */
    double t0 = af_now();
    af_parallel_for(n, threads, af_exec_generate_one, &ctx);
    x->timing.generate_s += af_now() - t0;
    x->timing.cases += n;
    AF_TRY(af_exec_prep_status(b, err));
    for (size_t i = 0; i < n; i++) AF_TRY(af_exec_slot_outputs(x, b->slots[i], SIZE_MAX, err));
    /* 2. each backend that takes batches gets its cases now, in one frame, and works on
     * them while the references are computed here; from here on the bank must be collected
     * (the backends without batches run then, case by case) */
    b->state = AF_BANK_SENT;
    double tb = af_now();
    for (size_t k = 0; k < x->nbe; k++) {
        b->cnt[k] = 0;
        for (size_t i = 0; i < n; i++)
            if (b->slots[i]->supported[k]) b->idx[k][b->cnt[k]++] = i;
        if (b->cnt[k] < 2 || af_backend_batch_max(x->be[k]) < b->cnt[k]) continue;
        const af_case_tensors *in[AF_EXEC_MAX_BATCH];
        for (size_t j = 0; j < b->cnt[k]; j++) in[j] = af_inputs_get(b->slots[b->idx[k][j]]->in);
        AF_TRY(af_backend_batch_begin(x->be[k], in, b->cnt[k], err));
        b->begun[k] = true;
    }
    x->timing.backends_s += af_now() - tb;
    /* 3. the references, on the helper threads, while this one writes the frames whole */
    t0 = af_now();
    af_parallel_for_beside(n, threads, af_exec_reference_one, &ctx, af_exec_push_batches, &ctx);
    x->timing.reference_s += af_now() - t0;
    return af_exec_prep_status(b, err);
}

af_status af_exec_batch_collect(af_exec *x, af_error *err) {
    af_exec_bank *b = af_exec_bank_in(x, AF_BANK_SENT);
    if (!b) return AF_OK; /* collected already (a single execution drained it), or none sent */
    b->state = AF_BANK_COLLECTED;
    /* the backends without batches, case by case; then the batches' answers */
    for (size_t k = 0; k < x->nbe; k++) {
        if (b->begun[k]) continue;
        for (size_t i = 0; i < b->n; i++) AF_TRY(af_exec_run_backend(x, b->slots[i], k, err));
    }
    double tb = af_now();
    for (size_t k = 0; k < x->nbe; k++) {
        if (!b->begun[k]) continue;
        b->begun[k] = false;
        af_tensor *outs[AF_EXEC_MAX_BATCH];
        af_grads *grads[AF_EXEC_MAX_BATCH];
        af_run_result *res = x->bres;
        for (size_t j = 0; j < b->cnt[k]; j++) {
            af_exec_slot *sj = b->slots[b->idx[k][j]];
            outs[j] = &sj->out[k];
            grads[j] = sj->backward[k] ? &sj->grads[k] : NULL;
        }
        AF_TRY(af_backend_batch_end(x->be[k], outs, grads, res, err));
        for (size_t j = 0; j < b->cnt[k]; j++) AF_TRY(af_exec_take(x, b->slots[b->idx[k][j]], k, &res[j], err));
    }
    x->timing.backends_s += af_now() - tb;
    /* the determinism checks' second runs, while no batch is in the workers' hands */
    for (size_t i = 0; i < b->n; i++) AF_TRY(af_exec_twins(x, b->slots[i], SIZE_MAX, err));
    return AF_OK;
}

af_status af_exec_batch_check(af_exec *x, unsigned threads, af_error *err) {
    af_exec_bank *b = af_exec_bank_in(x, AF_BANK_COLLECTED);
    AF_RETURN_ERROR_IF(!b, err, AF_ERR_INVALID, "no batch to check: send and collect one first");
    b->state = AF_BANK_IDLE;
    x->cur = b;
    /* the checks: on the helper threads where each only compares (the host's share of a
     * batch that workers wait on), else case by case */
    if (threads > 1 && b->n > 1 && af_exec_checks_parallel(x)) {
        af_exec_batch_ctx ctx = {x, b, NULL};
        double tb = af_now();
        af_parallel_for(b->n, threads, af_exec_check_one, &ctx);
        x->timing.checks_s += af_now() - tb;
        for (size_t i = 0; i < b->n; i++) x->grads_unjudged += b->slots[i]->unjudged;
        AF_TRY(af_exec_prep_status(b, err));
    } else {
        for (size_t i = 0; i < b->n; i++) AF_TRY(af_exec_checks(x, b->slots[i], SIZE_MAX, err));
    }
    x->sel = b->slots[0];
    return AF_OK;
}

af_status af_exec_run_batch(af_exec *x, const af_case *cases, const uint32_t *skips, size_t n, unsigned threads,
                           af_error *err) {
    AF_RETURN_ERROR_IF(af_exec_batch_pending(x), err, AF_ERR_INVALID, "a batch is pending: check it first");
    AF_TRY(af_exec_batch_send(x, cases, skips, n, threads, err));
    AF_TRY(af_exec_batch_collect(x, err));
    return af_exec_batch_check(x, threads, err);
}

bool af_exec_batch_pending(const af_exec *x) {
    return x->bank[0].state != AF_BANK_IDLE || x->bank[1].state != AF_BANK_IDLE;
}

af_status af_exec_select(af_exec *x, size_t i, af_error *err) {
    AF_RETURN_ERROR_IF(!x->cur || i >= x->cur->n, err, AF_ERR_INVALID, "no case %zu in the last batch checked", i);
    x->sel = x->cur->slots[i];
    return AF_OK;
}

const af_exec_timing *af_exec_timing_of(const af_exec *x) { return &x->timing; }

size_t af_exec_batch_max(const af_exec *x) {
    size_t m = AF_EXEC_MAX_BATCH;
    for (size_t k = 0; k < x->nbe; k++) {
        size_t b = af_backend_batch_max(x->be[k]);
        if (b > 1 && b < m) m = b;
    }
    return m;
}

af_status af_exec_run_bytes(af_exec *x, const uint8_t *data, size_t size, af_error *err) {
    af_case c;
    af_case_decode(&c, data, size, x->cfg.budget);
    return af_exec_run_case(x, &c, err);
}

af_status af_exec_run_bundle(af_exec *x, const af_bundle *b, af_error *err) {
    af_exec_drop_expected(x);
    AF_TRY(af_exec_batch_collect(x, err)); /* the workers are free for a single case */
    af_exec_slot *sl = x->sel = x->single;
    AF_TRY(af_bundle_check_budget(b, x->cfg.budget, err)); /* before anything is allocated for it */
    AF_TRY(af_bundle_load_inputs(b, sl->in, err));
    double *expected = NULL;
    AF_TRY(af_bundle_load_expected(b, &expected, err));
    if (expected) {
        const af_case_tensors *t = af_inputs_get(sl->in);
        af_status st = af_oracle_prepare_expected(x->exp_oracle, t, expected, err);
        af_free(expected);
        AF_TRY(st);
        size_t n = x->nbe;
        for (size_t k = 0; k <= n; k++) {
            af_check *ck = af_exec_add_check(x, AF_CHECK_EXPECTED, err);
            if (!ck) return AF_ERR_INVALID;
            ck->a = k < n ? k : SIZE_MAX;
            snprintf(ck->name, sizeof ck->name, "%s~expected", k < n ? af_backend_name(x->be[k]) : "ref");
        }
        x->has_expected = true;
    }
    return af_exec_execute(x, sl, SIZE_MAX, err);
}

af_exec_record *af_exec_keep(af_exec *x, af_error *err) {
    af_exec_slot *sl = x->sel;
    if (sl->kept) {
        sl->kept++;
        return sl;
    }
    af_exec_slot *fresh = af_exec_slot_create(&x->cfg);
    if (!fresh) {
        af_error_set(err, AF_ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (x->single == sl) x->single = fresh;
    for (size_t b = 0; b < 2; b++)
        for (size_t i = 0; i < x->bank[b].nslots; i++)
            if (x->bank[b].slots[i] == sl) x->bank[b].slots[i] = fresh;
    sl->kept = 1;
    return sl;
}

af_exec_record *af_exec_selected(af_exec *x) { return x->sel; }

void af_exec_select_record(af_exec *x, af_exec_record *r) { x->sel = r ? r : x->single; }

bool af_exec_release(af_exec *x, af_exec_record *r) {
    if (!r || !r->kept || --r->kept) return false;
    if (x->sel == r) x->sel = x->single;
    af_exec_slot_destroy(r);
    return true;
}

size_t af_exec_finding_count(const af_exec *x) { return x->sel->nfind; }
const af_finding *af_exec_finding(const af_exec *x, size_t i) { return i < x->sel->nfind ? &x->sel->findings[i] : NULL; }
const af_case *af_exec_case(const af_exec *x) { return &x->sel->c; }
size_t af_exec_input(const af_exec *x, const uint8_t **bytes) {
    *bytes = x->sel->bytes;
    return x->sel->nbytes;
}
size_t af_exec_backend_count(const af_exec *x) { return x->nbe; }
af_backend *af_exec_backend_at(const af_exec *x, size_t i) { return i < x->nbe ? x->be[i] : NULL; }
const char *af_exec_stderr_tail(const af_exec *x, size_t i) {
    const char *t = i < x->nbe && x->sel->supported[i] ? x->sel->tail[i] : NULL;
    return t && t[0] ? t : NULL;
}

bool af_exec_would_run(const af_exec *x, const af_case *c) {
    for (size_t k = 0; k < x->nbe; k++)
        if (af_backend_supports(x->be[k], c, NULL, 0)) return true;
    return false;
}

uint32_t af_exec_compile_key(const af_exec *x) {
    uint32_t key = 0;
    for (size_t k = 0; k < x->nbe; k++) {
        const af_backend_ext *e = af_backend_ext_of(x->be[k]);
        if (e) key |= e->compile_key;
    }
    return key;
}

double af_exec_compile_seconds(const af_exec *x) { return x->sel->compile_s; }

void af_exec_skip_next(af_exec *x, uint32_t mask) { x->skip_next = mask; }
uint64_t af_exec_skipped(const af_exec *x) { return x->skipped; }
uint64_t af_exec_grads_unjudged(const af_exec *x) { return x->grads_unjudged; }

size_t af_exec_check_count(const af_exec *x) { return x->nchecks; }
const char *af_exec_check_name(const af_exec *x, size_t i) { return x->checks[i].name; }
bool af_exec_check_ran(const af_exec *x, size_t i) { return x->sel->check_ran[i]; }
const af_result *af_exec_check_result(const af_exec *x, size_t i) { return &x->sel->results[i]; }
const char *af_exec_check_tensor(const af_exec *x, size_t i) {
    return af_exec_tensor_name(x->sel->check_ran[i] ? x->sel->result_tensor[i] : -1);
}

/* Backend k's side of slot sl's bundle: res[0] its output's result, res[1 + g] gradient g's,
 * res[1 + AF_EXEC_LSE] its statistics'. */
static void af_exec_output(const af_exec *x, const af_exec_slot *sl, size_t k, const af_result *res,
                           af_bundle_output *o) {
    memset(o, 0, sizeof *o);
    o->backend = af_backend_name(x->be[k]);
    o->version = af_backend_version(x->be[k]);
    o->out = sl->st[k] == AF_OK ? &sl->out[k] : NULL;
    o->result = res[0];
    o->error = sl->st[k] == AF_OK ? NULL : sl->msg[k];
    /* the keep mask it drew, which the reference (the one it was judged by) followed */
    o->dropout_keep = sl->st[k] == AF_OK && sl->use_keep[k] ? sl->keep_t[k].dropout_keep : NULL;
    if (sl->st[k] == AF_OK && sl->backward[k]) {
        o->grads = &sl->grads[k];
        for (int g = 0; g < AF_GRAD_COUNT; g++) o->grad_results[g] = res[1 + g];
    }
    if (sl->st[k] == AF_OK && sl->lse[k].ndim == 3) {
        o->lse = &sl->lse[k];
        o->lse_result = res[1 + AF_EXEC_LSE];
    }
    const af_backend_ext *e = af_backend_ext_of(x->be[k]);
    if (e) {
        o->conventions = e->conventions;
        o->describe = e->describe;
        o->stderr_tail = sl->tail[k] && sl->tail[k][0] ? sl->tail[k] : NULL;
    }
}

af_status af_exec_write_bundle(af_exec *x, size_t i, const char *dir, char *path, size_t path_len, af_error *err) {
    AF_RETURN_ERROR_IF(i >= x->sel->nfind, err, AF_ERR_INVALID, "no finding %zu", i);
    return af_exec_write_bundle_as(x, i, x->sel->findings[i].signature, dir, path, path_len, err);
}

af_status af_exec_write_bundle_as(af_exec *x, size_t i, uint64_t signature, const char *dir, char *path,
                                  size_t path_len, af_error *err) {
    af_exec_bundle_opts bo = {.signature = signature};
    return af_exec_write_bundle_with(x, i, dir, &bo, path, path_len, err);
}

af_status af_exec_write_bundle_with(af_exec *x, size_t i, const char *dir, const af_exec_bundle_opts *bo, char *path,
                                    size_t path_len, af_error *err) {
    af_exec_slot *sl = x->sel;
    AF_RETURN_ERROR_IF(i >= sl->nfind, err, AF_ERR_INVALID, "no finding %zu", i);
    uint64_t signature = bo->signature;
    const af_finding *f = &sl->findings[i];
    const af_check *ck = &x->checks[f->check];
    const af_case_tensors *t = af_inputs_get(sl->in);
    af_bundle_output outs[2];
    size_t nout = 0;
    char relname[200];
    af_result rs[AF_EXEC_NRES];
    const af_result *jr;
    int tensor;
    /* each side as the execution's record holds it: judged once (af_exec_judged), a
     * relation's transformed run kept when it failed (af_exec_keep_relrun); nothing runs */
    switch (ck->type) {
    case AF_CHECK_BACKEND:
    case AF_CHECK_EXPECTED:
        if (ck->a == SIZE_MAX) break;
        memset(rs, 0, sizeof rs);
        rs[0] = f->result;
        if (ck->type == AF_CHECK_BACKEND && sl->st[ck->a] == AF_OK) {
            AF_TRY(af_exec_judged(x, sl, ck->a, &jr, &tensor, &x->grads_unjudged, err));
            memcpy(rs, jr, sizeof rs);
        }
        af_exec_output(x, sl, ck->a, rs, &outs[nout++]);
        break;
    case AF_CHECK_PAIR: {
        size_t sides[2] = {ck->a, ck->b};
        for (int s = 0; s < 2; s++) {
            memset(rs, 0, sizeof rs);
            if (sl->st[sides[s]] == AF_OK) {
                AF_TRY(af_exec_judged(x, sl, sides[s], &jr, &tensor, &x->grads_unjudged, err));
                memcpy(rs, jr, sizeof rs);
            } else {
                af_exec_error_result(sl, sides[s], &rs[0]);
            }
            af_exec_output(x, sl, sides[s], rs, &outs[nout++]);
        }
        break;
    }
    case AF_CHECK_RELATION: {
        const af_exec_relrun *rr = sl->relrun[f->check];
        AF_RETURN_ERROR_IF(!rr || !rr->kept, err, AF_ERR_INVALID, "%s: no transformed run in the record", ck->name);
        AF_TRY(af_exec_judged(x, sl, ck->a, &jr, &tensor, &x->grads_unjudged, err));
        af_exec_output(x, sl, ck->a, jr, &outs[nout++]);
        snprintf(relname, sizeof relname, "%s@%s", af_backend_name(x->be[ck->a]), af_relation_names[ck->rel]);
        outs[nout] = outs[0];
        outs[nout].backend = relname;
        outs[nout].dropout_keep = NULL;
        outs[nout].lse = NULL;
        outs[nout].out = rr->out.data ? &rr->out : NULL;
        outs[nout].result = rr->r[0];
        outs[nout].error = rr->out.data ? NULL : rr->msg;
        outs[nout].grads = rr->has_grads ? &rr->grads : NULL;
        for (int g = 0; g < AF_GRAD_COUNT; g++) outs[nout].grad_results[g] = rr->r[1 + g];
        nout++;
        break;
    }
    case AF_CHECK_DETERMINISM:
        /* the first run judged against the reference, the second as the record holds it */
        AF_TRY(af_exec_judged(x, sl, ck->a, &jr, &tensor, &x->grads_unjudged, err));
        af_exec_output(x, sl, ck->a, jr, &outs[nout]);
        if (sl->ran2[ck->a]) {
            outs[nout].out_run2 = &sl->out2[ck->a];
            outs[nout].grads_run2 = sl->backward[ck->a] ? &sl->grads2[ck->a] : NULL;
        }
        nout++;
        break;
    }
    char name[64], replay[1024];
    if (bo->name)
        snprintf(name, sizeof name, "%s", bo->name);
    else
        af_bundle_name(f->kind, signature, name, sizeof name);
    snprintf(replay, sizeof replay, "attnfuzz replay %s/%s", dir, name);
    af_bundle_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.c = &sl->c;
    spec.input = sl->bytes;
    spec.input_len = sl->nbytes;
    spec.tensors = t;
    /* the reference the failing side was judged by (one following a worker's keep mask) */
    const af_oracle *ro = ck->type == AF_CHECK_EXPECTED || ck->a == SIZE_MAX ? sl->oracle : af_exec_oracle_for(sl, ck->a);
    spec.ref = af_oracle_ref(ro);
    for (int g = 0; g < AF_GRAD_COUNT; g++) spec.ref_grads[g] = af_oracle_ref_grad(ro, g);
    spec.ref_lse = af_oracle_ref_lse(ro);
    spec.tensor = f->tensor;
    spec.kind = f->kind;
    spec.signature = signature;
    spec.who = f->who;
    spec.relation = ck->type == AF_CHECK_RELATION ? af_relation_names[ck->rel] : NULL;
    spec.outputs = outs;
    spec.n_outputs = nout;
    spec.tol = f->result.tol;
    spec.guard = f->kind == AF_KIND_GUARD_WRITE ? &f->guard : NULL;
    spec.replay_cmd = replay;
    spec.name = bo->name;
    spec.extra_json = bo->extra_json;
    spec.minimized = bo->minimized;
    return bo->old_dir ? af_bundle_write_over(dir, &spec, bo->old_dir, path, path_len, err)
                       : af_bundle_write(dir, &spec, path, path_len, err);
}
