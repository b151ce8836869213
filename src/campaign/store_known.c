/* store_known.c - the store's known-bug step (store_known.h). */
#include "store_known.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/mem.h"

struct af_store_known {
    const af_known *k;
    uint64_t *hits;  /* [entry * AF_EXEC_MAX_BACKENDS + backend] */
    uint8_t *tried;  /* [entry]: its exemplar was written or found written (or could not be) */
};

af_store_known *af_store_known_create(const af_known *k, af_error *err) {
    size_t n = af_known_count(k);
    if (!n) return NULL;
    af_store_known *sk = af_calloc(1, sizeof *sk);
    if (sk) {
        sk->k = k;
        sk->hits = af_calloc(n * AF_EXEC_MAX_BACKENDS, sizeof *sk->hits);
        sk->tried = af_calloc(n, 1);
    }
    if (!sk || !sk->hits || !sk->tried) {
        af_store_known_destroy(sk);
        af_error_set(err, AF_ERR_NOMEM, "out of memory");
        return NULL;
    }
    return sk;
}

void af_store_known_destroy(af_store_known *sk) {
    if (!sk) return;
    af_free(sk->hits);
    af_free(sk->tried);
    af_free(sk);
}

void af_store_known_match(const af_store_known *sk, const af_exec *x, const af_finding *found, size_t nf, long *entry) {
    (void)found; /* x holds the execution: its findings are these */
    for (size_t i = 0; i < nf; i++) entry[i] = sk ? af_known_match_exec(sk->k, x, i) : -1;
}

uint64_t af_store_known_count(const af_store_known *sk, size_t entry, size_t backend) {
    if (!sk || entry >= af_known_count(sk->k) || backend >= AF_EXEC_MAX_BACKENDS) return 0;
    return sk->hits[entry * AF_EXEC_MAX_BACKENDS + backend];
}

/* Writes the exemplar of entry for f from x's record of the execution f is of. */
static af_status af_store_known_exemplar(af_store_known *sk, af_exec *x, const af_finding *f, long entry,
                                         const char *dir, af_known_stat *ks, af_store_event *ev, af_error *err) {
    af_known_info info;
    af_known_info_of(sk->k, (size_t)entry, &info);
    sk->tried[entry] = 1;
    size_t fi = SIZE_MAX;
    for (size_t k = 0; k < af_exec_finding_count(x) && fi == SIZE_MAX; k++)
        if (af_exec_finding(x, k)->check == f->check) fi = k;
    if (fi == SIZE_MAX) return AF_OK; /* not a finding of x's execution: only counted */
    char name[AF_KNOWN_ID_MAX + 8];
    snprintf(name, sizeof name, "known-%s", info.id);
    /* case.json says which entry this is ("extra") */
    cJSON *extra = cJSON_CreateObject();
    char *text = NULL;
    if (extra && cJSON_AddStringToObject(extra, "known", info.id) &&
        cJSON_AddStringToObject(extra, "class", af_known_class_names[info.cls]) &&
        cJSON_AddStringToObject(extra, "title", info.title) && cJSON_AddStringToObject(extra, "file", info.file))
        text = cJSON_PrintUnformatted(extra);
    cJSON_Delete(extra);
    AF_RETURN_ERROR_IF(!text, err, AF_ERR_NOMEM, "out of memory");
    af_error werr;
    af_exec_bundle_opts bo = {.signature = f->signature, .name = name, .extra_json = text};
    af_status ws = af_exec_write_bundle_with(x, fi, dir, &bo, ks->bundle, sizeof ks->bundle, &werr);
    free(text);
    if (ws == AF_OK) {
        ev->stored = true;
    } else if (ws != AF_ERR_EXISTS) { /* kept by an earlier run or another job: it stays */
        ks->bundle[0] = 0;
        ev->failed = true;
        fprintf(stderr, "attnfuzz: could not store the exemplar of known bug %s: %s\n", info.id, werr.msg);
    }
    return AF_OK;
}

af_status af_store_known_hit(af_store_known *sk, af_exec *x, af_campaign_stats *s, const af_finding *f, long entry,
                             const char *dir, af_store_event *ev, af_error *err) {
    af_known_info info;
    af_known_info_of(sk->k, (size_t)entry, &info);
    af_known_stat *ks = af_stats_known(s, info.id);
    AF_RETURN_ERROR_IF(!ks, err, AF_ERR_NOMEM, "out of memory");
    memset(ev, 0, sizeof *ev);
    ev->known = entry;
    ev->entry = (size_t)(ks - s->known);
    ev->first = ks->hits == 0;
    ks->hits++;
    s->known_hits++;
    uint32_t be = af_known_exec_backends(x, f->who);
    for (size_t k = 0; k < AF_EXEC_MAX_BACKENDS; k++)
        if (be >> k & 1u) sk->hits[(size_t)entry * AF_EXEC_MAX_BACKENDS + k]++;
    if (sk->tried[entry] || ks->bundle[0]) return AF_OK;
    return af_store_known_exemplar(sk, x, f, entry, dir, ks, ev, err);
}
