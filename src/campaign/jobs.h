/* jobs.h - `attnfuzz fuzz --jobs N` (library-internal): N child processes, each running the
 * loop (loop.h) with its own seed stream and the same crashes directory (bundle names are
 * signatures and writes are atomic renames, so two processes finding the same bug leave one
 * bundle). The parent merges their stats files once a second and restarts a child that dies
 * (campaign_opts.h: AF_JOB_MAX_RESTARTS); each child is bound to one CPU with its workers
 * (cpu_bind.h) unless --no-bind. */
#ifndef ATTNFUZZ_JOBS_H
#define ATTNFUZZ_JOBS_H

#include "attnfuzz/campaign_opts.h"

/* Runs o->jobs children to the end of the campaign; s holds their merged stats and the
 * deaths. AF_ERR_IO when no directory for the children's stats can be made, a first fork
 * fails, or every job failed. */
af_status af_campaign_jobs(const af_campaign_opts *o, af_campaign_stats *s, af_error *err);

#endif
