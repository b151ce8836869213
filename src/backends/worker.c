/* worker.c - `worker:COMMAND` and `target:STACK/VARIANT`: a persistent child process
 * behind the backend vtable (see worker.h; the frames are worker_proto.c's).
 *
 * One request is in flight at a time. Writing it and reading the answer share one poll
 * loop over the child's stdin, stdout and stderr with a deadline, so a child that writes
 * a lot of stderr, stops reading, or never answers cannot block us: stderr is drained
 * into a 4 KiB ring as it comes, and at the deadline the child's process group is
 * killed. A fault (death, timeout, a frame that breaks the protocol) leaves the child
 * dead or killed; the next run starts a new one at once, and a start that fails is
 * retried after a pause that doubles from 0.1 s to 5 s. The command line, the project's
 * Python and the child itself come from core/proc.c (no shell runs a worker). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attnfuzz/case_key.h"
#include "attnfuzz/mem.h"
#include "attnfuzz/worker.h"
#include "backends.h"
#include "proc.h"
#include "worker_proto.h"
#include "clock.h"

#define AF_WORKER_KEYS 4096      /* compile keys remembered per process (then forgotten) */
#define AF_WORKER_MAX_STARTS 8   /* consecutive failed starts before giving up (11 s of backoff) */
#define AF_WORKER_SPARES 2       /* processes started ahead of a fault */
#define AF_WORKER_BATCH_CRASHES 2 /* named crashes in one batch after which its rest is not run */
/* A batch's limit (af_worker_batch_limit): --timeout, the compile allowance when a key is
 * new (af_worker_allowance), and per further case AF_WORKER_CASE_SLACK times the seconds a case has taken this
 * worker (a moving average), at least AF_WORKER_CASE_FLOOR s and at most --timeout */
#define AF_WORKER_CASE_SLACK 8.0
#define AF_WORKER_CASE_FLOOR 0.1
#define AF_LEARN_FEATURES (AF_CAP_COUNT + AF_LAYOUT_COUNT) /* capability bits, then q's layout */

/* One child process and its pipes; its stderr kept in a ring. */
typedef struct af_wproc {
    pid_t pid; /* 0: not running */
    int fd_in, fd_out, fd_err;
    char ring[AF_WORKER_STDERR_TAIL]; /* the last bytes of stderr, circular */
    size_t ring_pos, ring_len;
    bool tail_stale; /* the ring changed since tail was made */
    char tail[AF_WORKER_STDERR_TAIL + 1];
} af_wproc;

typedef struct af_worker {
    af_backend_vtable vt; /* first: the backend's table points into this allocation */
    char spec[1024];
    char **argv;
    char *pythonpath;
    af_worker_opts opts;
    bool compile_timeout_given; /* --compile-timeout was set: a hello's compile_timeout does not raise it */
    af_wp_hello hello;
    char describe[512];

    af_wproc p;     /* the process that runs cases */
    /* after a first fault: processes started ahead, their hellos unread, the oldest taking
     * over at the next fault (a restart then costs no start-up). Two: a batch that crashes
     * is sent again case by case, and its culprit crashes a second time at once */
    af_wproc spare[AF_WORKER_SPARES];
    size_t nspare;

    af_jw hdr;
    /* a batch in flight (af_worker_batch_begin .. _end): its requests and what is left to
     * write of its frame */
    size_t bn, boff; /* the batch's cases in flight: bin[boff .. boff + bn) (after a crash, the rest) */
    bool bsingle;    /* the frame in flight is a run alone (a batch of one sent as one request) */
    unsigned bcrashes; /* crashes the worker named in this batch */
    const af_case_tensors *bin[AF_WP_MAX_BATCH];
    uint64_t bid[AF_WP_MAX_BATCH];
    bool bfresh;     /* a compile key of the batch was new */
    double bstart;
    af_wp_part *bparts;
    size_t bnparts, bcap;
    bool bblocked;   /* what is left of the frame waits for room in the pipe (not a failed write) */
    af_wp_result bres[AF_WP_MAX_BATCH];
    uint8_t *bkeep[AF_WP_MAX_BATCH]; /* per item: its keep mask, when it returned one */
    size_t bkeep_cap[AF_WP_MAX_BATCH];
    bool bwant[AF_WP_MAX_BATCH];     /* per item: the statistics were asked (af_wp_want_lse) */
    double *blse[AF_WP_MAX_BATCH];   /* per item: its statistics, when it returned them (F64) */
    size_t blse_cap[AF_WP_MAX_BATCH];
    af_tensor blse_t[AF_WP_MAX_BATCH];
    af_tensor *bdst[AF_WP_MAX_BATCH]; /* per item: the caller's statistics buffer (a run alone), or NULL */
    char *btail[AF_WP_MAX_BATCH];    /* per item: the stderr of the process it faulted, when it did */
    uint8_t *rbuf; /* the last frame read: its length (4 bytes), then rlen bytes of body */
    size_t rcap, rlen;
    uint64_t next_id;

    uint64_t keys[AF_WORKER_KEYS]; /* open addressing; 0 = empty */
    size_t nkeys;
    bool answered; /* the process has answered a run (af_worker_allowance) */

    unsigned faults; /* consecutive faults (reset by an answered run) */
    double case_s;   /* seconds an answered case took, a moving average (0: none yet) */
    const af_case *crash_case; /* the case in flight alone (NULL for a batch): a crash is its */
    uint32_t refused[AF_LEARN_FEATURES], accepted[AF_LEARN_FEATURES];
    uint32_t learned_caps, learned_layouts;
    char learned[256];

    af_backend_ext ext;
} af_worker;

static void af_worker_sleep(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    nanosleep(&ts, NULL); /* a signal cuts it short: the caller goes on at once */
}

void af_worker_opts_default(af_worker_opts *o) {
    o->timeout = 10.0;
    o->compile_timeout = 60.0;
    o->unsupported_learn = 20;
    o->no_spare = false;
}

/* --- the command line ------------------------------------------------------------------- */

