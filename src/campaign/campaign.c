/* campaign.c - `attnfuzz fuzz` (see campaign.h): one process running the loop
 * (loop.h), or --jobs N children supervised (jobs.h); the final stats file.
 *
 * Where each part lives: loop.c the stages of one process's loop (draw, submit, collect,
 * check, observe, store, report), draw.c the case strategies, pool.c the feedback pool,
 * known_gate.c the known-bug gate, jobs.c job supervision, report.c the console, stats.c
 * the counts, the signature table and the stats JSON; campaign_opts.c the options' defaults
 * and what the loop and the jobs read of them. */
#include "attnfuzz/campaign.h"

#include <string.h>
#include <time.h>

#include "cpu_bind.h"
#include "jobs.h"
#include "loop.h"

af_status af_campaign_run(const af_campaign_opts *o, af_campaign_stats *s, af_error *err) {
    memset(s, 0, sizeof *s);
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    double started_at = (double)wall.tv_sec + 1e-9 * (double)wall.tv_nsec;
    s->started_at = started_at;
    if (o->jobs <= 1 && !o->no_bind) {
        int cpu, lock = af_cpu_bind_lock();
        if (af_cpu_bind_choose(&cpu, 1) == 1) af_cpu_bind(0, cpu);
        af_cpu_bind_unlock(lock);
    }
    af_status st = o->jobs > 1 ? af_campaign_jobs(o, s, err) : af_campaign_loop(o, s, !o->quiet, err);
    s->started_at = started_at;
    s->finished = true;
    if (o->stats_path) {
        af_error serr;
        if (af_campaign_stats_write(s, o, o->stats_path, &serr) != AF_OK && st == AF_OK) {
            if (err) *err = serr;
            st = serr.code;
        }
    }
    return st;
}
