/* campaign.h - `attnfuzz fuzz`: draw cases, run the checks, keep one bundle per new
 * signature and count recurrences, until a run, time or findings limit or a stop.
 *
 * A finding's signature is taken on its minimized case (minimize.h): the first time a
 * raw signature shows, the case is minimized and the bundle holds the minimized case;
 * later repeats of that raw signature map to the same stored finding. */
#ifndef ATTNFUZZ_CAMPAIGN_H
#define ATTNFUZZ_CAMPAIGN_H

#include "campaign_opts.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs the campaign. Returns AF_OK whether or not something was found (see stats);
 * errors are setup or I/O problems that stop it. */
af_status af_campaign_run(const af_campaign_opts *o, af_campaign_stats *stats, af_error *err);

#ifdef __cplusplus
}
#endif
#endif