af_status af_worker_argv(const char *spec, char ***argv, char **pythonpath, af_error *err) {
    *argv = NULL;
    *pythonpath = NULL;
    if (strncmp(spec, "worker:", 7) == 0) {
        af_status st = af_proc_split(spec + 7, argv, err);
        if (st != AF_OK) af_error_prefix(err, "%s", spec);
        return st;
    }
    AF_RETURN_ERROR_IF(strncmp(spec, "target:", 7) != 0, err, AF_ERR_INVALID,
                       "%s: not a worker: or target: backend", spec);
    const char *stack = spec + 7, *slash = strchr(stack, '/');
    AF_RETURN_ERROR_IF(!slash || slash == stack || !slash[1], err, AF_ERR_INVALID,
                       "%s: expected target:STACK/VARIANT (attnfuzz backends lists them)", spec);
    for (const char *p = stack; p < slash; p++)
        AF_RETURN_ERROR_IF(!(*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9')), err, AF_ERR_INVALID,
                           "%s: the stack name may hold only a-z, 0-9 and _", spec);
    af_proc_python py;
    AF_TRY(af_proc_python_find(&py, err));
    /* python -m attnfuzz.targets.STACK VARIANT, in one block as af_proc_split makes it */
    static const char module[] = "attnfuzz.targets.";
    size_t nstack = (size_t)(slash - stack), nvariant = strlen(slash + 1);
    size_t text = strlen(py.exe) + 1 + 3 + sizeof module + nstack + nvariant + 1;
    char **a = af_malloc(5 * sizeof *a + text);
    char *ppath = py.pythonpath[0] ? af_strdup(py.pythonpath) : NULL;
    if (!a || (py.pythonpath[0] && !ppath)) {
        af_free(a);
        af_free(ppath);
        return af_error_set(err, AF_ERR_NOMEM, "out of memory");
    }
    char *o = (char *)(a + 5);
    a[0] = o, o += sprintf(o, "%s", py.exe) + 1;
    a[1] = o, o += sprintf(o, "-m") + 1;
    a[2] = o, o += sprintf(o, "%s%.*s", module, (int)nstack, stack) + 1;
    a[3] = o, sprintf(o, "%s", slash + 1);
    a[4] = NULL;
    *argv = a;
    *pythonpath = ppath;
    return AF_OK;
}

void af_worker_argv_free(char **argv, char *pythonpath) {
    af_free(argv); /* pointers and words are one block */
    af_free(pythonpath);
}

/* --- stderr -------------------------------------------------------------------------------- */

static void af_worker_ring_put(af_wproc *p, const char *s, size_t n) {
    if (n >= sizeof p->ring) {
        s += n - sizeof p->ring;
        n = sizeof p->ring;
    }
    for (size_t i = 0; i < n; i++) {
        p->ring[p->ring_pos] = s[i];
        p->ring_pos = (p->ring_pos + 1) % sizeof p->ring;
    }
    p->ring_len = p->ring_len + n > sizeof p->ring ? sizeof p->ring : p->ring_len + n;
    p->tail_stale |= n > 0;
}

/* Reads what stderr holds now (non-blocking); closes it at end of file. */
static void af_worker_drain_err(af_wproc *p) {
    char buf[4096];
    while (p->fd_err >= 0) {
        ssize_t r = read(p->fd_err, buf, sizeof buf);
        if (r > 0) {
            af_worker_ring_put(p, buf, (size_t)r);
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
            close(p->fd_err);
            p->fd_err = -1;
        }
        break;
    }
}

/* The ring as text, in order, NUL-terminated (made again only when the ring changed: every
 * answered run hands it on). */
static const char *af_worker_tail(af_wproc *p) {
    if (!p->tail_stale) return p->tail;
    p->tail_stale = false;
    size_t start = (p->ring_pos + sizeof p->ring - p->ring_len) % sizeof p->ring;
    for (size_t i = 0; i < p->ring_len; i++) {
        char ch = p->ring[(start + i) % sizeof p->ring];
        p->tail[i] = ch ? ch : ' ';
    }
    p->tail[p->ring_len] = 0;
    return p->tail;
}

/* One line of a worker's stderr for a message (at most 300 bytes): the last that names an
 * exception ("...Error: ..."; a Python exception's hints may follow it), else the last
 * line. The whole tail goes into bundles as stderr.txt. */
static void af_worker_tail_brief(af_wproc *p, char *buf, size_t len) {
    const char *t = af_worker_tail(p);
    size_t n = strlen(t);
    while (n > 0 && (t[n - 1] == '\n' || t[n - 1] == ' ' || t[n - 1] == '\r')) n--;
    size_t end = n, pick_from = SIZE_MAX, pick_end = 0;
    while (end > 0) {
        size_t from = end;
        while (from > 0 && t[from - 1] != '\n') from--;
        if (pick_from == SIZE_MAX) { /* the last line, unless an exception line comes before */
            pick_from = from;
            pick_end = end;
        }
        const char *hit = memmem(t + from, end - from, "Error: ", 7);
        if (!hit) hit = memmem(t + from, end - from, "Exception: ", 11);
        if (hit) {
            pick_from = from;
            pick_end = end;
            break;
        }
        end = from > 0 ? from - 1 : 0;
    }
    if (pick_from == SIZE_MAX) pick_from = pick_end = 0;
    if (pick_end - pick_from > 300) pick_end = pick_from + 300;
    snprintf(buf, len, "%.*s", (int)(pick_end - pick_from), t + pick_from);
}

/* --- the process ------------------------------------------------------------------------- */

static void af_worker_close_fds(af_wproc *p) {
    if (p->fd_in >= 0) close(p->fd_in);
    if (p->fd_out >= 0) close(p->fd_out);
    if (p->fd_in >= 0 || p->fd_out >= 0) af_worker_drain_err(p);
    if (p->fd_err >= 0) close(p->fd_err);
    p->fd_in = p->fd_out = p->fd_err = -1;
}

/* Kills the child's process group and reaps it. */
static void af_worker_kill(af_wproc *p) {
    af_proc_kill(p->pid, true, NULL);
    p->pid = 0;
    af_worker_close_fds(p);
}

/* After the child closed its stdout: waits up to grace seconds for it to end (draining
 * stderr), kills it otherwise; how it ended goes into how. */
static void af_worker_reap(af_wproc *p, double grace, char *how, size_t len) {
    double end = af_now() + grace;
    bool ended;
    while (!(ended = af_proc_ended(p->pid)) && af_now() < end) {
        af_worker_drain_err(p);
        af_worker_sleep(0.002);
    }
    if (ended) {
        int status = 0;
        af_proc_kill(p->pid, true, &status); /* anything it left behind in its group; its own status */
        af_proc_describe(status, how, len);
        p->pid = 0;
        af_worker_close_fds(p);
    } else {
        snprintf(how, len, "closed its stdout and was killed");
        af_worker_kill(p);
    }
}

static void af_worker_set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

/* Starts the child with its stdin, stdout and stderr on pipes, in a process group of
 * its own (a timeout kills the whole group: a Python worker's helpers too), with
 * PYTHONPATH prepended for target: specs. AF_ERR_INVALID when the program cannot be run,
 * AF_ERR_IO when the system refuses. */
static af_status af_worker_spawn(af_worker *w, af_wproc *p, af_error *err) {
    int fds[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}}; /* stdin, stdout, stderr: read end, write end */
    af_status st = AF_OK;
    for (int k = 0; k < 3 && st == AF_OK; k++)
        if (pipe2(fds[k], O_CLOEXEC) != 0) st = af_error_set(err, AF_ERR_IO, "%s: pipe: %s", w->spec, strerror(errno));
    char **envp = NULL;
    if (st == AF_OK && w->pythonpath) st = af_proc_env_prepend(environ, "PYTHONPATH", w->pythonpath, &envp, err);
    pid_t pid = 0;
    if (st == AF_OK) {
        af_proc_opts o;
        af_proc_opts_init(&o);
        o.fd[0] = fds[0][0];
        o.fd[1] = fds[1][1];
        o.fd[2] = fds[2][1];
        o.envp = envp;
        o.new_group = true;
        st = af_proc_spawn(w->argv, &o, &pid, err);
        if (st != AF_OK) af_error_prefix(err, "%s", w->spec);
    }
    af_free(envp);
    /* the child's ends */
    if (fds[0][0] >= 0) close(fds[0][0]);
    for (int k = 1; k < 3; k++)
        if (fds[k][1] >= 0) close(fds[k][1]);
    if (st != AF_OK) {
        if (fds[0][1] >= 0) close(fds[0][1]);
        for (int k = 1; k < 3; k++)
            if (fds[k][0] >= 0) close(fds[k][0]);
        return st;
    }
    memset(p, 0, sizeof *p);
    p->pid = pid;
    p->fd_in = fds[0][1], p->fd_out = fds[1][0], p->fd_err = fds[2][0];
    af_worker_set_nonblock(p->fd_in);
    af_worker_set_nonblock(p->fd_out);
    af_worker_set_nonblock(p->fd_err);
    /* a spare writes its start-up chatter while nobody reads it, and a batch of cases
     * should fit the pipe in one write: room for both (the system may give less) */
    (void)fcntl(p->fd_err, F_SETPIPE_SZ, 1 << 20);
    (void)fcntl(p->fd_in, F_SETPIPE_SZ, 1 << 20);
    return AF_OK;
}

