/* known_gate.c - the known-bug gate of the campaign loop (see known_gate.h). */
#include "known_gate.h"

#include "attnfuzz/mem.h"
#include "clock.h"

/* A backend that hit known bug e h times is sent a case that triggers e (its `when`) with
 * probability 1 - AF_KNOWN_SKIP_MAX * h / (h + AF_KNOWN_SKIP_HALF): after a few hits only
 * about a tenth of such cases still reach it, so a known bug costs a bounded share of the
 * executions, and a new bug among the same features is still found (more slowly). The
 * draw is a hash of the case's seeds, so the same case is always treated alike. */
#define AF_KNOWN_SKIP_MAX 0.9
#define AF_KNOWN_SKIP_HALF 8.0
/* A known bug that crashes or hangs its worker costs a restart per hit (a new process; on a
 * GPU a new CUDA context, and spares used up by a burst of them cost seconds) where another
 * costs a case: a share of its trigger cases is no bound when thousands run a second. A
 * backend is sent at most one of its trigger cases per AF_KNOWN_FAULT_GAP seconds, hit or
 * not, the first after one gap (the corpus's seeds too): the spares a first fault starts
 * are then ready for the next, and a fault costs milliseconds. */

af_status af_known_gate_init(af_known_gate *g, const af_known *known, const af_exec *x, double gap, af_error *err) {
    g->known = known;
    g->nk = af_known_count(known);
    g->next = NULL;
    g->gap = gap > 0 ? gap : AF_KNOWN_FAULT_GAP;
    double first = af_now() + g->gap;
    if (!g->nk) return AF_OK;
    g->next = af_calloc(g->nk * AF_EXEC_MAX_BACKENDS, sizeof *g->next);
    AF_RETURN_ERROR_IF(!g->next, err, AF_ERR_NOMEM, "out of memory");
    for (size_t e = 0; e < g->nk; e++) {
        af_known_info info;
        af_known_info_of(known, e, &info);
        bool fault = info.kinds & (1u << AF_KIND_CRASH | 1u << AF_KIND_TIMEOUT);
        for (size_t k = 0; k < AF_EXEC_MAX_BACKENDS; k++)
            g->next[e * AF_EXEC_MAX_BACKENDS + k] =
                fault && k < af_exec_backend_count(x) &&
                        af_known_applies(known, e, af_backend_name(af_exec_backend_at(x, k)))
                    ? first
                    : -1.0;
    }
    return AF_OK;
}

void af_known_gate_free(af_known_gate *g) {
    af_free(g->next);
    g->next = NULL;
}

static uint64_t af_known_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint32_t af_known_gate_skip(af_known_gate *gate, const af_store *store, const af_exec *x, const af_case *c,
                            size_t why[AF_EXEC_MAX_BACKENDS]) {
    size_t nk = af_known_count(gate->known), nbe = af_exec_backend_count(x);
    if (!nk || !store) return 0;
    af_known_vars vars;
    bool have = false;
    uint32_t mask = 0;
    double now = -1.0;
    uint64_t seeds = (uint64_t)c->t[AF_Q].seed ^ (uint64_t)c->t[AF_K].seed << 21 ^ (uint64_t)c->t[AF_V].seed << 42;
    for (size_t k = 0; k < nbe && k < AF_EXEC_MAX_BACKENDS; k++) {
        for (size_t e = 0; e < nk; e++) {
            double *next = gate->next && e < gate->nk ? &gate->next[e * AF_EXEC_MAX_BACKENDS + k] : NULL;
            bool fault = next && *next >= 0.0;
            double h = (double)af_store_known_hits(store, e, k); /* nonzero only where e applies to k */
            if (h == 0.0 && !fault) continue;
            if (!have) {
                af_known_vars_of_case(&vars, c);
                have = true;
            }
            if (!af_known_when(gate->known, e, &vars)) continue;
            bool skip;
            if (fault) {
                if (now < 0.0) now = af_now();
                skip = now < *next;
                if (!skip) *next = now + gate->gap;
            } else {
                double p = AF_KNOWN_SKIP_MAX * h / (h + AF_KNOWN_SKIP_HALF);
                uint64_t u = af_known_mix(seeds ^ af_known_mix(e * 0x9e3779b97f4a7c15ull + k + 1));
                skip = (double)(u >> 11) * 0x1p-53 < p;
            }
            if (skip) {
                mask |= 1u << k;
                why[k] = e;
                break;
            }
        }
    }
    return mask;
}

void af_known_gate_count(const af_known_gate *g, af_campaign_stats *s, uint32_t mask,
                         const size_t why[AF_EXEC_MAX_BACKENDS]) {
    for (size_t k = 0; k < AF_EXEC_MAX_BACKENDS; k++) {
        if (!(mask >> k & 1u)) continue;
        af_known_info info;
        af_known_info_of(g->known, why[k], &info);
        af_known_stat *ks = af_stats_known(s, info.id);
        if (ks) ks->skipped++;
        s->known_skipped++;
    }
}

bool af_known_gate_runs_unskipped(const af_exec *x, const af_case *c, uint32_t mask) {
    for (size_t k = 0; k < af_exec_backend_count(x); k++)
        if (!(mask >> k & 1u) && af_backend_supports(af_exec_backend_at(x, k), c, NULL, 0)) return true;
    return false;
}
