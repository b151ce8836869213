/* campaign_opts.c - a campaign's options (campaign_opts.h): their defaults, the end-of-campaign
 * minimization grace, and the stats file written with them. */
#include "attnfuzz/campaign_opts.h"

#include <math.h>
#include <string.h>

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