/* Room for n bytes in rbuf (what it holds is kept). */
static bool af_worker_rbuf(af_worker *w, size_t n) {
    if (n <= w->rcap) return true;
    size_t cap = w->rcap ? w->rcap : 1 << 16;
    while (cap < n) cap *= 2;
    uint8_t *b = af_malloc(cap);
    if (!b) return false;
    if (w->rcap) memcpy(b, w->rbuf, w->rcap);
    af_free(w->rbuf);
    w->rbuf = b;
    w->rcap = cap;
    return true;
}

/* Writes what the pipe takes now of parts[0 .. *nparts) without waiting, and leaves in
 * parts what is still to write (moved to the front, the first piece cut where the write
 * stopped). True when what is left waits for room in the pipe; a failed write (false) is
 * left for the exchange that follows to see. */
static bool af_worker_write_some(af_worker *w, af_wp_part *parts, size_t *nparts) {
    sigset_t pipe_set, old_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
    size_t part = 0;
    bool blocked = false;
    while (part < *nparts) {
        struct iovec iov[AF_WP_MAX_PARTS + 1];
        int niov = 0;
        for (size_t k = part; k < *nparts && niov < AF_WP_MAX_PARTS + 1; k++)
            iov[niov++] = (struct iovec){(void *)(uintptr_t)parts[k].data, parts[k].len};
        ssize_t wr = writev(w->p.fd_in, iov, niov);
        if (wr < 0 && errno == EINTR) continue;
        if (wr <= 0) { /* full (EAGAIN), or an error the exchange meets again */
            blocked = wr < 0 && errno == EAGAIN;
            break;
        }
        size_t left = (size_t)wr;
        while (part < *nparts && left >= parts[part].len) left -= parts[part++].len;
        if (part < *nparts && left) {
            parts[part].data = (const uint8_t *)parts[part].data + left;
            parts[part].len -= left;
        }
    }
    if (part) memmove(parts, parts + part, (*nparts - part) * sizeof *parts);
    *nparts -= part;
    if (errno == EPIPE) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) > 0) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &old_set, NULL);
    return blocked && *nparts > 0;
}

/* Writes the frame hdr + parts (may be empty) and reads one frame into w->rbuf (w->rlen
 * bytes after the length), within deadline. AF_ERR_CRASH: the child closed its end;
 * AF_ERR_TIMEOUT: the deadline passed; AF_ERR_FORMAT: a frame longer than max_frame, or
 * bytes after it (a worker answers each request with exactly one frame).
 *
 * System calls per exchange, when the request fits the pipe and the answer comes in one
 * piece: a writev, a poll, one read for length and body together. */
static af_status af_worker_exchange(af_worker *w, const af_wp_part *parts, size_t nparts, size_t max_frame,
                                    double deadline, af_error *err) {
    /* SIGPIPE stays blocked while we write: a dead reader is EPIPE, handled as a crash */
    sigset_t pipe_set, old_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
    size_t part = 0, part_off = 0;
    size_t got = 0, need = 4; /* bytes in rbuf; what the frame needs (its length, then all of it) */
    af_status st = AF_OK;
    bool epipe = false;
    bool try_write = true, try_read = false; /* the last step moved bytes: try the next before polling */
    while (nparts > 0 && part < nparts && parts[part].len == 0) part++;
    if (!af_worker_rbuf(w, 4)) {
        pthread_sigmask(SIG_SETMASK, &old_set, NULL);
        return af_error_set(err, AF_ERR_NOMEM, "out of memory");
    }
    for (;;) {
        double left = deadline - af_now();
        if (left <= 0) {
            st = af_error_set(err, AF_ERR_TIMEOUT, "no answer in time");
            break;
        }
        struct pollfd pf[3];
        int np = 0, ie = -1, io = -1, ii = -1;
        if (part < nparts) pf[np] = (struct pollfd){w->p.fd_in, POLLOUT, 0}, ii = np++;
        pf[np] = (struct pollfd){w->p.fd_out, POLLIN, 0}, io = np++;
        if (w->p.fd_err >= 0) pf[np] = (struct pollfd){w->p.fd_err, POLLIN, 0}, ie = np++;
        if (try_write || try_read) {
            /* both ends are non-blocking; EAGAIN sends us to poll. After the whole request
             * is written, the answer cannot be there yet: poll */
            for (int k = 0; k < np; k++) pf[k].revents = 0;
            if (ii >= 0 && try_write) pf[ii].revents = POLLOUT;
            if (try_read) pf[io].revents = POLLIN;
        } else {
            int ms = left > 1e6 ? 1000000000 : (int)ceil(left * 1000.0);
            if (poll(pf, (nfds_t)np, ms) < 0) {
                if (errno == EINTR) continue;
                st = af_error_set(err, AF_ERR_IO, "poll: %s", strerror(errno));
                break;
            }
        }
        try_write = try_read = false;
        if (ie >= 0 && pf[ie].revents) af_worker_drain_err(&w->p);
        if (ii >= 0 && pf[ii].revents) {
            struct iovec iov[AF_WP_MAX_PARTS + 1];
            int niov = 0;
            for (size_t k = part; k < nparts && niov < AF_WP_MAX_PARTS + 1; k++) {
                size_t skip = k == part ? part_off : 0;
                iov[niov].iov_base = (void *)((uintptr_t)parts[k].data + skip);
                iov[niov].iov_len = parts[k].len - skip;
                niov++;
            }
            ssize_t wr = writev(w->p.fd_in, iov, niov);
            if (wr < 0 && errno == EAGAIN) {
                wr = 0;
            } else if (wr < 0) {
                if (errno == EINTR) continue;
                epipe = errno == EPIPE;
                st = af_error_set(err, AF_ERR_CRASH, "the worker stopped reading (%s)", strerror(errno));
                break;
            }
            size_t left_w = (size_t)wr;
            while (part < nparts && left_w >= parts[part].len - part_off) {
                left_w -= parts[part].len - part_off;
                part++;
                part_off = 0;
            }
            if (part < nparts) part_off += left_w;
            try_write = wr > 0 && part < nparts;
        }
        if (pf[io].revents) {
            /* as much as the buffer holds: length and body in one read when they fit */
            ssize_t r = read(w->p.fd_out, w->rbuf + got, w->rcap - got);
            if (r < 0) {
                if (errno == EAGAIN || errno == EINTR) continue;
                st = af_error_set(err, AF_ERR_CRASH, "reading its stdout: %s", strerror(errno));
                break;
            }
            if (r == 0) {
                st = af_error_set(err, AF_ERR_CRASH, "%s", got ? "its stdout ended inside a frame" : "its stdout ended");
                break;
            }
            got += (size_t)r;
            try_read = true;
            if (need == 4 && got >= 4) {
                const uint8_t *lb = w->rbuf;
                size_t n = (size_t)lb[0] | (size_t)lb[1] << 8 | (size_t)lb[2] << 16 | (size_t)lb[3] << 24;
                if (n > max_frame) {
                    st = af_error_set(err, AF_ERR_FORMAT, "frame of %zu bytes (at most %zu expected)", n, max_frame);
                    break;
                }
                if (n == 0) {
                    st = af_error_set(err, AF_ERR_FORMAT, "empty frame");
                    break;
                }
                if (!af_worker_rbuf(w, 4 + n + 1)) {
                    st = af_error_set(err, AF_ERR_NOMEM, "out of memory for a frame of %zu bytes", n);
                    break;
                }
                need = 4 + n;
            }
            if (got < need) continue;
            if (got > need) {
                st = af_error_set(err, AF_ERR_FORMAT, "%zu bytes after its frame (one frame answers one request)",
                                  got - need);
                break;
            }
            if (part < nparts) {
                /* an answer before the whole request was read: it cannot be about it */
                st = af_error_set(err, AF_ERR_FORMAT, "answered before reading the whole request");
                break;
            }
            w->rlen = need - 4;
            break;
        }
    }
    if (epipe) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) > 0) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &old_set, NULL);
    return st;
}

