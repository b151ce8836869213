/* beside.h - one job at a time on a thread beside the campaign loop (the store's minimizer).
 *
 * The loop hands a job (af_beside_hand) when none is handed, goes on with its own work, and
 * takes the job back once the thread has run it (af_beside_take). Only the hand-off is
 * locked: the job belongs to the thread from hand to take and to the loop otherwise, so what
 * the job reads and writes needs no lock of its own. */
#ifndef AF_CAMPAIGN_BESIDE_H
#define AF_CAMPAIGN_BESIDE_H

#include <stdbool.h>

#include "attnfuzz/status.h"

typedef struct af_beside af_beside;

/* Runs one job on the thread; ctx is af_beside_start's. */
typedef void (*af_beside_fn)(void *job, void *ctx);

/* The thread started, running fn on each job handed to it; NULL with err set when it cannot
 * start. It may run on any CPU of the process's cpuset: a campaign binds its loop to one
 * CPU (cpu_bind.h), which the thread would otherwise inherit and share with the loop it is
 * meant to run beside; processes it starts inherit that too. */
af_beside *af_beside_start(af_beside_fn fn, void *ctx, af_error *err);

/* Hands job to the thread; none may be handed (taken back) already. */
void af_beside_hand(af_beside *b, void *job);

/* The job handed, once the thread has run it (then it is the caller's again and none is
 * handed), or NULL: none handed, or still running (with wait: waits for it). */
void *af_beside_take(af_beside *b, bool wait);

/* Stops the thread (after the job it runs, if any) and frees b; a job handed and not taken
 * back stays the caller's to free. b may be NULL. */
void af_beside_stop(af_beside *b);

#endif
