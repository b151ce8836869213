/* cmd_fuzz.c - `attnfuzz fuzz`: the campaign. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "attnfuzz/campaign.h"
#include "attnfuzz/shard.h"
#include "attnfuzz/known.h"
#include "cli.h"
#include "core/fileio.h"

static void af_fuzz_usage(FILE *f) {
    fprintf(f,
            "usage: attnfuzz fuzz [options]\n"
            "\n"
            "Draws attention cases, runs them through the selected checks and keeps one repro\n"
            "bundle per new finding signature in the crashes directory. With no backend\n"
            "options: the pair explicit,fused and every relation on both.\n"
            "\n"
            "  --backend NAME      compare NAME with the float64 reference (repeatable)\n"
            "  --pair A,B          run A and B on the same case, both against the reference\n"
            "  --relation NAME     metamorphic relation on every backend (repeatable, or all):\n"
            "                      layout, placement, batch_split, head_perm, kv_perm, masked_values\n"
            "  --runs N            stop after N executions\n"
            "  --time SECONDS      stop after this long\n"
            "  --seed N            campaign seed (default 1)\n"
            "  --crashes DIR       where bundles go (default crashes/)\n"
            "  --corpus DIR        inputs or bundles to start from: run once each,\n"
            "                      first, then mutated\n"
            "  --jobs N            N processes sharing the crashes directory; one that dies\n"
            "                      (e.g. OOM-killed) is restarted; exit 2 if they kept dying\n"
            "  --no-bind           do not bind each job and its workers to one CPU (default:\n"
            "                      job k on the k-th allowed CPU; one job on the CPU it starts on)\n"
            "  --stats FILE        write JSON stats (execs, execs/s, findings, signatures)\n"
            "  --max-findings N    stop after N unique findings\n"
            "  --budget MIB        tensor memory per case (default 64)\n"
            "  --max-flops F       cap on the flops of one generated case (default 2e7)\n"
            "  --backward SHARE    share of generated cases that also ask for gradients\n"
            "                      (dQ, dK, dV, dmask), 0..1 (default 1/3 when some backend\n"
            "                      declares the backward capability, else 0)\n"
            "  --serving SHARE     share of generated cases in a serving form (packed THD,\n"
            "                      paged KV, sinks, ALiBi) or a decode shape, 0..1 (default\n"
            "                      0.25 when a worker or target declares a serving capability,\n"
            "                      else 0)\n"
            "  --determinism SHARE share of executions in which each backend runs the case a\n"
            "                      second time and must give bitwise-equal outputs and\n"
            "                      gradients (default 0.02; 0 turns it off; a check that runs\n"
            "                      a backend again, like a relation: batches are not pipelined)\n"
            "  --fp8 SHARE         share of generated cases with FP8 inputs (e4m3 or e5m2 Q, K,\n"
            "                      V with per-tensor descales), 0..1 (default 0.25 when a\n"
            "                      worker or target declares e4m3 or e5m2, else 0)\n"
            "  --edges SHARE       share of generated cases on both sides of the fused kernels'\n"
            "                      switches (head dims 8..256 and one off, lengths at 64, 128,\n"
            "                      256, 512 and one off, GQA ratios, unaligned rows), 0..1;\n"
            "                      the fields a backend refuses more are drawn more (default 0)\n"
            "  --tiny              every dimension 1 (measures per-case overhead)\n"
            "  --timeout S         seconds a worker backend gets per case (default 10); past\n"
            "                      it the worker is killed and the case kept as a timeout\n"
            "  --compile-timeout S extra seconds for a worker's start and for the first case\n"
            "                      of a new compile key (default 60)\n"
            "  --waive masked_row_nan   do not report NaN in fully masked rows\n"
            "  --waive masked_value_leak  do not report NaN that only a zero-weight key's\n"
            "                      non-finite value causes (0 * Inf, 0 * NaN)\n"
            "  --strategy S        generator (default), or a baseline: grid, bytes\n"
            "  --no-minimize       store findings as found (default: minimize each new one\n"
            "                      first and sign the minimized case, so one bug is one bundle)\n"
            "  --batch N           run N cases at a time (default 1): their inputs and\n"
            "                      references on --threads threads, and a worker that declares\n"
            "                      batches gets them in one frame (a GPU kernel's cases launched\n"
            "                      back to back); cases of a batch share a compile key. While\n"
            "                      the workers compute a batch, the last one is checked and\n"
            "                      stored and the next one generated (pipelined batches)\n"
            "  --no-pipeline       batches one after another (the workers wait meanwhile)\n"
            "  --threads N         threads for a batch's inputs and references (default 1;\n"
            "                      more than 1: the job is not bound to one CPU)\n"
            "  --no-spare          no spare worker process after a worker's first crash (a\n"
            "                      spare started ahead makes each later restart cost no start-up)\n"
            "  --shard I/N         shard I of a campaign of N (0 <= I < N): its own case stream,\n"
            "                      disjoint from every other shard's with the same --seed\n"
            "  --shard auto/N      I from SLURM_ARRAY_TASK_ID (a Slurm array task) or\n"
            "                      JOB_COMPLETION_INDEX (a Kubernetes Indexed Job pod)\n"
            "  --root DIR          the output root the shards share: bundles in\n"
            "                      DIR/shard-I/crashes, stats in DIR/shard-I/stats.json, seeds\n"
            "                      from DIR/corpus and known bugs from DIR/known.json when they\n"
            "                      exist (--crashes, --stats and --corpus override); join them\n"
            "                      with attnfuzz merge\n"
            "  --known FILE        also match findings against the known bugs of FILE (a\n"
            "                      known.json; repeatable). By default the repository's\n"
            "                      corpus/findings/*/known.json are loaded: a finding of a\n"
            "                      known bug is counted against it (status line, stats),\n"
            "                      kept once as crashes/known-ID, never minimized, and its\n"
            "                      trigger cases are sent less to a backend that keeps hitting it\n"
            "  --no-known          load no known bugs: every finding is new\n"
            "  --known-fault-gap S a known bug that crashes or hangs a backend gets at most one\n"
            "                      of its trigger cases per S seconds, the first after S\n"
            "                      (default 60: each hit costs a worker restart)\n"
            "  --minimize-share F  minimizing takes at most this share of each job's time so far\n"
            "                      (default 0.1; 1: no limit); what does not fit is stored as\n"
            "                      found and minimized at the end\n"
            "  --minimize-grace S  seconds after --time for that (default: the share of --time,\n"
            "                      at least 10); 0: none, run `attnfuzz minimize CRASHES` later\n"
            "  --quiet             no status lines\n"
            "\n"
            "exit: 0 nothing new found (known bugs found again are counted, not findings),\n"
            "1 new findings, 2 usage or runtime error\n");
}