/* --- start, stop ---------------------------------------------------------------------------- */

static void af_worker_stop(af_worker *w) {
    if (w->p.pid <= 0) return;
    /* bye, then up to 2 s for a clean exit */
    if (w->p.fd_in >= 0) {
        sigset_t pipe_set, old_set;
        sigemptyset(&pipe_set);
        sigaddset(&pipe_set, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
        ssize_t wr = write(w->p.fd_in, af_wp_bye, AF_WP_BYE_LEN);
        if (wr < 0 && errno == EPIPE) {
            struct timespec zero = {0, 0};
            while (sigtimedwait(&pipe_set, NULL, &zero) > 0) {
            }
        }
        pthread_sigmask(SIG_SETMASK, &old_set, NULL);
        close(w->p.fd_in);
        w->p.fd_in = -1;
    }
    char how[128];
    af_worker_reap(&w->p, 2.0, how, sizeof how);
}

/* Reads and checks the hello of w->p (a process just spawned, or a spare promoted). On
 * failure the child is gone and err says why, with its stderr. A new process has compiled
 * nothing yet: the compile keys seen are forgotten. */
static af_status af_worker_hello(af_worker *w, af_error *err) {
    memset(w->keys, 0, sizeof w->keys);
    w->nkeys = 0;
    w->answered = false;
    double deadline = af_now() + w->opts.timeout + w->opts.compile_timeout;
    af_error xerr;
    af_status st = af_worker_exchange(w, NULL, 0, AF_WP_MAX_HEADER, deadline, &xerr);
    char brief[400];
    if (st == AF_OK) {
        af_wp_hello h;
        st = af_wp_parse_hello(w->rbuf + 4, w->rlen, &h, &xerr);
        if (st == AF_OK) {
            w->hello = h;
            /* a target whose first build takes minutes says so: the default gives way */
            if (!w->compile_timeout_given && h.compile_timeout > w->opts.compile_timeout)
                w->opts.compile_timeout = h.compile_timeout;
            return AF_OK;
        }
        af_worker_kill(&w->p);
        af_worker_tail_brief(&w->p, brief, sizeof brief);
        return af_error_set(err, AF_ERR_INVALID, "%s: bad hello: %s%s%s", w->spec, xerr.msg, brief[0] ? "; stderr: " : "",
                            brief);
    }
    char how[200] = "";
    if (st == AF_ERR_CRASH) {
        char ended[128];
        af_worker_reap(&w->p, 1.0, ended, sizeof ended);
        snprintf(how, sizeof how, "the worker %s before its hello", ended);
    } else if (st == AF_ERR_TIMEOUT) {
        af_worker_kill(&w->p);
        snprintf(how, sizeof how, "the worker sent no hello within %g s (killed)", w->opts.timeout + w->opts.compile_timeout);
    } else {
        af_worker_kill(&w->p);
        snprintf(how, sizeof how, "the worker's first frame is not a hello: %.120s", xerr.msg);
    }
    af_worker_tail_brief(&w->p, brief, sizeof brief);
    return af_error_set(err, AF_ERR_INVALID, "%s: %s%s%s", w->spec, how, brief[0] ? "; stderr: " : "", brief);
}

/* Starts the process and reads its hello. On failure the child is gone and err says why,
 * with its stderr. */
static af_status af_worker_start(af_worker *w, af_error *err) {
    AF_TRY(af_worker_spawn(w, &w->p, err));
    return af_worker_hello(w, err);
}

/* A new process after a fault. A worker that starts (sends its hello) is restarted at
 * once, whatever case killed the last one; failed starts are retried after 0.1 s,
 * doubling to 5 s; AF_ERR_IO after AF_WORKER_MAX_STARTS failed starts in a row. */
static af_status af_worker_restart(af_worker *w, af_error *err) {
    double t0 = af_now();
    af_error serr;
    af_status st = AF_ERR_IO;
    if (w->nspare > 0) {
        /* the oldest spare started ahead: its hello is (nearly always) waiting in its pipe */
        w->p = w->spare[0];
        memmove(w->spare, w->spare + 1, (w->nspare - 1) * sizeof w->spare[0]);
        w->nspare--;
        st = af_worker_hello(w, &serr);
    }
    for (int attempt = 0; st != AF_OK && attempt < AF_WORKER_MAX_STARTS; attempt++) {
        if (attempt > 0) af_worker_sleep(fmin(5.0, 0.1 * ldexp(1.0, attempt - 1)));
        st = af_worker_start(w, &serr);
    }
    if (st != AF_OK)
        return af_error_set(err, AF_ERR_IO, "cannot restart the worker (%d attempts): %s", AF_WORKER_MAX_STARTS,
                            serr.msg);
    w->ext.restarts++;
    /* a worker that faulted once may fault again: from now on spares are always starting */
    while (!w->opts.no_spare && w->nspare < AF_WORKER_SPARES && af_worker_spawn(w, &w->spare[w->nspare], &serr) == AF_OK)
        w->nspare++;
    w->ext.restart_s += af_now() - t0;
    return AF_OK;
}

/* --- learning what it refuses ----------------------------------------------------------- */

static void af_worker_learn(af_worker *w, const af_case *c, bool ok) {
    uint32_t caps = af_case_required_caps(c);
    for (int f = 0; f < AF_LEARN_FEATURES; f++) {
        bool has = f < AF_CAP_COUNT ? (caps >> f) & 1u : (int)c->t[AF_Q].layout == f - AF_CAP_COUNT;
        if (!has) continue;
        if (ok) {
            w->accepted[f]++;
            continue;
        }
        w->refused[f]++;
        if (w->opts.unsupported_learn <= 0 || w->accepted[f] || (double)w->refused[f] < w->opts.unsupported_learn) continue;
        bool was = f < AF_CAP_COUNT ? (w->learned_caps >> f) & 1u : (w->learned_layouts >> (f - AF_CAP_COUNT)) & 1u;
        if (was) continue;
        if (f < AF_CAP_COUNT)
            w->learned_caps |= 1u << f;
        else
            w->learned_layouts |= 1u << (f - AF_CAP_COUNT);
        size_t n = strlen(w->learned);
        snprintf(w->learned + n, sizeof w->learned - n, "%s%s", n ? ", " : "",
                 f < AF_CAP_COUNT ? af_cap_names[f] : af_layout_names[f - AF_CAP_COUNT]);
    }
}

/* --- the vtable ------------------------------------------------------------------------------- */

static bool af_worker_supports(void *state, const af_case *c, char *why, size_t len) {
    af_worker *w = state;
    const af_wp_hello *h = &w->hello;
#define AF_WHY(...)                                                                                                    \
    do {                                                                                                               \
        if (why) snprintf(why, len, __VA_ARGS__);                                                                      \
        return false;                                                                                                  \
    } while (0)
    if (!(h->dtypes & (1u << c->dtype))) AF_WHY("dtype %s", af_dtype_names[c->dtype]);
    uint32_t hd = c->head_dim > c->v_head_dim ? c->head_dim : c->v_head_dim;
    if (h->max_head_dim && hd > h->max_head_dim) AF_WHY("head_dim %u over its limit %llu", hd, (unsigned long long)h->max_head_dim);
    if (h->head_dim_multiple > 1 && (c->head_dim % h->head_dim_multiple || c->v_head_dim % h->head_dim_multiple))
        AF_WHY("head dims %u/%u not multiples of %llu", c->head_dim, c->v_head_dim, (unsigned long long)h->head_dim_multiple);
    uint32_t s = c->q_len > c->kv_len ? c->q_len : c->kv_len;
    if (h->max_seq && s > h->max_seq) AF_WHY("sequence %u over its limit %llu", s, (unsigned long long)h->max_seq);
    if (h->max_q_len && c->q_len > h->max_q_len)
        AF_WHY("%u queries per row over its limit %llu (max_q_len)", c->q_len, (unsigned long long)h->max_q_len);
    if (h->max_batch && c->batch > h->max_batch) AF_WHY("batch %u over its limit", c->batch);
    if (h->max_heads && c->q_heads > h->max_heads) AF_WHY("%u heads over its limit", c->q_heads);
    if (h->max_bytes && af_case_tensor_bytes(c) > h->max_bytes) AF_WHY("tensors over its max_bytes");
    if ((c->causal || af_case_has_window(c)) && !(h->diagonals & (1u << c->diag)))
        AF_WHY("diagonal %s (its conventions.causal)", af_diag_names[c->diag]);
    uint32_t caps = af_case_required_caps(c) & w->learned_caps;
    if (caps) AF_WHY("%s (refused or crashed before: learned)", af_cap_names[__builtin_ctz(caps)]);
    if (w->learned_layouts & (1u << c->t[AF_Q].layout))
        AF_WHY("layout %s (refused or crashed before: learned)", af_layout_names[c->t[AF_Q].layout]);
#undef AF_WHY
    return true;
}

static const af_backend_ext *af_worker_ext(void *state) {
    af_worker *w = state;
    return &w->ext;
}

/* Remembers a compile key; true when it was new to this process. */
static bool af_worker_key_note(af_worker *w, uint64_t key) {
    key |= 1;
    if (2 * (w->nkeys + 1) > AF_WORKER_KEYS) {
        memset(w->keys, 0, sizeof w->keys);
        w->nkeys = 0;
    }
    size_t i = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 52) % AF_WORKER_KEYS;
    while (w->keys[i]) {
        if (w->keys[i] == key) return false;
        i = (i + 1) % AF_WORKER_KEYS;
    }
    w->keys[i] = key;
    w->nkeys++;
    return true;
}

