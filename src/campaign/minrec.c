/* minrec.c - the shared record of minimized signatures (see minrec.h). */
#include "minrec.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "attnfuzz/bundle.h"
#include "attnfuzz/mem.h"

const char *const af_minrec_state_names[AF_MINREC_COUNT] = {"none", "alias", "busy", "mine"};
_Static_assert(sizeof(af_minrec_state_names) / sizeof(af_minrec_state_names[0]) == AF_MINREC_COUNT, "names");

#define AF_MINREC_HELD 16 /* claims tracked for af_minrec_close (the store holds one at a time) */

struct af_minrec {
    char crashes[PATH_MAX];
    char dir[PATH_MAX]; /* <crashes>/.minimized */
    long pid;
    unsigned long long start;
    char host[64];
    char claim[160]; /* the text of our claims */
    uint64_t held[AF_MINREC_HELD];
    size_t n_held;
};

/* --- this process and others ---------------------------------------------------------- */

/* Field 22 of /proc/<pid>/stat (start time in clock ticks after boot) and its state
 * letter (field 3); 0 and '?' when unreadable (no /proc). */
static unsigned long long af_minrec_proc(long pid, char *state) {
    char path[64], buf[1024];
    *state = '?';
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    if (!p) return 0;
    char *save = NULL, *tok = strtok_r(p + 1, " ", &save);
    for (int field = 3; tok && field < 22; field++) {
        if (field == 3) *state = tok[0];
        tok = strtok_r(NULL, " ", &save);
    }
    return tok ? strtoull(tok, NULL, 10) : 0;
}

/* Is the process that wrote a claim (pid, start) still there? A zombie is not. */
static bool af_minrec_alive(long pid, unsigned long long start) {
    if (pid <= 0) return false;
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return false;
    char state;
    unsigned long long now = af_minrec_proc(pid, &state);
    if (state == 'Z' || state == 'X') return false;
    return now == 0 || start == 0 || now == start; /* unknown: trust the pid */
}

af_minrec *af_minrec_open(const char *crashes_dir) {
    af_minrec *r = af_calloc(1, sizeof *r);
    if (!r) return NULL;
    snprintf(r->crashes, sizeof r->crashes, "%s", crashes_dir);
    snprintf(r->dir, sizeof r->dir, "%s/%s", crashes_dir, AF_MINREC_DIR);
    r->pid = (long)getpid();
    char state;
    r->start = af_minrec_proc(r->pid, &state);
    if (gethostname(r->host, sizeof r->host) != 0 || !r->host[0]) snprintf(r->host, sizeof r->host, "?");
    r->host[sizeof r->host - 1] = 0;
    for (char *h = r->host; *h; h++)
        if (*h == ' ' || *h == '\n') *h = '_';
    snprintf(r->claim, sizeof r->claim, "attnfuzz-claim 1 %ld %llu %s\n", r->pid, r->start, r->host);
    return r;
}

void af_minrec_close(af_minrec *r) {
    if (!r) return;
    while (r->n_held > 0) af_minrec_release(r, r->held[r->n_held - 1]);
    af_free(r);
}

/* --- files --------------------------------------------------------------------------- */

static void af_minrec_path(const af_minrec *r, char *buf, size_t cap, uint64_t raw, const char *suffix) {
    snprintf(buf, cap, "%s/%016llx%s", r->dir, (unsigned long long)raw, suffix);
}

/* Reads a small regular file into buf (NUL-terminated): its length, or -1 when it is
 * missing, not a regular file, or longer than AF_MINREC_FILE_MAX (then it is no record:
 * nothing more of it is read). *mtime gets its modification time. */
static long af_minrec_read(const char *path, char *buf, size_t cap, double *mtime) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0) return -1;
    struct stat st;
    long n = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= AF_MINREC_FILE_MAX &&
        (size_t)st.st_size < cap) {
        ssize_t got = read(fd, buf, cap - 1);
        if (got >= 0) {
            buf[got] = 0;
            n = (long)got;
        }
        if (mtime) *mtime = (double)st.st_mtim.tv_sec + 1e-9 * (double)st.st_mtim.tv_nsec;
    }
    close(fd);
    return n;
}

