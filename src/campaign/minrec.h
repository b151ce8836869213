/* minrec.h - the shared record of minimized signatures (library-internal: store.c and
 * the tests use it).
 *
 * Minimizing a finding costs hundreds of executions, and every job of a campaign (and
 * every campaign, libFuzzer or AFL++ instance sharing a crashes directory) meets the same
 * bugs. So the answer is kept beside the bundles, in <crashes>/.minimized/, one small file
 * per raw signature (the signature of a finding as found):
 *
 *   <raw>          "attnfuzz-minimized 1 <raw> <sig> <kind>\n": the finding was minimized
 *                  and signed <sig> (its bundle is <kind>-<sig>); written whole into a
 *                  temporary file and renamed into place, so a reader sees no file or a
 *                  whole one (rename(2) is atomic among processes, whatever writes at once)
 *   <raw>.claim    "attnfuzz-claim 1 <pid> <start> <host>\n": process <pid> (started at
 *                  <start> clock ticks after boot, on <host>) is minimizing it now; created
 *                  whole with link(2), which fails when the name exists, so exactly one
 *                  of several processes claiming at once gets it
 *   .tmp.<pid>.*   a temporary file of process <pid>, never read as a record
 *
 * Why one file per signature and not one log: a lookup is one open(2) of a known name,
 * cheap enough to do for every new raw signature and for every queued one once a second,
 * and it reads at most 128 bytes however long the record grows (a log would have to be
 * read whole, or tracked by offset, by every process); a record cannot be torn, because
 * no reader ever sees a file being written (an append to a shared log can interleave or
 * stop half-way when a process dies); and claiming needs an atomic test-and-set, which
 * link(2) is and an append is not. Nothing is fsynced: a record lost in a power cut is
 * minimized once more, and a file emptied by one reads as absent.
 *
 * A claim is stale, and taken over, when its process is gone: on the same host, no such
 * pid or one started at another time (pids are reused); from another host (a shared file
 * system), after AF_MINREC_CLAIM_MAX_AGE. Two processes taking over one stale claim at the
 * same instant may both minimize it once: duplicated work, never a lost or torn record.
 * An alias whose bundle is gone from the crashes directory (deleted by a user) reads as
 * absent: the finding is minimized and stored again. */
#ifndef ATTNFUZZ_MINREC_H
#define ATTNFUZZ_MINREC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnfuzz/oracle.h"
#include "attnfuzz/status.h"

#define AF_MINREC_DIR ".minimized"
#define AF_MINREC_CLAIM_MAX_AGE 3600.0 /* seconds: a claim of another host older than this is stale */
#define AF_MINREC_FILE_MAX 128         /* bytes: a record or claim file larger than this is not one */

typedef struct af_minrec af_minrec;

typedef struct af_minrec_alias {
    uint64_t raw; /* the signature of a finding as found */
    uint64_t sig; /* the signature of its minimized case: its bundle is <kind>-<sig> */
    af_kind kind; /* the minimized finding's kind (a finite twin's may differ from the raw one's) */
} af_minrec_alias;

typedef enum af_minrec_state {
    AF_MINREC_NONE,  /* nothing recorded, no claim */
    AF_MINREC_ALIAS, /* minimized already (*alias filled) */
    AF_MINREC_BUSY,  /* another live process holds the claim: it is minimizing it */
    AF_MINREC_MINE,  /* this process holds the claim */
    AF_MINREC_COUNT
} af_minrec_state;
extern const char *const af_minrec_state_names[AF_MINREC_COUNT];

/* The record of crashes_dir (the string is copied; nothing is created before the first
 * claim or alias). NULL when out of memory. The process that opens it is the one its
 * claims name: open it in the process that minimizes (a --jobs child, not its parent). */
af_minrec *af_minrec_open(const char *crashes_dir);
/* Drops every claim this handle still holds. NULL does nothing. */
void af_minrec_close(af_minrec *r);

/* What the record says about raw: ALIAS, BUSY, MINE (our own claim) or NONE. Reads at
 * most two small files; never blocks, never allocates. */
af_minrec_state af_minrec_lookup(af_minrec *r, uint64_t raw, af_minrec_alias *alias);
/* The alias of raw alone (true when the record has one and its bundle is there), no
 * claim looked at: it reads nothing of r but its directories, so a thread beside the one
 * that claims and publishes may call it (the store's minimizer, store.c). */
bool af_minrec_alias_read(const af_minrec *r, uint64_t raw, af_minrec_alias *alias);
/* Claims raw for minimizing: MINE when this process holds the claim now (also when the
 * record cannot be written at all: then nothing is shared, and minimizing goes on), ALIAS
 * when it was minimized already, BUSY when another live process holds it. */
af_minrec_state af_minrec_claim(af_minrec *r, uint64_t raw, af_minrec_alias *alias);
/* Records a->raw -> a->sig (replacing any record of a->raw) and drops the claim on
 * a->raw if this process holds it. AF_ERR_IO naming the file when it cannot be written. */
af_status af_minrec_publish(af_minrec *r, const af_minrec_alias *a, af_error *err);
/* Drops this process's claim on raw (nothing when it holds none). */
void af_minrec_release(af_minrec *r, uint64_t raw);

/* Removes the temporary files process pid left in crashes_dir's record (a --jobs child
 * killed mid-write); returns how many. Its claims need no cleaning: they are stale. */
size_t af_minrec_remove_partial(const char *crashes_dir, long pid);

#endif