/* A fault: the child is dead or killed; err gets "kind: what happened" with the stderr. */
static af_status af_worker_fault(af_worker *w, af_status code, const char *what, af_error *err) {
    w->faults++;
    char brief[400];
    af_worker_tail_brief(&w->p, brief, sizeof brief);
    return af_error_set(err, code, "%s%s%s", what, brief[0] ? "; stderr: " : "", brief);
}

/* The answer r (checked) to the request for case c: out (and the gradients of a backward
 * case, grads not NULL) filled for ok, AF_ERR_UNSUPPORTED
 * (learned from) or AF_ERR_BACKEND (an error finding) otherwise; a keep mask goes to
 * *keep (grown to *cap). */
static af_status af_worker_take(af_worker *w, const af_case *c, const af_wp_result *r, const uint8_t *payload,
                                af_tensor *out, af_grads *grads, af_tensor *lse, uint8_t **keep, size_t *cap,
                                const uint8_t **keep_out, af_error *err) {
    *keep_out = NULL;
    if (lse) lse->ndim = r->status == AF_WP_OK && r->has_lse ? 3 : 0;
    if (r->status == AF_WP_UNSUPPORTED) {
        w->ext.unsupported++;
        af_worker_learn(w, c, false);
        return af_error_set(err, AF_ERR_UNSUPPORTED, "unsupported: %s", r->message);
    }
    if (r->status == AF_WP_ERROR) return af_error_set(err, AF_ERR_BACKEND, "%s", r->message);
    af_worker_learn(w, c, true);
    /* F64 stays F64; f32, f16 and bf16 are written as F32 (exact) */
    if (r->out.dtype != AF_F64) {
        size_t ne[4] = {out->ne[0], out->ne[1], out->ne[2], out->ne[3]};
        void *data = out->data;
        af_tensor_contiguous(out, AF_F32, 4, ne);
        out->data = data;
    }
    af_wp_copy_out(r, payload, c, out);
    if (lse && lse->ndim) af_wp_copy_lse(r, payload, c, w->hello.lse_base2, lse);
    for (int g = 0; grads && g < AF_GRAD_COUNT; g++)
        if (c->bwd.grads & (1u << g)) AF_TRY(af_wp_copy_grad(r, payload, c, g, af_grads_at(grads, g), err));
    if (r->has_keep) {
        size_t keepb = (size_t)c->batch * c->q_heads * c->q_len * c->kv_len;
        if (keepb > *cap) {
            uint8_t *k = af_malloc(keepb);
            AF_RETURN_ERROR_IF(!k, err, AF_ERR_NOMEM, "out of memory");
            af_free(*keep);
            *keep = k;
            *cap = keepb;
        }
        af_wp_copy_keep(r, payload, c, *keep);
        *keep_out = *keep;
    }
    return AF_OK;
}

/* The largest frame an answer about case c may be. */
static size_t af_worker_answer_max(const af_case *c) {
    size_t outb = (size_t)c->batch * c->q_heads * c->q_len * c->v_head_dim * 8;
    size_t keepb = (size_t)c->batch * c->q_heads * c->q_len * c->kv_len;
    for (int g = 0; g < AF_GRAD_COUNT; g++) {
        if (!(c->bwd.grads & (1u << g))) continue;
        size_t ne[4];
        af_case_grad_shape(c, g, ne);
        /* dmask may come back at the full [B, Hq, Sq, Sk] */
        outb += 8 * (g == AF_GRAD_COUNT - 1 ? keepb : ne[0] * ne[1] * ne[2] * ne[3]);
    }
    return outb + keepb + 8 * (size_t)c->batch * c->q_heads * c->q_len /* lse */ + 4096;
}

/* Notes that an answered run of n cases took wall seconds (af_worker_batch_limit). */
static void af_worker_note_case_s(af_worker *w, double wall, size_t n) {
    double per = wall / (double)(n ? n : 1);
    w->case_s = w->case_s > 0.0 ? 0.9 * w->case_s + 0.1 * per : per;
}