static void af_on_signal(int sig) {
    (void)sig;
    af_campaign_interrupt();
}

static int af_parse_u64(const char *s, uint64_t *out) {
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    if (!*s || *end) return -1;
    *out = v;
    return 0;
}

int af_cmd_fuzz(int argc, char **argv) {
    af_campaign_opts o;
    af_campaign_opts_default(&o);
    af_exec_config cfg;
    memset(&cfg, 0, sizeof cfg);
    af_oracle_opts_default(&cfg.oracle);
    cfg.determinism = 0.02;
    int selected = 0;
    af_cli_known ko = {0};
    enum { O_RUNS = 1, O_TIME, O_SEED, O_CRASHES, O_CORPUS, O_JOBS, O_STATS, O_MAXF, O_FLOPS, O_QUIET, O_HELP, O_STRAT, O_NOMIN, O_TINY, O_NOBIND,
           O_BATCH, O_NOPIPE, O_THREADS, O_NOSPARE, O_SHARD, O_ROOT, O_BACKWARD, O_MINSHARE, O_MINGRACE, O_SERVING, O_FAULTGAP, O_FP8, O_DETERMINISM, O_EDGES };
    static const struct option longopts[] = {
        AF_CLI_EXEC_OPTIONS,
        AF_CLI_KNOWN_OPTIONS,
        {"runs", required_argument, 0, O_RUNS},
        {"time", required_argument, 0, O_TIME},
        {"seed", required_argument, 0, O_SEED},
        {"crashes", required_argument, 0, O_CRASHES},
        {"corpus", required_argument, 0, O_CORPUS},
        {"jobs", required_argument, 0, O_JOBS},
        {"stats", required_argument, 0, O_STATS},
        {"max-findings", required_argument, 0, O_MAXF},
        {"max-flops", required_argument, 0, O_FLOPS},
        {"backward", required_argument, 0, O_BACKWARD},
        {"quiet", no_argument, 0, O_QUIET},
        {"strategy", required_argument, 0, O_STRAT},
        {"no-minimize", no_argument, 0, O_NOMIN},
        {"minimize-share", required_argument, 0, O_MINSHARE},
        {"known-fault-gap", required_argument, 0, O_FAULTGAP},
        {"minimize-grace", required_argument, 0, O_MINGRACE},
        {"tiny", no_argument, 0, O_TINY},
        {"no-bind", no_argument, 0, O_NOBIND},
        {"batch", required_argument, 0, O_BATCH},
        {"threads", required_argument, 0, O_THREADS},
        {"no-spare", no_argument, 0, O_NOSPARE},
        {"no-pipeline", no_argument, 0, O_NOPIPE},
        {"shard", required_argument, 0, O_SHARD},
        {"root", required_argument, 0, O_ROOT},
        {"serving", required_argument, 0, O_SERVING},
        {"fp8", required_argument, 0, O_FP8},
        {"determinism", required_argument, 0, O_DETERMINISM},
        {"edges", required_argument, 0, O_EDGES},
        {"help", no_argument, 0, O_HELP},
        {0, 0, 0, 0},
    };
    const char *shard = NULL, *root = NULL;
    bool crashes_set = false, stats_set = false;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int r = af_cli_exec_option(&cfg, opt, optarg, &selected);
        if (r == 0) r = af_cli_known_option(&ko, opt, optarg);
        if (r < 0) return 2;
        if (r > 0) continue;
        uint64_t v;
        switch (opt) {
        case O_RUNS:
            if (af_parse_u64(optarg, &o.runs)) goto bad;
            break;
        case O_TIME:
            o.seconds = strtod(optarg, NULL);
            if (!(o.seconds > 0)) goto bad;
            break;
        case O_SEED:
            if (af_parse_u64(optarg, &o.seed)) goto bad;
            break;
        case O_CRASHES:
            o.crashes_dir = optarg;
            crashes_set = true;
            break;
        case O_CORPUS: o.corpus_dir = optarg; break;
        case O_JOBS:
            if (af_parse_u64(optarg, &v) || v < 1 || v > 256) goto bad;
            o.jobs = (unsigned)v;
            break;
        case O_STATS:
            o.stats_path = optarg;
            stats_set = true;
            break;
        case O_MAXF:
            if (af_parse_u64(optarg, &o.max_findings)) goto bad;
            break;
        case O_FLOPS:
            o.max_flops = strtod(optarg, NULL);
            if (!(o.max_flops > 0)) goto bad;
            break;
        case O_BACKWARD: {
            char *end = NULL;
            o.backward = strtod(optarg, &end);
            if (end == optarg || *end || !(o.backward >= 0.0 && o.backward <= 1.0)) goto bad;
            break;
        }
        case O_SERVING: {
            char *end = NULL;
            o.serving = strtod(optarg, &end);
            if (end == optarg || *end || !(o.serving >= 0.0 && o.serving <= 1.0)) goto bad;
            break;
        }
        case O_DETERMINISM: {
            char *end = NULL;
            cfg.determinism = strtod(optarg, &end);
            if (end == optarg || *end || !(cfg.determinism >= 0.0 && cfg.determinism <= 1.0)) goto bad;
            break;
        }
        case O_FP8: {
            char *end = NULL;
            o.fp8 = strtod(optarg, &end);
            if (end == optarg || *end || !(o.fp8 >= 0.0 && o.fp8 <= 1.0)) goto bad;
            break;
        }
        case O_EDGES: {
            char *end = NULL;
            o.edges = strtod(optarg, &end);
            if (end == optarg || *end || !(o.edges >= 0.0 && o.edges <= 1.0)) goto bad;
            break;
        }
        case O_QUIET: o.quiet = true; break;
        case O_NOMIN: o.no_minimize = true; break;
        case O_MINSHARE: {
            char *end;
            o.minimize_share = strtod(optarg, &end);
            if (*end || !(o.minimize_share > 0 && o.minimize_share <= 1)) goto bad;
            break;
        }
        case O_FAULTGAP: {
            char *end;
            o.known_fault_gap = strtod(optarg, &end);
            if (*end || !(o.known_fault_gap > 0 && o.known_fault_gap <= 1e7)) goto bad;
            break;
        }
        case O_MINGRACE: {
            char *end;
            o.minimize_grace = strtod(optarg, &end);
            if (*end || !(o.minimize_grace >= 0 && o.minimize_grace <= 1e7)) goto bad;
            break;
        }
        case O_TINY: o.tiny = true; break;
        case O_NOBIND: o.no_bind = true; break;
        case O_BATCH:
            if (af_parse_u64(optarg, &v) || v < 1 || v > AF_EXEC_MAX_BATCH) goto bad;
            o.batch = (unsigned)v;
            break;
        case O_THREADS:
            if (af_parse_u64(optarg, &v) || v < 1 || v > 64) goto bad;
            o.threads = (unsigned)v;
            break;
        case O_NOSPARE: cfg.worker.no_spare = true; break;
        case O_NOPIPE: o.no_pipeline = true; break;
        case O_SHARD: shard = optarg; break;
        case O_ROOT: root = optarg; break;
        case O_STRAT: {
            int k = 0;
            while (k < AF_STRATEGY_COUNT && strcmp(optarg, af_strategy_names[k]) != 0) k++;
            if (k == AF_STRATEGY_COUNT) goto bad;
            o.strategy = (af_strategy)k;
            break;
        }
        case O_HELP:
        case 'h': af_fuzz_usage(stdout); return 0;
        default: af_fuzz_usage(stderr); return 2;
        }
        continue;
    bad:
        fprintf(stderr, "attnfuzz fuzz: bad value \"%s\" (see attnfuzz fuzz --help)\n", optarg);
        return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "attnfuzz fuzz: unexpected argument \"%s\"\n", argv[optind]);
        return 2;
    }
    af_error err = {0};
    af_shard_paths paths;
    if (shard && af_shard_parse(shard, &o.shard, &err) != AF_OK) {
        fprintf(stderr, "attnfuzz fuzz: %s\n", err.msg);
        return 2;
    }
    if (root) {
        /* the shared output root (shard.h): this shard's directory, the campaign's seeds */
        struct stat sb;
        if (af_shard_paths_of(root, &o.shard, &paths, &err) != AF_OK || af_file_mkdirs(paths.dir, &err) != AF_OK) {
            fprintf(stderr, "attnfuzz fuzz: %s\n", err.msg);
            return 2;
        }
        if (!crashes_set) o.crashes_dir = paths.crashes;
        if (!stats_set) o.stats_path = paths.stats;
        if (!o.corpus_dir && stat(paths.corpus, &sb) == 0 && S_ISDIR(sb.st_mode)) o.corpus_dir = paths.corpus;
        /* the campaign's own known bugs, beside the repository's (a --known of every shard) */
        if (stat(paths.known, &sb) == 0 && S_ISREG(sb.st_mode) && af_cli_known_option(&ko, AF_OPT_KNOWN, paths.known) < 0)
            return 2;
    }
    af_cli_default_checks(&cfg, selected);
    cfg.sample_relations = true;
    o.exec = cfg;
    if (o.threads > 1) o.no_bind = true; /* threads need CPUs of their own */
    af_known *known = NULL;
    if (af_cli_known_load(&ko, "fuzz", !o.quiet, &known) != 0) return 2;
    o.known = known;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = af_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    af_campaign_stats stats;
    af_status st = af_campaign_run(&o, &stats, &err);
    int rc = 0;
    if (st != AF_OK) {
        fprintf(stderr, "attnfuzz fuzz: %s\n", err.msg);
        rc = 2;
    } else {
        char skipped[96] = "";
        if (stats.skipped)
            snprintf(skipped, sizeof skipped, " (%llu of them skipped: no backend runs those cases)",
                     (unsigned long long)stats.skipped);
        fprintf(stderr, "attnfuzz: %llu execs%s in %.1fs (%.0f/s), %zu unique findings%s\n",
                (unsigned long long)stats.execs, skipped, stats.elapsed,
                stats.elapsed > 0 ? (double)stats.execs / stats.elapsed : 0.0, stats.n_sigs,
                af_campaign_interrupted() ? ", interrupted" : "");
        for (size_t i = 0; i < stats.n_sigs; i++) {
            const af_signature_entry *e = &stats.sigs[i];
            fprintf(stderr, "  %-15s %-32s x%-6llu %s\n", af_kind_names[e->kind], e->who, (unsigned long long)e->count,
                    e->bundle[0] ? e->bundle : "(not stored: see the error above)");
        }
        if (stats.known_hits) {
            fprintf(stderr, "attnfuzz: %llu findings of %zu known bugs (counted, not stored again):\n",
                    (unsigned long long)stats.known_hits, stats.n_known);
            for (size_t i = 0; i < stats.n_known; i++) {
                const af_known_stat *k = &stats.known[i];
                if (!k->hits && !k->skipped) continue;
                fprintf(stderr, "  known %-40s x%-6llu skipped %-6llu %s\n", k->id, (unsigned long long)k->hits,
                        (unsigned long long)k->skipped, k->bundle[0] ? k->bundle : "");
            }
        }
        if (stats.known_skipped)
            fprintf(stderr, "attnfuzz: %llu backend runs left out: cases of known bugs their backend keeps hitting\n",
                    (unsigned long long)stats.known_skipped);
        double whole = stats.elapsed * (o.jobs > 1 ? o.jobs : 1);
        if (whole > 0 && (stats.relation_seconds > 0 || stats.determinism_runs))
            fprintf(stderr,
                    "attnfuzz: checks: comparing %.1f%% of the campaign's time, relations %.1f%%, determinism %.1f%% "
                    "(%llu second runs)\n",
                    100.0 * (stats.check_seconds - stats.relation_seconds) / whole,
                    100.0 * stats.relation_seconds / whole, 100.0 * stats.determinism_seconds / whole,
                    (unsigned long long)stats.determinism_runs);
        if (stats.minimize_execs || stats.stored_unminimized || stats.aliases_read)
            fprintf(stderr,
                    "attnfuzz: minimizing: %llu execs in %.1fs (an end pass of %.1fs), %llu read from the shared record, "
                    "%llu stored as found, %llu of them minimized since\n",
                    (unsigned long long)stats.minimize_execs, stats.minimize_seconds, stats.minimize_end_seconds,
                    (unsigned long long)stats.aliases_read, (unsigned long long)stats.stored_unminimized,
                    (unsigned long long)stats.minimized_later);
        size_t unmin = 0;
        for (size_t i = 0; i < stats.n_sigs; i++) unmin += stats.sigs[i].unminimized && !o.no_minimize &&
                                                          stats.sigs[i].kind != AF_KIND_CRASH &&
                                                          stats.sigs[i].kind != AF_KIND_TIMEOUT;
        if (unmin)
            fprintf(stderr, "attnfuzz: %zu finding%s stored as found, not minimized yet: attnfuzz minimize %s\n", unmin,
                    unmin == 1 ? " is" : "s are", o.crashes_dir);
        if (stats.jobs_died)
            fprintf(stderr, "attnfuzz: %llu job processes died, %llu restarted (see the lines above%s)\n",
                    (unsigned long long)stats.jobs_died, (unsigned long long)stats.jobs_restarted,
                    o.stats_path ? " and job_deaths in the stats" : "");
        rc = stats.n_sigs ? 1 : 0;
        if (stats.write_errors) rc = 2;
        if (stats.jobs_kept_dying) {
            fprintf(stderr, "attnfuzz fuzz: job processes kept dying (more than %d restarts of one, or death within "
                            "%.0fs of a restart)\n",
                    AF_JOB_MAX_RESTARTS, AF_JOB_MIN_LIFE);
            rc = 2;
        }
    }
    af_campaign_stats_free(&stats);
    af_known_destroy(known);
    return rc;
}
