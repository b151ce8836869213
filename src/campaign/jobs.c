/* jobs.c - --jobs N supervision (see jobs.h, campaign.h). */
#include "jobs.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attnfuzz/bundle.h"
#include "clock.h"
#include "fileio.h"
#include "cpu_bind.h"
#include "loop.h"
#include "minrec.h"
#include "report.h"

/* One slot of --jobs: its current child and the stats files of every child it had. */
typedef struct af_job {
    pid_t pid;          /* 0 when none runs */
    unsigned gen;       /* children started in this slot so far, minus one */
    double started;     /* when the current child started */
    uint64_t execs_before; /* executions of its earlier children (a --runs budget is per slot) */
    bool gave_up;
    int cpu;            /* the CPU its children are bound to, -1 for none */
} af_job;

#define AF_JOBS_MAX 256

static void af_job_path(char *buf, size_t len, const char *dir, unsigned k, unsigned gen) {
    snprintf(buf, len, "%s/job-%u-%u.json", dir, k, gen);
}

/* Starts the child of slot k (generation job->gen). Its seed stream is new for every
 * generation: a restarted child does not replay what killed the last one; the slots and
 * generations of one shard never share a stream (shard.h). */
static af_status af_job_start(const af_campaign_opts *o, const char *dir, unsigned k, af_job *job, double start,
                              int bind_lock, af_error *err) {
    af_campaign_opts co = *o;
    co.jobs = 1;
    co.seed = af_shard_job_seed(o->seed, k + 1, job->gen);
    if (o->seconds > 0) co.seconds = fmax(o->seconds - (af_now() - start), 1e-3); /* 0 would be no limit */
    /* the campaign's end pass, not one computed from the time left */
    if (o->seconds > 0) co.minimize_grace = af_campaign_minimize_grace(o, o->seconds);
    if (o->runs) co.runs = o->runs - job->execs_before;
    char path[512];
    af_job_path(path, sizeof path, dir, k, job->gen);
    fflush(NULL);
    pid_t pid = fork();
    AF_RETURN_ERROR_IF(pid < 0, err, AF_ERR_IO, "fork: %s", strerror(errno));
    if (pid == 0) {
        af_cpu_bind_unlock(bind_lock); /* the parent's: a child holding it would hold the lock */
        af_cpu_bind(0, job->cpu);       /* before any worker starts (the parent does it too) */
        co.stats_path = path;
        af_campaign_stats cs;
        memset(&cs, 0, sizeof cs);
        af_error cerr;
        af_status st = af_campaign_loop(&co, &cs, false, &cerr);
        if (st != AF_OK) fprintf(stderr, "attnfuzz: job %u: %s\n", k, cerr.msg);
        af_campaign_stats_write(&cs, &co, path, NULL);
        _exit(st == AF_OK ? 0 : 2);
    }
    af_cpu_bind(pid, job->cpu); /* seen in /proc before the binding lock is let go */
    job->pid = pid;
    job->started = af_now();
    return AF_OK;
}

/* A dead child's stats are its last checkpoint (once a second): a finding it minimized
 * after that is listed as found, its bundle already moved to <crashes>/.raw/. The shared
 * record knows what it became: such an entry is folded into its minimized signature's, as
 * the child would have done. */
static void af_jobs_reconcile(af_campaign_stats *s, const char *crashes_dir) {
    af_minrec *rec = NULL;
    for (size_t i = 0; i < s->n_sigs;) {
        af_signature_entry *e = &s->sigs[i];
        struct stat sb;
        af_minrec_alias a;
        if (!e->unminimized || !e->bundle[0] || e->stored_elsewhere || stat(e->bundle, &sb) == 0) {
            i++;
            continue;
        }
        if (!rec && !(rec = af_minrec_open(crashes_dir))) break;
        if (af_minrec_lookup(rec, e->signature, &a) != AF_MINREC_ALIAS || a.sig == e->signature) {
            i++;
            continue;
        }
        char who[sizeof e->who];
        snprintf(who, sizeof who, "%s", e->who);
        af_signature_entry *to = af_stats_merge(s, e->signature, a.sig, a.kind, who);
        if (!to) break;
        to->unminimized = false;
        if (!to->bundle[0]) {
            char name[64];
            af_bundle_name(a.kind, a.sig, name, sizeof name);
            snprintf(to->bundle, sizeof to->bundle, "%s/%s", crashes_dir, name);
        } /* entry i is now another one (or the renamed one, minimized): looked at again */
    }
    af_minrec_close(rec);
}

