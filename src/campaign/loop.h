/* loop.h - one campaign process (library-internal): the loop behind `attnfuzz fuzz` without
 * --jobs, and each --jobs child (jobs.h). */
#ifndef ATTNFUZZ_LOOP_H
#define ATTNFUZZ_LOOP_H

#include <stdbool.h>

#include "attnfuzz/campaign_opts.h"

/* Runs the campaign of o in this process until a run, time or findings limit or a stop
 * (stop.h), then minimizes what was stored as found within the grace period; s holds its
 * stats (o->stats_path is rewritten once a second and at once after a new finding). status:
 * print the status line and the NEW/KNOWN lines on stderr. Errors: the executor's or the
 * store's setup, --corpus unreadable, an execution error, AF_ERR_NOMEM. */
af_status af_campaign_loop(const af_campaign_opts *o, af_campaign_stats *s, bool status, af_error *err);

#endif
