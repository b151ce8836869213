/* pool.h - the feedback pool of the campaign loop (library-internal): cases to mutate and
 * cross, the --corpus seeds first, then every case that showed a feature combination not seen
 * before or came closer to its tolerance than before (semantic feedback without coverage
 * instrumentation). */
#ifndef ATTNFUZZ_POOL_H
#define ATTNFUZZ_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnfuzz/case.h"
#include "attnfuzz/rng.h"
#include "attnfuzz/status.h"

#define AF_POOL_MAX 512

typedef struct af_pool {
    af_case cases[AF_POOL_MAX];
    size_t n;
    uint64_t seen[4096]; /* open-addressed set of (features, closeness bucket) */
    size_t nseen;
} af_pool;

/* Notes key (a feature combination and closeness bucket); true when it is new (a full set
 * notes nothing more). */
bool af_pool_note(af_pool *p, uint64_t key);
/* Adds c; a full pool replaces a random case. */
void af_pool_add(af_pool *p, const af_case *c, af_rng *r);
/* Seeds from --corpus dir: raw inputs, or bundle directories (their input.bin, or when a
 * bundle has none, as another tool's or `attnfuzz capture`'s, its case.json). A file named
 * *.json is an index (capture's captured.json), not an input, and is passed over. A file that
 * is not a regular file or is over AF_CASE_INPUT_MAX bytes is skipped, unread, with a
 * warning naming it: one odd file does not stop a campaign. AF_ERR_IO when dir cannot be
 * read. */
af_status af_pool_load_corpus(af_pool *p, const char *dir, size_t budget, af_rng *r, af_error *err);

#endif