/* Sums the stats files of every child so far into s (deaths are the parent's own), and
 * notes per slot the executions of its earlier children. */
static void af_jobs_merge(af_campaign_stats *s, const char *dir, af_job *jobs, unsigned n, const char *crashes_dir) {
    af_campaign_stats keep = *s; /* the supervision fields survive the rebuild */
    af_campaign_stats_free(s);
    uint64_t execs = 0;
    for (unsigned k = 0; k < n; k++) {
        uint64_t before = 0;
        for (unsigned g = 0; g <= jobs[k].gen; g++) {
            char path[512];
            af_job_path(path, sizeof path, dir, k, g);
            uint64_t e = 0;
            af_stats_add_file(s, path, &e, g == jobs[k].gen);
            execs += e;
            if (g < jobs[k].gen) before += e;
        }
        jobs[k].execs_before = before;
    }
    s->execs = execs;
    s->jobs_died = keep.jobs_died;
    s->jobs_restarted = keep.jobs_restarted;
    s->jobs_kept_dying = keep.jobs_kept_dying;
    s->started_at = keep.started_at;
    memcpy(s->deaths, keep.deaths, sizeof s->deaths);
    if (s->jobs_died && crashes_dir) af_jobs_reconcile(s, crashes_dir);
}

af_status af_campaign_jobs(const af_campaign_opts *o, af_campaign_stats *s, af_error *err) {
    char dir[] = "/tmp/attnfuzz-jobs-XXXXXX";
    AF_RETURN_ERROR_IF(!mkdtemp(dir), err, AF_ERR_IO, "/tmp: cannot create a directory for job stats: %s",
                       strerror(errno));
    unsigned n = o->jobs > AF_JOBS_MAX ? AF_JOBS_MAX : o->jobs;
    af_job jobs[AF_JOBS_MAX];
    memset(jobs, 0, sizeof jobs);
    int cpus[AF_JOBS_MAX];
    int lock = o->no_bind ? -1 : af_cpu_bind_lock();
    size_t ncpu = o->no_bind ? 0 : af_cpu_bind_choose(cpus, AF_JOBS_MAX);
    for (unsigned k = 0; k < n; k++) jobs[k].cpu = ncpu ? cpus[k % ncpu] : -1;
    double start = af_now();
    for (unsigned k = 0; k < n; k++) {
        af_status st = af_job_start(o, dir, k, &jobs[k], start, lock, err);
        if (st != AF_OK) {
            for (unsigned q = 0; q < k; q++) kill(jobs[q].pid, SIGINT);
            for (unsigned q = 0; q < k; q++) waitpid(jobs[q].pid, NULL, 0);
            af_cpu_bind_unlock(lock);
            af_file_remove_dir(dir);
            return st;
        }
    }
    af_cpu_bind_unlock(lock); /* every child is bound, visibly to other campaigns */
    bool tty = !o->quiet && isatty(STDERR_FILENO);
    /* past --time, each job minimizes what it queued within this grace (store.h) */
    double grace = o->seconds > 0 ? af_campaign_minimize_grace(o, o->seconds) : 0.0;
    unsigned running = n;
    bool failed = false, stopping = false, stop_sent = false, kill_sent = false;
    af_status status = AF_OK;
    double last_status = start;
    while (running > 0) {
        /* a tenth of a second: a child's death is seen (and timed) within that; the stats
         * files are merged and the status printed once a second */
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
        double now = af_now();
        /* no restarts once the campaign is ending: stopped, out of time or findings */
        stopping |= af_campaign_interrupted() || (o->seconds > 0 && now - start >= o->seconds) ||
                    (o->max_findings && s->n_sigs >= o->max_findings);
        /* a child past the time limit (a long compile or hung worker in flight) is asked to
         * stop, then killed: its findings are on disk as found (bundles are atomic) */
        double late = o->seconds > 0 ? now - start - o->seconds - grace : -1.0;
        if ((af_campaign_interrupted() || late >= AF_JOB_LATE_STOP) && !stop_sent) {
            for (unsigned k = 0; k < n; k++)
                if (jobs[k].pid > 0) kill(jobs[k].pid, SIGINT);
            stop_sent = true;
        }
        if (late >= AF_JOB_LATE_KILL && !kill_sent) {
            for (unsigned k = 0; k < n; k++)
                if (jobs[k].pid > 0) {
                    fprintf(stderr, "attnfuzz: job %u (pid %ld) still running %.0fs after the time limit: killed\n", k,
                            (long)jobs[k].pid, late + grace);
                    kill(jobs[k].pid, SIGKILL);
                }
            kill_sent = true;
        }
        for (unsigned k = 0; k < n; k++) {
            int ws;
            if (jobs[k].pid <= 0 || waitpid(jobs[k].pid, &ws, WNOHANG) != jobs[k].pid) continue;
            pid_t pid = jobs[k].pid;
            jobs[k].pid = 0;
            running--;
            bool clean = WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
            if (clean || kill_sent) continue; /* killed for the time limit: not a death */
            failed = true;
            double lived = now - jobs[k].started;
            /* a bundle it was writing is a temporary directory nobody else will remove */
            size_t partial = af_bundle_remove_partial(o->crashes_dir, (long)pid);
            af_minrec_remove_partial(o->crashes_dir, (long)pid); /* its claims are stale by themselves */
            af_job_death d = {k, (long)pid, WIFSIGNALED(ws) ? WTERMSIG(ws) : 0, WIFEXITED(ws) ? WEXITSTATUS(ws) : 0,
                              lived, false};
            /* kept dying: too many restarts, or a restarted child that could not live a second */
            bool crash_loop = jobs[k].gen > 0 && lived < AF_JOB_MIN_LIFE;
            bool give_up = jobs[k].gen >= AF_JOB_MAX_RESTARTS || crash_loop;
            const char *why = crash_loop ? "; it kept dying (within a second of its restart): not restarted"
                              : give_up  ? "; it kept dying (too many restarts): not restarted"
                                         : "";
            char serr_msg[sizeof ((af_error *)0)->msg + 32] = "";
            if (!give_up && !stopping) {
                jobs[k].gen++;
                af_jobs_merge(s, dir, jobs, n, o->crashes_dir); /* execs_before of slot k: its dead children's */
                af_error serr;
                if (o->runs && jobs[k].execs_before >= o->runs) {
                    why = "; its --runs are done";
                } else if (af_job_start(o, dir, k, &jobs[k], start, -1, &serr) != AF_OK) {
                    snprintf(serr_msg, sizeof serr_msg, "; cannot restart it: %s", serr.msg);
                    why = serr_msg;
                    give_up = true;
                } else {
                    d.restarted = true;
                    why = "; restarted it with a new seed stream";
                    s->jobs_restarted++;
                    running++;
                }
            }
            char how[64];
            if (d.signal) {
                snprintf(how, sizeof how, "was killed by signal %d (SIG%s)", d.signal,
                         sigabbrev_np(d.signal) ? sigabbrev_np(d.signal) : "?");
            } else {
                snprintf(how, sizeof how, "exited with status %d", d.exit_code);
            }
            fprintf(stderr, "attnfuzz: job %u (pid %ld) %s after %.1fs%s\n", k, d.pid, how, lived, why);
            if (partial)
                fprintf(stderr, "attnfuzz: removed %zu half-written bundle%s of job %u from %s\n", partial,
                        partial == 1 ? "" : "s", k, o->crashes_dir);
            if (s->jobs_died < AF_JOB_MAX_DEATHS) s->deaths[s->jobs_died] = d;
            s->jobs_died++;
            if (give_up) {
                jobs[k].gave_up = true;
                s->jobs_kept_dying = true;
            }
        }
        if (running > 0 && now - last_status < 1.0) continue;
        last_status = now;
        af_jobs_merge(s, dir, jobs, n, o->crashes_dir);
        /* the campaign's time, as a single process counts it: the jobs' end pass (their
         * minimize_end_seconds) comes after it */
        s->elapsed = o->seconds > 0 ? fmin(af_now() - start, o->seconds) : af_now() - start;
        if (!o->quiet) af_report_status(s, o, "", running ? "" : "DONE", tty);
        if (o->stats_path && running) af_campaign_stats_write(s, o, o->stats_path, NULL); /* progress */
        if (o->max_findings && s->n_sigs >= o->max_findings)
            for (unsigned k = 0; k < n; k++)
                if (jobs[k].pid > 0) kill(jobs[k].pid, SIGINT);
    }
    af_file_remove_dir(dir);
    if (failed && s->execs == 0 && !s->jobs_restarted)
        status = af_error_set(err, AF_ERR_IO, "every job failed");
    return status;
}
