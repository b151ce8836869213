/* kept.h - the compiled structures a campaign draws new values for (library-internal:
 * loop.c and the tests use it).
 *
 * While compiling takes more than its share of a campaign's time, the next batch keeps
 * the structure (the fields of the compile key: shapes, dtype, layouts, masks, gradients,
 * ...) of a structure compiled before and draws new values, so one compile serves many
 * cases. The set holds the last AF_KEPT_STRUCTURES structures, not only the last one: a
 * value draw keeps its structure's gradients, so the one structure a campaign happened to
 * compile last would set its backward share alone (two torch.compile campaigns of 600 s ran
 * 12% and 41% backward cases, the second at 2.3 times the cost a case) and narrow what it
 * explores to one shape. */
#ifndef AF_CAMPAIGN_KEPT_H
#define AF_CAMPAIGN_KEPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnfuzz/case.h"
#include "attnfuzz/rng.h"

#define AF_KEPT_STRUCTURES 8

typedef struct af_kept {
    af_case c[AF_KEPT_STRUCTURES];
    uint64_t hash[AF_KEPT_STRUCTURES]; /* of the compile key's fields (af_case_key_hash) */
    uint64_t added[AF_KEPT_STRUCTURES]; /* when each was kept (clock's value then) */
    uint64_t clock;                     /* structures kept so far */
    size_t n;                           /* how many are kept: c[0 .. n) */
} af_kept;

/* Keeps c, a structure that just compiled: in place of the one of the same hash, else
 * in a free place, else in place of the oldest. */
void af_kept_add(af_kept *k, const af_case *c, uint64_t hash);

/* Drops the structure of hash, if kept: one refused, a known bug's, or one that crashed
 * or hung a worker (each further draw would cost the same again). */
void af_kept_drop(af_kept *k, uint64_t hash);

/* A kept structure to draw values for, one with gradients (grads) or without, any of that
 * kind alike; NULL when none of that kind is kept. The campaign draws the kind with its
 * backward share and, when none is kept, draws a new structure of that kind: a value draw
 * keeps its structure's gradients, so picking among what happened to compile would let
 * the first few structures set the share (a torch.compile campaign compiled 8 structures
 * with gradients and 2 without in 150 s and ran 99.6% backward cases). */
const af_case *af_kept_pick(const af_kept *k, af_rng *rng, bool grads);

#endif
