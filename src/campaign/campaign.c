/* campaign.c - `attnfuzz fuzz` (see campaign.h): one process running the loop
 * (loop.h), or --jobs N children supervised (jobs.h); the final stats file.
 *
 * Where each part lives: loop.c the stages of one process's loop (draw, submit, collect,
 * check, observe, store, report), draw.c the case strategies, pool.c the feedback pool,
 * known_gate.c the known-bug gate, jobs.c job supervision, report.c the console, stats.c
 * the counts, the signature table and the stats JSON. */
#include "attnfuzz/campaign.h"

#include <math.h>
#include <string.h>
#include <time.h>

#include "cpu_bind.h"
#include "jobs.h"
#include "loop.h"

const char *const af_strategy_names[AF_STRATEGY_COUNT] = {"generator", "grid", "bytes"};
_Static_assert(sizeof(af_strategy_names) / sizeof(af_strategy_names[0]) == AF_STRATEGY_COUNT, "names");

void af_campaign_opts_default(af_campaign_opts *o) {
    memset(o, 0, sizeof *o);
    af_exec_config_default(&o->exec);
    o->crashes_dir = "crashes";
    o->seed = 1;
    o->jobs = 1;
    o->backward = -1.0;
    o->serving = -1.0;
    o->fp8 = -1.0;
    o->minimize_share = AF_MINIMIZE_SHARE;
    o->minimize_grace = -1.0;
}

double af_campaign_minimize_grace(const af_campaign_opts *o, double ran) {
    if (o->no_minimize) return 0.0;
    if (o->minimize_grace >= 0) return o->minimize_grace;
    double share = o->minimize_share > 0 && o->minimize_share < 1 ? o->minimize_share : AF_MINIMIZE_SHARE;
    return fmax(AF_MINIMIZE_GRACE_MIN, share * (o->seconds > 0 ? o->seconds : ran));
}

af_status af_campaign_stats_write(const af_campaign_stats *s, const af_campaign_opts *o, const char *path,
                                  af_error *err) {
    if (!o) return af_stats_write(s, NULL, path, err);
    af_stats_about about = {o->shard.index, o->shard.count, o->seed, o->jobs ? o->jobs : 1, o->crashes_dir,
                            af_strategy_names[o->strategy]};
    return af_stats_write(s, &about, path, err);
}

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
