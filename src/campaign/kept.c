/* kept.c - the compiled structures a campaign draws new values for (kept.h). */
#include "kept.h"

void af_kept_add(af_kept *k, const af_case *c, uint64_t hash) {
    size_t i = 0;
    while (i < k->n && k->hash[i] != hash) i++;
    if (i == k->n && k->n < AF_KEPT_STRUCTURES) {
        k->n++;
    } else if (i == k->n) { /* full: the oldest */
        i = 0;
        for (size_t j = 1; j < k->n; j++)
            if (k->added[j] < k->added[i]) i = j;
    }
    k->c[i] = *c;
    k->hash[i] = hash;
    k->added[i] = k->clock++;
}

void af_kept_drop(af_kept *k, uint64_t hash) {
    for (size_t i = 0; i < k->n; i++) {
        if (k->hash[i] != hash) continue;
        k->n--;
        k->c[i] = k->c[k->n];
        k->hash[i] = k->hash[k->n];
        k->added[i] = k->added[k->n];
        return;
    }
}

const af_case *af_kept_pick(const af_kept *k, af_rng *rng, bool grads) {
    size_t nk = 0;
    for (size_t i = 0; i < k->n; i++) nk += (k->c[i].bwd.grads != 0) == grads;
    if (!nk) return NULL;
    size_t j = af_rng_below(rng, (uint32_t)nk);
    for (size_t i = 0; i < k->n; i++)
        if ((k->c[i].bwd.grads != 0) == grads && j-- == 0) return &k->c[i];
    return NULL;
}