/* Whether a run may take --compile-timeout on top of --timeout, given whether one of its
 * cases has a compile key this process has not seen (fresh). A compiling backend (its hello
 * names compile_key fields: it compiles or plans per structure) builds an artifact per new
 * key. An eager one builds nothing per structure: only its first call is slow (a CUDA
 * context, library handles, kernel modules loaded lazily), so it has the allowance until it
 * has answered once. A kernel that never returns then costs an eager backend --timeout, not
 * both limits, on each new serving structure or backward case it meets. */
static bool af_worker_allowance(const af_worker *w, bool fresh) {
    return w->hello.compile_key ? fresh : !w->answered;
}

/* How long a batch of n cases may take before the worker is killed and its cases run one
 * by one, each with --timeout (so a batch limit that is too tight costs a restart, never a
 * wrong finding). n times --timeout, as a batch was once given, let a kernel that never
 * returns hold a 64-case GPU batch, and its campaign, for 11 minutes; a batch's cases share
 * one compile key and run back to back, so after the first each is allowed a multiple of
 * what cases have taken this worker. */
static double af_worker_batch_limit(const af_worker *w, size_t n, bool allowance) {
    double per = fmin(w->opts.timeout, fmax(AF_WORKER_CASE_FLOOR, AF_WORKER_CASE_SLACK * w->case_s));
    return w->opts.timeout + (double)(n ? n - 1 : 0) * per + (allowance ? w->opts.compile_timeout : 0.0);
}

/* A failed exchange (crash, timeout, a broken frame, or out of memory) as the status of the
 * request(s) in flight; the child is dead or killed after it. */
static af_status af_worker_failed(af_worker *w, af_status st, const af_error *xerr, bool allowance, double limit,
                                  af_error *err) {
    char what[700];
    if (st == AF_ERR_NOMEM || st == AF_ERR_IO) {
        af_worker_kill(&w->p);
        return af_error_set(err, st, "%s", xerr->msg);
    }
    if (st == AF_ERR_CRASH) {
        char how[128];
        af_worker_reap(&w->p, 1.0, how, sizeof how);
        /* a class of cases that only ever crashes it is learned as a refusal is: each
         * crash costs a restart (docs/worker-protocol.md, "unsupported") */
        if (w->crash_case) af_worker_learn(w, w->crash_case, false);
        snprintf(what, sizeof what, "crash: the worker %s while running the case (%s)", how, xerr->msg);
        return af_worker_fault(w, AF_ERR_CRASH, what, err);
    }
    if (st == AF_ERR_TIMEOUT) {
        af_worker_kill(&w->p);
        snprintf(what, sizeof what, "timeout: no answer within %.3g s (%s); the worker was killed", limit,
                 allowance ? "a new compile key or a first case: timeout plus the compile allowance" : "--timeout");
        return af_worker_fault(w, AF_ERR_TIMEOUT, what, err);
    }
    af_worker_kill(&w->p);
    snprintf(what, sizeof what, "protocol: %s", xerr->msg);
    return af_worker_fault(w, AF_ERR_BACKEND, what, err);
}

/* --- batches ------------------------------------------------------------------------------ */

static size_t af_worker_batch_max(void *state) {
    af_worker *w = state;
    return w->hello.batch ? w->hello.batch : 1;
}

/* Sends the cases w->bin[off .. off + n) as one run frame, writing what the pipe takes
 * now; af_worker_batch_end writes the rest and reads the answer. single: a run alone (n
 * is 1), sent as one request as to a worker without batches, the statistics asked where
 * w->bwant[off] says (its caller set it). A worker that is not running is restarted first;
 * when it cannot be, AF_ERR_IO. */
static af_status af_worker_batch_send(af_worker *w, size_t off, size_t n, bool single, af_error *err) {
    if (w->p.pid <= 0) AF_TRY(af_worker_restart(w, err));
    if (w->bcap < n * AF_WP_MAX_PARTS + 1) {
        af_wp_part *p = af_calloc(n * AF_WP_MAX_PARTS + 1, sizeof *p);
        AF_RETURN_ERROR_IF(!p, err, AF_ERR_NOMEM, "out of memory");
        af_free(w->bparts);
        w->bparts = p;
        w->bcap = n * AF_WP_MAX_PARTS + 1;
    }
    w->boff = off;
    w->bn = n;
    w->bsingle = single;
    w->bfresh = false;
    for (size_t i = off; i < off + n; i++) {
        w->bid[i] = ++w->next_id;
        w->bfresh |= af_worker_key_note(w, af_case_key_hash(w->bin[i]->c, w->hello.compile_key));
    }
    w->ext.runs += n;
    for (size_t i = off; i < off + n && !single; i++) w->bwant[i] = af_wp_want_lse(&w->hello, w->bin[i]->c);
    size_t np = 0;
    if (single)
        AF_TRY(af_wp_encode_run_lse(&w->hdr, w->bid[off], w->bin[off], w->bwant[off], w->bparts + 1, &np, err));
    else
        AF_TRY(af_wp_encode_batch_lse(&w->hdr, w->bid + off, w->bin + off, w->bwant + off, n, w->bparts + 1, &np, err));
    w->bparts[0] = (af_wp_part){w->hdr.data, w->hdr.len};
    w->bnparts = np + 1;
    w->bstart = af_now();
    w->bblocked = af_worker_write_some(w, w->bparts, &w->bnparts);
    return AF_OK;
}

/* More of the frame in flight, without waiting (af_backend_vtable.batch_push): the pipe's
 * descriptor while some waits for room, else -1 (all written, or a failed write that
 * batch_end's exchange meets and reports). */
static int af_worker_batch_push(void *state) {
    af_worker *w = state;
    if (!w->bn || !w->bblocked || w->p.pid <= 0) return -1;
    w->bblocked = af_worker_write_some(w, w->bparts, &w->bnparts);
    return w->bblocked ? w->p.fd_in : -1;
}

/* Sends the n requests of in (cases of one compile key; n <= af_worker_batch_max) as one
 * run frame (af_worker_batch_send). */
static af_status af_worker_batch_begin(void *state, const af_case_tensors *const *in, size_t n, af_error *err) {
    af_worker *w = state;
    AF_RETURN_ERROR_IF(n == 0 || n > af_worker_batch_max(w), err, AF_ERR_INVALID, "%s: a batch of %zu cases", w->spec, n);
    for (size_t i = 0; i < n; i++) w->bin[i] = in[i], w->bdst[i] = NULL;
    w->bcrashes = 0;
    return af_worker_batch_send(w, 0, n, false, err);
}

/* Where item `slot` of the batch (case c) gets its statistics: its own buffer, an F64
 * [B, Hq, Sq] tensor; NULL when they were not asked, or on AF_ERR_NOMEM (err says so). */
static af_tensor *af_worker_item_lse(af_worker *w, size_t slot, const af_case *c, af_error *err) {
    if (!w->bwant[slot]) return NULL;
    if (w->bdst[slot]) return w->bdst[slot];
    af_tensor *t = &w->blse_t[slot];
    af_backend_lse_shape(c, t);
    size_t n = (size_t)c->batch * c->q_heads * c->q_len;
    if (n > w->blse_cap[slot]) {
        double *x = af_malloc(n * sizeof *x);
        if (!x) {
            af_error_set(err, AF_ERR_NOMEM, "out of memory");
            return NULL;
        }
        af_free(w->blse[slot]);
        w->blse[slot] = x;
        w->blse_cap[slot] = n;
    }
    t->data = w->blse[slot];
    return t;
}

