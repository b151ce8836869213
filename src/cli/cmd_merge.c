/* cmd_merge.c - `attnfuzz merge OUT SOURCE...`: the shards of a campaign joined into one
 * directory (merge.h), once or every --watch seconds while they run. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnfuzz/merge.h"
#include "cli.h"

static volatile sig_atomic_t af_merge_stop;

static void af_merge_on_signal(int sig) {
    (void)sig;
    af_merge_stop = 1;
}

static void af_merge_usage(FILE *f) {
    fprintf(f,
            "usage: attnfuzz merge [--watch SECONDS] [--grace SECONDS] [--quiet] OUT SOURCE...\n"
            "\n"
            "Joins the bundles of several shards or machines into OUT/crashes, one bundle per\n"
            "name (a signature, or known-ID for a known bug), the smallest case where two\n"
            "sources hold the same name, and sums their stats into OUT/stats.json (per-shard\n"
            "rows in per_shard). A SOURCE is a shard directory (ROOT/shard-I, from fuzz --root),\n"
            "a root holding shard-I directories, or a crashes directory. Safe while the shards\n"
            "still run and beside other merges into the same OUT: a bundle in OUT is always\n"
            "complete (OUT/crashes/NAME is a link to a version that is never changed).\n"
            "\n"
            "  --watch SECONDS   merge again every SECONDS until every shard the stats\n"
            "                    announce (--shard I/N) has finished, or Ctrl-C\n"
            "  --grace SECONDS   a replaced version stays this long for readers that opened it\n"
            "                    (default 3600)\n"
            "  --quiet           no per-pass line, no warnings about unreadable bundles\n"
            "\n"
            "  attnfuzz merge camp/merged camp                  # once, after the campaign\n"
            "  attnfuzz merge --watch 300 camp/merged camp      # every 5 minutes while it runs\n"
            "  attnfuzz report -o camp/report camp/merged       # then one page of it\n"
            "\n"
            "exit: 0 merged, nothing found; 1 merged, OUT holds findings; 2 usage or runtime error\n");
}

static void af_merge_print(const char *out, const af_merge_result *r) {
    char shards[96];
    if (r->shards_expected)
        snprintf(shards, sizeof shards, "%zu of %zu shards (%zu finished)", r->sources, r->shards_expected,
                 r->shards_finished);
    else
        snprintf(shards, sizeof shards, "%zu source%s", r->sources, r->sources == 1 ? "" : "s");
    printf("attnfuzz merge: %s, %llu execs, %zu bundles seen -> %zu in %s/crashes (%zu new, %zu replaced by a "
           "smaller case)%s",
           shards, (unsigned long long)r->execs, r->seen, r->bundles, out, r->added, r->replaced,
           r->unreadable ? "" : "\n");
    if (r->unreadable) printf(", %zu unreadable (named above)\n", r->unreadable);
    fflush(stdout);
}

int af_cmd_merge(int argc, char **argv) {
    double watch = 0, grace = 0;
    bool quiet = false;
    enum { O_WATCH = 1, O_GRACE, O_QUIET, O_HELP };
    static const struct option longopts[] = {{"watch", required_argument, 0, O_WATCH},
                                             {"grace", required_argument, 0, O_GRACE},
                                             {"quiet", no_argument, 0, O_QUIET},
                                             {"help", no_argument, 0, O_HELP},
                                             {0, 0, 0, 0}};
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        char *end = NULL;
        switch (opt) {
        case O_WATCH:
        case O_GRACE: {
            double v = strtod(optarg, &end);
            if (!*optarg || *end || !(v > 0) || v > 1e9) {
                fprintf(stderr, "attnfuzz merge: bad value \"%s\" (seconds, above 0)\n", optarg);
                return 2;
            }
            if (opt == O_WATCH) watch = v;
            else grace = v;
            break;
        }
        case O_QUIET: quiet = true; break;
        case O_HELP:
        case 'h': af_merge_usage(stdout); return 0;
        default: af_merge_usage(stderr); return 2;
        }
    }
    if (argc - optind < 2) {
        fprintf(stderr, "attnfuzz merge: give OUT and at least one SOURCE\n");
        af_merge_usage(stderr);
        return 2;
    }
    af_merge_opts o = {.out = argv[optind], .sources = (const char *const *)argv + optind + 1,
                       .n_sources = (size_t)(argc - optind - 1), .grace = grace, .quiet = quiet};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = af_merge_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    af_merge_result r;
    for (;;) {
        af_error err = {0};
        if (af_merge_run(&o, &r, &err) != AF_OK) {
            fprintf(stderr, "attnfuzz merge: %s\n", err.msg);
            return 2;
        }
        if (!quiet) af_merge_print(o.out, &r);
        bool done = r.shards_expected > 0 && r.shards_finished >= r.shards_expected && r.sources >= r.shards_expected;
        if (watch <= 0 || done || af_merge_stop) break;
        /* a signal cuts the wait short; the next pass is then skipped */
        struct timespec ts = {(time_t)watch, (long)((watch - (double)(time_t)watch) * 1e9)};
        while (!af_merge_stop && nanosleep(&ts, &ts) != 0) {
        }
        if (af_merge_stop) break;
    }
    return r.bundles ? 1 : 0;
}
