/* store_known.h - the store's known-bug step (store.h, known.h; library-internal): match
 * the findings of an execution against the known bugs before anything else is done with
 * them, count a match against its entry, keep one exemplar bundle per entry. Kept apart
 * from store.c's minimize-and-sign path: the store calls it first, per finding. */
#ifndef ATTNFUZZ_STORE_KNOWN_H
#define ATTNFUZZ_STORE_KNOWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnfuzz/exec.h"
#include "attnfuzz/known.h"
#include "attnfuzz/store.h"

typedef struct af_store_known af_store_known;

/* NULL when k is NULL or has no entries (then nothing is matched), or out of memory
 * (*err set). */
af_store_known *af_store_known_create(const af_known *k, af_error *err);
void af_store_known_destroy(af_store_known *sk); /* NULL does nothing */

/* entry[i] = the known bug finding found[i] of x's last execution is (known.h), -1 for
 * none. x must hold that execution (the stderr tails are its backends'). */
void af_store_known_match(const af_store_known *sk, const af_exec *x, const af_finding *found, size_t nf, long *entry);

/* Counts f, a finding of the execution x holds (the one found, or a minimized case's), as
 * known bug `entry` in stats and in the learning table; the first one of an entry is
 * written as its exemplar bundle <dir>/known-<id> from x's record of that execution
 * (nothing runs again). *ev is filled. Errors: AF_ERR_NOMEM. A bundle that cannot be
 * written is no error (a message on stderr, the hit still counted). */
af_status af_store_known_hit(af_store_known *sk, af_exec *x, af_campaign_stats *s, const af_finding *f, long entry,
                             const char *dir, af_store_event *ev, af_error *err);

uint64_t af_store_known_count(const af_store_known *sk, size_t entry, size_t backend);

#endif