/* Item i of the batch (slot `slot`) faulted the worker: the stderr it left, kept for the
 * item's bundle (the next case restarts the worker). */
static void af_worker_keep_tail(af_worker *w, size_t slot, af_run_result *r) {
    if (!w->btail[slot]) w->btail[slot] = af_malloc(AF_WORKER_STDERR_TAIL + 1);
    if (!w->btail[slot]) return;
    snprintf(w->btail[slot], AF_WORKER_STDERR_TAIL + 1, "%s", af_worker_tail(&w->p));
    r->stderr_tail = w->btail[slot];
}

static af_status af_worker_batch_end(void *state, af_tensor *const *outs, af_grads *const *grads, af_run_result *res,
                                     af_error *err);

/* Item `slot` of the batch begun (its request w->bin[slot]), alone: sent again as a run of
 * its own (the statistics as its batch asked them) and answered into out, g and *res. */
static af_status af_worker_item_alone(af_worker *w, size_t slot, af_tensor *out, af_grads *g, af_run_result *res,
                                      af_error *err) {
    AF_TRY(af_worker_batch_send(w, slot, 1, true, err));
    return af_worker_batch_end(w, &out, &g, res, err);
}

/* A failed exchange of a run alone (w->bsingle): its own crash, timeout or protocol fault
 * (res->st), charged to it with the stderr of the process it faulted; AF_ERR_NOMEM and
 * AF_ERR_IO (no worker any more) stop it. No compiled structure came of it: it reports 0 s
 * compiling, so that the time a hang or crash took (on a new compile key, its wall time
 * would otherwise count as compiling) does not make compile-aware scheduling keep the
 * structure that faulted. */
static af_status af_worker_alone_failed(af_worker *w, af_status st, const af_error *xerr, bool allowance, double limit,
                                        double wall, af_run_result *res, af_error *err) {
    memset(res, 0, sizeof *res);
    res->st = af_worker_failed(w, st, xerr, allowance, limit, &res->err);
    if (res->st == AF_ERR_NOMEM || res->st == AF_ERR_IO) return af_error_set(err, res->st, "%s", res->err.msg);
    res->compile_s = 0.0;
    res->run_s = -1.0;
    res->wall_s = wall;
    res->new_key = w->bfresh;
    af_worker_keep_tail(w, w->boff, res);
    return AF_OK;
}

/* Reads the answer to the frame in flight (a batch, or a run alone: the same path) into
 * outs[i] and res[i]. A worker that faulted on an item and said so (`crash`, then
 * `not_run`) gets the crash charged to that item, and the items after it go to a fresh
 * worker as a batch of their own: one restart per crash. A fault of the whole frame (the
 * worker died, hung or broke the protocol) is a run alone's own; a batch's cases are sent
 * again one by one, so that the case that killed it is the one its crash or timeout is
 * charged to; the others get their answers. AF_ERR_NOMEM / AF_ERR_IO (no worker any more)
 * stop the batch. */
static af_status af_worker_batch_end(void *state, af_tensor *const *outs, af_grads *const *grads, af_run_result *res,
                                     af_error *err) {
    af_worker *w = state;
    size_t n = w->bn, off = w->boff;
    bool single = w->bsingle;
    w->bn = 0;
    size_t max_frame = AF_WP_MAX_HEADER;
    const af_case *cases[AF_WP_MAX_BATCH];
    for (size_t i = 0; i < n; i++) {
        cases[i] = w->bin[off + i]->c;
        max_frame += af_worker_answer_max(cases[i]);
    }
    bool allowance = af_worker_allowance(w, w->bfresh);
    double limit = af_worker_batch_limit(w, n, allowance);
    af_error xerr;
    af_status st = af_worker_exchange(w, w->bparts, w->bnparts, max_frame, w->bstart + limit, &xerr);
    double wall = af_now() - w->bstart;
    const uint8_t *payload = NULL;
    af_wp_result *br = w->bres + off;
    if (st == AF_OK) {
        st = single ? af_wp_parse_result(w->rbuf + 4, w->rlen, w->bid[off], cases[0], &w->hello, br, &payload, &xerr)
                    : af_wp_parse_batch(w->rbuf + 4, w->rlen, w->bid + off, cases, n, &w->hello, br, &payload, &xerr);
        if (st != AF_OK) st = AF_ERR_FORMAT;
    }
    w->crash_case = single ? cases[0] : NULL; /* a batch's crash is charged case by case below */
    if (single && st != AF_OK) return af_worker_alone_failed(w, st, &xerr, allowance, limit, wall, res, err);
    if (st == AF_ERR_NOMEM || st == AF_ERR_IO) return af_worker_failed(w, st, &xerr, allowance, limit, err);
    if (st != AF_OK) {
        /* which case was it? each alone (a restart before the first: the spare takes over) */
        af_error ferr;
        af_worker_failed(w, st, &xerr, allowance, limit, &ferr);
        unsigned faulted = 0; /* crashes and timeouts among them */
        for (size_t i = 0; i < n; i++) {
            if (faulted >= AF_WORKER_BATCH_CRASHES) {
                /* one structure (a compile key) for all: as for named crashes below, the rest
                 * is not run (a kernel that hangs on the shape would cost each its timeout) */
                memset(&res[i], 0, sizeof res[i]);
                res[i].st = af_error_set(&res[i].err, AF_ERR_UNSUPPORTED,
                                         "unsupported: not run: %u cases of its batch crashed or hung the worker",
                                         faulted);
                continue;
            }
            AF_TRY(af_worker_item_alone(w, off + i, outs[i], grads ? grads[i] : NULL, &res[i], err));
            faulted += res[i].st == AF_ERR_CRASH || res[i].st == AF_ERR_TIMEOUT;
        }
        return AF_OK;
    }
    w->answered = true;
    size_t crashed = n; /* the item the worker says it faulted on */
    for (size_t i = 0; i < n && crashed == n; i++)
        if (br[i].status == AF_WP_CRASH) crashed = i;
    /* stderr written before the answer was read with it (poll reports both); what comes
     * after, with the next exchange or the next fault */
    const char *tail = af_worker_tail(&w->p);
    if (crashed == n) {
        w->faults = 0;
        if (!w->bfresh) af_worker_note_case_s(w, wall, n); /* a compile is not a case's time */
    }
    for (size_t i = 0; i < crashed; i++) {
        size_t slot = off + i;
        memset(&res[i], 0, sizeof res[i]);
        res[i].compile_s = br[i].compile_s;
        res[i].run_s = br[i].run_s;
        res[i].wall_s = wall / (double)n;
        res[i].new_key = w->bfresh && i == 0;
        res[i].guard = br[i].guard;
        res[i].stderr_tail = tail;
        af_tensor *lse = af_worker_item_lse(w, slot, cases[i], err);
        if (w->bwant[slot] && !lse) return AF_ERR_NOMEM;
        res[i].st = af_worker_take(w, cases[i], &br[i], payload, outs[i], grads ? grads[i] : NULL, lse,
                                   &w->bkeep[slot], &w->bkeep_cap[slot], &res[i].dropout_keep, &res[i].err);
        res[i].lse = res[i].st == AF_OK && lse && lse->ndim ? lse : NULL;
        if (res[i].st == AF_ERR_NOMEM) return af_error_set(err, AF_ERR_NOMEM, "out of memory");
    }
    if (crashed == n) return AF_OK;
    /* the worker ends after such an answer: stopped now, without waiting for it to tear its
     * device context down; the crash is learned from as a refusal is */
    af_run_result *r = &res[crashed];
    memset(r, 0, sizeof *r);
    af_worker_drain_err(&w->p);
    af_worker_kill(&w->p);
    af_worker_learn(w, cases[crashed], false);
    char what[700];
    snprintf(what, sizeof what, "crash: the worker faulted on the case and ended (%s)", br[crashed].message);
    r->st = af_worker_fault(w, AF_ERR_CRASH, what, &r->err);
    af_worker_keep_tail(w, off + crashed, r);
    r->compile_s = 0.0;
    r->run_s = br[crashed].run_s;
    r->wall_s = wall / (double)n;
    if (crashed + 1 == n) return AF_OK;
    if (++w->bcrashes >= AF_WORKER_BATCH_CRASHES) {
        /* a batch's cases share one structure (a compile key): one that crashed the worker
         * this often would crash it on most of the rest, a restart each (64 in a row were
         * seen on an H100); the rest is not run, as if refused */
        for (size_t i = crashed + 1; i < n; i++) {
            memset(&res[i], 0, sizeof res[i]);
            res[i].st = af_error_set(&res[i].err, AF_ERR_UNSUPPORTED,
                                     "unsupported: not run: %u cases of its batch crashed the worker", w->bcrashes);
        }
        return AF_OK;
    }
    /* the rest, to the next process (a spare, usually: milliseconds) */
    AF_TRY(af_worker_batch_send(w, off + crashed + 1, n - crashed - 1, false, err));
    return af_worker_batch_end(w, outs + crashed + 1, grads ? grads + crashed + 1 : NULL, res + crashed + 1, err);
}