/* Writes text into this process's temporary file for name (no fsync: minrec.h says why). */
static int af_minrec_write_tmp(const af_minrec *r, const char *name, const char *text, char *tmp, size_t cap) {
    snprintf(tmp, cap, "%s/.tmp.%ld.%s", r->dir, r->pid, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    size_t n = strlen(text);
    ssize_t w = write(fd, text, n);
    int e = errno;
    if (close(fd) != 0 || w != (ssize_t)n) {
        unlink(tmp);
        errno = w < 0 ? e : ENOSPC;
        return -1;
    }
    return 0;
}

static int af_minrec_mkdir(const af_minrec *r) {
    if (mkdir(r->crashes, 0755) != 0 && errno != EEXIST) return -1;
    if (mkdir(r->dir, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

/* The alias recorded for raw, when there is a well-formed one whose bundle exists. */
static bool af_minrec_alias_of(const af_minrec *r, uint64_t raw, af_minrec_alias *a) {
    char path[PATH_MAX + 32], text[AF_MINREC_FILE_MAX + 1], kind[32];
    af_minrec_path(r, path, sizeof path, raw, "");
    if (af_minrec_read(path, text, sizeof text, NULL) < 0) return false;
    unsigned long long fr, fs;
    int end = 0;
    if (sscanf(text, "attnfuzz-minimized 1 %16llx %16llx %31s%n", &fr, &fs, kind, &end) != 3 || text[end] != '\n' ||
        text[end + 1] != 0 || fr != raw)
        return false;
    int k = af_kind_from_name(kind);
    if (k <= AF_KIND_OK) return false;
    char name[64], bundle[PATH_MAX + 80];
    af_bundle_name((af_kind)k, (uint64_t)fs, name, sizeof name);
    snprintf(bundle, sizeof bundle, "%s/%s", r->crashes, name);
    struct stat st;
    if (stat(bundle, &st) != 0) return false; /* deleted since: minimize it again */
    a->raw = raw;
    a->sig = (uint64_t)fs;
    a->kind = (af_kind)k;
    return true;
}

bool af_minrec_alias_read(const af_minrec *r, uint64_t raw, af_minrec_alias *alias) {
    return af_minrec_alias_of(r, raw, alias);
}

typedef enum { AF_CLAIM_NONE, AF_CLAIM_OURS, AF_CLAIM_LIVE, AF_CLAIM_STALE } af_minrec_claim_state;

static af_minrec_claim_state af_minrec_claim_of(const af_minrec *r, uint64_t raw) {
    char path[PATH_MAX + 32], text[AF_MINREC_FILE_MAX + 1], host[64];
    af_minrec_path(r, path, sizeof path, raw, ".claim");
    double mtime = 0;
    long n = af_minrec_read(path, text, sizeof text, &mtime);
    if (n < 0) {
        struct stat st; /* one that is not a record at all (too large, not a file) is stale */
        return lstat(path, &st) == 0 ? AF_CLAIM_STALE : AF_CLAIM_NONE;
    }
    if (strcmp(text, r->claim) == 0) return AF_CLAIM_OURS;
    long pid;
    unsigned long long start;
    if (sscanf(text, "attnfuzz-claim 1 %ld %llu %63s", &pid, &start, host) != 3) return AF_CLAIM_STALE;
    if (strcmp(host, r->host) == 0) return af_minrec_alive(pid, start) ? AF_CLAIM_LIVE : AF_CLAIM_STALE;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (double)now.tv_sec - mtime < AF_MINREC_CLAIM_MAX_AGE ? AF_CLAIM_LIVE : AF_CLAIM_STALE;
}

static void af_minrec_hold(af_minrec *r, uint64_t raw) {
    for (size_t i = 0; i < r->n_held; i++)
        if (r->held[i] == raw) return;
    if (r->n_held < AF_MINREC_HELD) r->held[r->n_held++] = raw;
}

/* --- the record ---------------------------------------------------------------------- */

af_minrec_state af_minrec_lookup(af_minrec *r, uint64_t raw, af_minrec_alias *alias) {
    if (af_minrec_alias_of(r, raw, alias)) return AF_MINREC_ALIAS;
    switch (af_minrec_claim_of(r, raw)) {
    case AF_CLAIM_OURS: return AF_MINREC_MINE;
    case AF_CLAIM_LIVE: return AF_MINREC_BUSY;
    case AF_CLAIM_NONE:
    case AF_CLAIM_STALE: break;
    }
    return AF_MINREC_NONE;
}

af_minrec_state af_minrec_claim(af_minrec *r, uint64_t raw, af_minrec_alias *alias) {
    if (af_minrec_alias_of(r, raw, alias)) return AF_MINREC_ALIAS;
    char name[40], tmp[PATH_MAX + 64], path[PATH_MAX + 32];
    snprintf(name, sizeof name, "%016llx.claim", (unsigned long long)raw);
    af_minrec_path(r, path, sizeof path, raw, ".claim");
    if (af_minrec_mkdir(r) != 0 || af_minrec_write_tmp(r, name, r->claim, tmp, sizeof tmp) != 0)
        return AF_MINREC_MINE; /* a record that cannot be written: minimize, unshared */
    af_minrec_state got = AF_MINREC_BUSY;
    for (int tries = 0; tries < 4; tries++) {
        if (link(tmp, path) == 0) { /* created whole, or not at all */
            got = AF_MINREC_MINE;
            break;
        }
        if (errno != EEXIST) {
            unlink(tmp);
            return AF_MINREC_MINE; /* unshared, as above */
        }
        af_minrec_claim_state cs = af_minrec_claim_of(r, raw);
        if (cs == AF_CLAIM_OURS) {
            got = AF_MINREC_MINE;
            break;
        }
        if (cs == AF_CLAIM_LIVE) break;
        if (cs == AF_CLAIM_NONE) continue; /* released meanwhile: link again */
        /* stale: take it over in one step, then see who holds it (another process may
         * have taken it over at the same time; the last rename wins) */
        if (rename(tmp, path) != 0) break;
        got = af_minrec_claim_of(r, raw) == AF_CLAIM_OURS ? AF_MINREC_MINE : AF_MINREC_BUSY;
        break;
    }
    unlink(tmp); /* after link(2) a second name; after rename(2) gone already */
    if (got != AF_MINREC_MINE) return got;
    af_minrec_hold(r, raw);
    /* an alias published between the lookup above and the claim: nothing to do */
    if (af_minrec_alias_of(r, raw, alias)) {
        af_minrec_release(r, raw);
        return AF_MINREC_ALIAS;
    }
    return AF_MINREC_MINE;
}

af_status af_minrec_publish(af_minrec *r, const af_minrec_alias *a, af_error *err) {
    char name[40], tmp[PATH_MAX + 64], path[PATH_MAX + 32], text[AF_MINREC_FILE_MAX];
    snprintf(name, sizeof name, "%016llx", (unsigned long long)a->raw);
    af_minrec_path(r, path, sizeof path, a->raw, "");
    snprintf(text, sizeof text, "attnfuzz-minimized 1 %016llx %016llx %s\n", (unsigned long long)a->raw,
             (unsigned long long)a->sig, af_kind_names[a->kind]);
    af_status st = AF_OK;
    if (af_minrec_mkdir(r) != 0 || af_minrec_write_tmp(r, name, text, tmp, sizeof tmp) != 0) {
        st = af_error_set(err, AF_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    } else if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        st = af_error_set(err, AF_ERR_IO, "%s: cannot rename %s into place: %s", path, tmp, strerror(e));
    }
    af_minrec_release(r, a->raw);
    return st;
}

void af_minrec_release(af_minrec *r, uint64_t raw) {
    for (size_t i = 0; i < r->n_held; i++)
        if (r->held[i] == raw) {
            r->held[i] = r->held[--r->n_held];
            break;
        }
    char path[PATH_MAX + 32];
    af_minrec_path(r, path, sizeof path, raw, ".claim");
    if (af_minrec_claim_of(r, raw) == AF_CLAIM_OURS) unlink(path);
}

size_t af_minrec_remove_partial(const char *crashes_dir, long pid) {
    char dir[PATH_MAX], mark[48];
    snprintf(dir, sizeof dir, "%s/%s", crashes_dir, AF_MINREC_DIR);
    snprintf(mark, sizeof mark, ".tmp.%ld.", pid);
    DIR *d = opendir(dir);
    if (!d) return 0;
    size_t removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, mark, strlen(mark)) == 0 && unlinkat(dirfd(d), e->d_name, 0) == 0) removed++;
    closedir(d);
    return removed;
}