/* --- a run alone: a batch of one ----------------------------------------------------------- */

/* One case alone (af_backend_vtable.run_result): out, the gradients g of a backward case
 * (NULL: forward), the statistics into lse where it is not NULL (asked where
 * af_wp_want_lse; lse->ndim 0 when none came), its facts into res. The batch's path with
 * one request, sent as a run frame of its own. */
static af_status af_worker_run_result(void *state, const af_case_tensors *in, af_tensor *out, af_grads *g,
                                      af_tensor *lse, af_run_result *res, af_error *err) {
    af_worker *w = state;
    AF_RETURN_ERROR_IF(w->bn, err, AF_ERR_INVALID, "%s: a run while a batch is in flight", w->spec);
    memset(res, 0, sizeof *res);
    res->compile_s = res->run_s = -1.0;
    if (lse) lse->ndim = 0;
    w->bin[0] = in;
    w->bdst[0] = lse;
    w->bwant[0] = lse && af_wp_want_lse(&w->hello, in->c);
    af_status st = af_worker_batch_send(w, 0, 1, true, err);
    if (st == AF_OK) st = af_worker_batch_end(w, &out, &g, res, err);
    w->bdst[0] = NULL;
    if (st != AF_OK) return st;
    if (res->st != AF_OK) *err = res->err;
    return res->st;
}

static af_status af_worker_run_backward(void *state, const af_case_tensors *in, af_tensor *out, af_grads *g,
                                        af_error *err) {
    af_run_result r;
    return af_worker_run_result(state, in, out, g, NULL, &r, err);
}

static af_status af_worker_run(void *state, const af_case_tensors *in, af_tensor *out, af_error *err) {
    af_run_result r;
    return af_worker_run_result(state, in, out, NULL, NULL, &r, err);
}

/* run with the statistics (cap lse; a case it is not asked on gives none) */
static af_status af_worker_run_lse(void *state, const af_case_tensors *in, af_tensor *out, af_tensor *lse,
                                   af_error *err) {
    af_run_result r;
    return af_worker_run_result(state, in, out, NULL, lse, &r, err);
}

static void af_worker_destroy(void *state) {
    af_worker *w = state;
    if (!w) return;
    for (size_t i = 0; i < w->nspare; i++) af_worker_kill(&w->spare[i]); /* never got a case: no bye */
    af_worker_stop(w);
    af_worker_kill(&w->p);
    af_worker_argv_free(w->argv, w->pythonpath);
    af_jw_free(&w->hdr);
    af_free(w->bparts);
    for (size_t i = 0; i < AF_WP_MAX_BATCH; i++) af_free(w->bkeep[i]), af_free(w->btail[i]), af_free(w->blse[i]);
    af_free(w->rbuf);
    af_free(w);
}

af_status af_worker_open(const char *spec, const af_worker_opts *opts, af_backend **out, af_error *err) {
    *out = NULL;
    AF_RETURN_ERROR_IF(strlen(spec) >= sizeof ((af_worker *)0)->spec, err, AF_ERR_INVALID, "%.64s...: spec too long", spec);
    af_worker *w = af_calloc(1, sizeof *w);
    AF_RETURN_ERROR_IF(!w, err, AF_ERR_NOMEM, "out of memory");
    w->p.fd_in = w->p.fd_out = w->p.fd_err = -1;
    snprintf(w->spec, sizeof w->spec, "%s", spec);
    af_worker_opts_default(&w->opts);
    if (opts && opts->timeout > 0) w->opts.timeout = opts->timeout;
    if (opts && opts->compile_timeout > 0) w->opts.compile_timeout = opts->compile_timeout;
    w->compile_timeout_given = opts && opts->compile_timeout > 0;
    if (opts && opts->unsupported_learn != 0) w->opts.unsupported_learn = opts->unsupported_learn;
    if (opts) w->opts.no_spare = opts->no_spare;
    af_status st = af_worker_argv(spec, &w->argv, &w->pythonpath, err);
    if (st == AF_OK) st = af_worker_start(w, err);
    if (st != AF_OK) {
        af_worker_destroy(w);
        return st;
    }
    const af_wp_hello *h = &w->hello;
    snprintf(w->describe, sizeof w->describe, "%s %s%s%s", h->name, h->version[0] ? h->version : "?",
             h->variant[0] ? " variant " : "", h->variant);
    w->vt.name = w->spec;
    w->vt.version = h->version;
    w->vt.summary = w->describe;
    w->vt.caps = h->caps & AF_CAP_ALL;
    w->vt.layouts = h->layouts & AF_LAYOUTS_ALL;
    w->vt.out_dtype = AF_F64; /* large enough for any dtype it returns (run says which) */
    w->vt.destroy = af_worker_destroy;
    w->vt.run = af_worker_run;
    w->vt.run_backward = af_worker_run_backward; /* sent backward cases only when its hello says backward */
    w->vt.run_lse = af_worker_run_lse;           /* with cap lse only (af_backend_run_lse) */
    w->vt.run_result = af_worker_run_result;
    w->vt.supports = af_worker_supports;
    w->vt.batch_max = af_worker_batch_max;
    w->vt.batch_begin = af_worker_batch_begin;
    w->vt.batch_end = af_worker_batch_end;
    w->vt.batch_push = af_worker_batch_push;
    w->vt.ext = af_worker_ext;
    w->ext.describe = w->describe;
    w->ext.conventions = h->conventions;
    w->ext.own_dropout = h->dropout == AF_WP_DROPOUT_KEEP_MASK;
    w->ext.conv = h->conv;
    w->ext.compile_key = h->compile_key;
    w->ext.traits = h->traits;
    w->ext.libs = &h->libs;
    w->ext.learned = w->learned;
    st = af_backend_open_state(&w->vt, w, out, err);
    if (st != AF_OK) af_worker_destroy(w);
    return st;
}
