/* merge.c - joining shards' bundles into one directory (see merge.h for the layout and
 * why no bundle is ever lost or half-written); the stats are merge_stats.c's. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "attnfuzz/bundle.h"
#include "attnfuzz/mem.h"
#include "attnfuzz/shard.h"
#include "fileio.h"
#include "merge_internal.h"

#define AF_MERGE_NAME_MAX 200 /* bundle names longer than this are skipped */

/* --- small file-system steps --------------------------------------------------------- */

static bool af_merge_join(char *buf, size_t len, const char *a, const char *b) {
    int w = snprintf(buf, len, "%s/%s", a, b);
    return w >= 0 && (size_t)w < len;
}

static bool af_merge_is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Sets path's ctime to now, leaving its mtime (when the bundle was stored, which report
 * shows) alone: the start of an old version's grace. false when path is gone. */
static bool af_merge_touch(const char *path) {
    struct timespec ts[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
    return utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW) == 0;
}

/* 16 hex digits no other merge picks (a version name). */
static void af_merge_unique(char *buf, size_t len) {
    static atomic_uint counter;
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
    }
    v ^= (uint64_t)atomic_fetch_add(&counter, 1u) * 0x9e3779b97f4a7c15ull;
    snprintf(buf, len, "%016llx", (unsigned long long)v);
}

/* Copies the regular file src to dst (created, never replacing), synced. */
static af_status af_merge_copy_file(const char *src, const char *dst, af_error *err) {
    int in = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    AF_RETURN_ERROR_IF(in < 0, err, AF_ERR_IO, "%s: cannot open: %s", src, strerror(errno));
    struct stat sb;
    if (fstat(in, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(in);
        return af_error_set(err, AF_ERR_IO, "%s: not a regular file", src);
    }
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) {
        int e = errno;
        close(in);
        return af_error_set(err, AF_ERR_IO, "%s: cannot create: %s", dst, strerror(e));
    }
    char buf[1 << 16];
    off_t total = 0;
    const char *what = NULL, *where = dst;
    int e = 0;
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            what = "cannot read", e = errno, where = src;
            break;
        }
        if (n == 0) break;
        for (ssize_t done = 0; done < n;) {
            ssize_t w = write(out, buf + done, (size_t)(n - done));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                what = "cannot write", e = w < 0 ? errno : ENOSPC;
                break;
            }
            done += w;
        }
        if (what) break;
        total += n;
    }
    if (!what && total != sb.st_size) what = "changed while copied", e = EIO, where = src; /* never a stored bundle */
    if (!what && fsync(out) != 0) what = "cannot sync", e = errno;
    if (close(out) != 0 && !what) what = "cannot close", e = errno;
    close(in);
    AF_RETURN_ERROR_IF(what, err, AF_ERR_IO, "%s: %s: %s", where, what, strerror(e));
    return AF_OK;
}

/* Copies every regular file of the bundle directory src into the new directory dst, with
 * src's mtime (when the finding was stored). */
static af_status af_merge_copy_bundle(const char *src, const char *dst, af_error *err) {
    AF_RETURN_ERROR_IF(mkdir(dst, 0755) != 0, err, AF_ERR_IO, "%s: cannot create directory: %s", dst, strerror(errno));
    DIR *d = opendir(src);
    AF_RETURN_ERROR_IF(!d, err, AF_ERR_IO, "%s: cannot open: %s", src, strerror(errno));
    af_status st = AF_OK;
    struct dirent *e;
    char from[PATH_MAX], to[PATH_MAX];
    while (st == AF_OK && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        struct stat sb;
        if (fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (!af_merge_join(from, sizeof from, src, e->d_name) || !af_merge_join(to, sizeof to, dst, e->d_name)) {
            st = af_error_set(err, AF_ERR_IO, "%s/%s: path is too long", src, e->d_name);
            break;
        }
        st = af_merge_copy_file(from, to, err);
    }
    closedir(d);
    struct stat sb;
    if (st == AF_OK && stat(src, &sb) == 0) {
        struct timespec ts[2] = {sb.st_atim, sb.st_mtim};
        utimensat(AT_FDCWD, dst, ts, 0);
    }
    int fd = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd); /* the directory entries, before the rename publishes them */
        close(fd);
    }
    return st;
}

/* Seconds since path's status last changed (its ctime), to the nanosecond. */
static double af_merge_age(const struct stat *sb) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (double)(now.tv_sec - sb->st_ctim.tv_sec) + 1e-9 * (double)(now.tv_nsec - sb->st_ctim.tv_nsec);
}

/* --- the lock ------------------------------------------------------------------------ */

/* Opens OUT/crashes/.lock (merge.h); -1 when it cannot be had. */
static int af_merge_lock_open(const char *crashes) {
    char path[PATH_MAX];
    if (!af_merge_join(path, sizeof path, crashes, ".lock")) return -1;
    return open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
}

/* Takes the exclusive lock; false where the file system has no locks (the merge goes on
 * without it: merge.h says why that is still safe). */
static bool af_merge_lock(int fd) {
    if (fd < 0) return false;
    while (flock(fd, LOCK_EX) != 0)
        if (errno != EINTR) return false;
    return true;
}

static void af_merge_unlock(int fd, bool held) {
    if (held) flock(fd, LOCK_UN);
}

/* --- ranking bundles ------------------------------------------------------------------- */

typedef struct af_merge_rank {
    double flops;
    size_t bytes;
} af_merge_rank;

static int af_merge_rank_cmp(const af_merge_rank *a, const af_merge_rank *b) {
    if (a->flops != b->flops) return a->flops < b->flops ? -1 : 1;
    return a->bytes < b->bytes ? -1 : a->bytes > b->bytes;
}

/* Reads the bundle at dir (resolving a link once) and ranks its case. */
static af_status af_merge_rank_of(const char *dir, af_merge_rank *r, af_error *err) {
    af_bundle *b;
    AF_TRY(af_bundle_read(dir, &b, err));
    r->flops = af_case_flops(af_bundle_case(b));
    r->bytes = af_case_tensor_bytes(af_bundle_case(b));
    af_bundle_free(b);
    return AF_OK;
}

/* What OUT/crashes/<name> is now. */
typedef enum af_merge_current {
    AF_MERGE_NONE,   /* nothing by that name */
    AF_MERGE_LINK,   /* a link to a readable version: *rank is its rank */
    AF_MERGE_BROKEN, /* a link to nothing readable (never made by a merge): replaced */
    AF_MERGE_DIR,    /* a real directory (not a merge's): never replaced */
} af_merge_current;

static af_merge_current af_merge_current_of(const char *path, af_merge_rank *rank) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return AF_MERGE_NONE;
    if (!S_ISLNK(sb.st_mode)) return AF_MERGE_DIR;
    af_error e;
    return af_merge_rank_of(path, rank, &e) == AF_OK ? AF_MERGE_LINK : AF_MERGE_BROKEN;
}

/* --- installing one bundle --------------------------------------------------------------- */

typedef enum af_merge_outcome { AF_MERGE_KEPT, AF_MERGE_ADDED, AF_MERGE_REPLACED } af_merge_outcome;

typedef struct af_merge_out {
    char crashes[PATH_MAX];  /* OUT/crashes */
    char versions[PATH_MAX]; /* OUT/crashes/.v */
    int lock;                /* OUT/crashes/.lock, -1 when it could not be opened */
} af_merge_out;

/* Installs the bundle at src (a resolved directory, already read and ranked) as name,
 * unless OUT already holds one at least as small. */
static af_status af_merge_install(af_merge_out *m, const char *name, const char *src, const af_merge_rank *rank,
                                  af_merge_outcome *outcome, af_error *err) {
    static atomic_uint counter;
    *outcome = AF_MERGE_KEPT;
    char link[PATH_MAX];
    AF_RETURN_ERROR_IF(!af_merge_join(link, sizeof link, m->crashes, name), err, AF_ERR_IO, "%s/%s: path is too long",
                       m->crashes, name);
    /* 1. nothing to do when OUT holds a bundle at least as small (no copy, no lock) */
    af_merge_rank cur;
    af_merge_current c = af_merge_current_of(link, &cur);
    if (c == AF_MERGE_DIR || (c == AF_MERGE_LINK && af_merge_rank_cmp(rank, &cur) >= 0)) return AF_OK;

    /* 2. a complete, checked copy under a version name nobody else picks */
    char tmp[PATH_MAX], leaf[AF_MERGE_NAME_MAX + 64], hex[20], version[PATH_MAX], target[AF_MERGE_NAME_MAX + 32];
    snprintf(leaf, sizeof leaf, ".tmp-%s-%ld-%u", name, (long)getpid(), atomic_fetch_add(&counter, 1u));
    AF_RETURN_ERROR_IF(!af_merge_join(tmp, sizeof tmp, m->versions, leaf), err, AF_ERR_IO, "%s: path is too long",
                       m->versions);
    af_status st = af_merge_copy_bundle(src, tmp, err);
    af_bundle *check = NULL;
    if (st == AF_OK) st = af_bundle_read(tmp, &check, err); /* case.json and every file it lists */
    af_bundle_free(check);
    af_merge_unique(hex, sizeof hex);
    snprintf(target, sizeof target, ".v/%s@%s", name, hex);
    if (st == AF_OK && !af_merge_join(version, sizeof version, m->crashes, target))
        st = af_error_set(err, AF_ERR_IO, "%s: path is too long", m->crashes);
    if (st == AF_OK && renameat2(AT_FDCWD, tmp, AT_FDCWD, version, RENAME_NOREPLACE) != 0 &&
        (errno != EINVAL || rename(tmp, version) != 0)) /* no RENAME_NOREPLACE: the name is unique anyway */
        st = af_error_set(err, AF_ERR_IO, "%s: cannot rename %s into place: %s", version, tmp, strerror(errno));
    if (st != AF_OK) {
        af_file_remove_dir(tmp);
        return st;
    }

    /* 3. publish it, under the lock: compare again (another merge may have been first),
     * then create the link or rename a new link over the old one */
    bool held = af_merge_lock(m->lock);
    for (int tries = 0; tries < 8; tries++) {
        c = af_merge_current_of(link, &cur);
        if (c == AF_MERGE_DIR || (c == AF_MERGE_LINK && af_merge_rank_cmp(rank, &cur) >= 0)) break; /* lost */
        char old[PATH_MAX] = "";
        if (c != AF_MERGE_NONE) {
            char rel[PATH_MAX];
            ssize_t n = readlink(link, rel, sizeof rel - 1);
            if (n > 0) {
                rel[n] = 0;
                if (!af_merge_join(old, sizeof old, m->crashes, rel)) old[0] = 0;
            }
        }
        if (!af_merge_touch(version)) { /* a merge stalled past the grace: a gc removed it */
            af_merge_unlock(m->lock, held);
            return af_error_set(err, AF_ERR_IO, "%s: removed before it was linked (this merge stalled past its grace)",
                                version);
        }
        if (c == AF_MERGE_NONE) {
            if (symlink(target, link) == 0) {
                af_merge_unlock(m->lock, held);
                *outcome = AF_MERGE_ADDED;
                return AF_OK;
            }
            if (errno == EEXIST) continue; /* created meanwhile (a merge without locks): compare again */
            st = af_error_set(err, AF_ERR_IO, "%s: cannot create the link: %s", link, strerror(errno));
            break;
        }
        char tlink[PATH_MAX];
        snprintf(leaf, sizeof leaf, ".tmp-link-%s-%ld-%u", name, (long)getpid(), atomic_fetch_add(&counter, 1u));
        if (!af_merge_join(tlink, sizeof tlink, m->crashes, leaf) || symlink(target, tlink) != 0) {
            st = af_error_set(err, AF_ERR_IO, "%s: cannot create a link: %s", tlink, strerror(errno));
            break;
        }
        if (rename(tlink, link) != 0) { /* atomic: the old link or the new one, never neither */
            int e = errno;
            unlink(tlink);
            st = af_error_set(err, AF_ERR_IO, "%s: cannot replace the link: %s", link, strerror(e));
            break;
        }
        if (old[0]) af_merge_touch(old); /* its grace starts now */
        af_merge_unlock(m->lock, held);
        *outcome = AF_MERGE_REPLACED;
        return AF_OK;
    }
    af_file_remove_dir(version); /* never linked: nobody can be reading it */
    af_merge_unlock(m->lock, held);
    return st;
}

/* Removes versions no link names once their ctime is grace seconds old, and temporary
 * copies and links a killed merge left once they are AF_MERGE_GRACE old (a copy in
 * progress may be slow). Under the lock: a version is linked right after its ctime is
 * refreshed, under the lock too, so none is removed between the two. */
static size_t af_merge_gc(const af_merge_out *m, double grace) {
    /* the versions the links name */
    size_t n = 0, cap = 0;
    char **used = NULL;
    DIR *d = opendir(m->crashes);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char rel[PATH_MAX];
        ssize_t len = readlinkat(dirfd(d), e->d_name, rel, sizeof rel - 1);
        struct stat sb;
        if (len < 0) continue;
        rel[len] = 0;
        if (!strncmp(e->d_name, ".tmp-link-", 10)) { /* a merge killed before its rename */
            if (fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
                af_merge_age(&sb) > AF_MERGE_GRACE)
                unlinkat(dirfd(d), e->d_name, 0);
            continue;
        }
        if (strncmp(rel, ".v/", 3) != 0) continue;
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 64;
            char **g = af_calloc(nc, sizeof *g);
            if (!g) break;
            if (used) memcpy(g, used, n * sizeof *g);
            af_free(used);
            used = g, cap = nc;
        }
        if (!(used[n] = af_strdup(rel + 3))) break;
        n++;
    }
    closedir(d);
    size_t removed = 0;
    d = opendir(m->versions);
    while (d && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        bool linked = false;
        for (size_t i = 0; i < n && !linked; i++) linked = strcmp(used[i], e->d_name) == 0;
        struct stat sb;
        if (linked || fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0) continue;
        double keep = strncmp(e->d_name, ".tmp-", 5) == 0 && grace < AF_MERGE_GRACE ? AF_MERGE_GRACE : grace;
        if (af_merge_age(&sb) <= keep) continue;
        char path[PATH_MAX];
        if (!af_merge_join(path, sizeof path, m->versions, e->d_name)) continue;
        af_file_remove_dir(path);
        removed++;
    }
    if (d) closedir(d);
    for (size_t i = 0; i < n; i++) af_free(used[i]);
    af_free(used);
    return removed;
}

/* --- sources ------------------------------------------------------------------------ */

typedef struct af_merge_set {
    af_merge_source *src;
    size_t n;
} af_merge_set;

static af_status af_merge_add_source(af_merge_set *s, const char *dir, long index, af_error *err) {
    AF_RETURN_ERROR_IF(s->n >= AF_MERGE_MAX_SOURCES, err, AF_ERR_INVALID, "more than %d source directories",
                       AF_MERGE_MAX_SOURCES);
    af_merge_source *x = &s->src[s->n];
    memset(x, 0, sizeof *x);
    char real[PATH_MAX];
    AF_RETURN_ERROR_IF(!realpath(dir, real), err, AF_ERR_IO, "%s: %s", dir, strerror(errno));
    for (size_t i = 0; i < s->n; i++) /* the same shard named twice (a root and its shard) */
        if (!strcmp(s->src[i].real, real)) return AF_OK;
    snprintf(x->real, sizeof x->real, "%s", real);
    x->index = index;
    snprintf(x->dir, sizeof x->dir, "%s", dir);
    /* its bundles: dir/crashes (a shard's), else dir itself (a crashes directory, maybe
     * with the --stats file of its campaign in it) */
    char path[PATH_MAX];
    bool sub = af_merge_join(path, sizeof path, dir, "crashes") && af_merge_is_dir(path);
    snprintf(x->crashes, sizeof x->crashes, "%s", sub ? path : dir);
    if (!af_merge_join(x->stats, sizeof x->stats, dir, "stats.json") || access(x->stats, F_OK) != 0) x->stats[0] = 0;
    s->n++;
    return AF_OK;
}

static int af_merge_shard_cmp(const void *a, const void *b) {
    const af_merge_source *x = a, *y = b;
    if (x->index != y->index) return x->index < y->index ? -1 : 1;
    return strcmp(x->dir, y->dir);
}

/* The sources of o, roots expanded into their shard-I directories (by index). */
static af_status af_merge_sources(const af_merge_opts *o, const char *out_real, af_merge_set *s, af_error *err) {
    for (size_t i = 0; i < o->n_sources; i++) {
        const char *dir = o->sources[i];
        char real[PATH_MAX], path[PATH_MAX];
        AF_RETURN_ERROR_IF(!af_merge_is_dir(dir) || !realpath(dir, real), err, AF_ERR_IO,
                           "%s: not a directory (a shard directory, a root of shard-I, or bundles)", dir);
        AF_RETURN_ERROR_IF(!strcmp(real, out_real), err, AF_ERR_INVALID, "%s: the output cannot be a source too", dir);
        bool shard = (af_merge_join(path, sizeof path, dir, "crashes") && af_merge_is_dir(path)) ||
                     (af_merge_join(path, sizeof path, dir, "stats.json") && access(path, F_OK) == 0);
        size_t first = s->n;
        if (!shard) { /* a root: its shard-I directories */
            DIR *d = opendir(dir);
            struct dirent *e;
            while (d && (e = readdir(d)) != NULL) {
                if (!af_merge_join(path, sizeof path, dir, e->d_name)) continue;
                long k = af_shard_dir_index(e->d_name);
                if (k < 0 || !af_merge_is_dir(path)) continue;
                af_status st = af_merge_add_source(s, path, k, err);
                if (st != AF_OK) {
                    closedir(d);
                    return st;
                }
            }
            if (d) closedir(d);
        }
        if (s->n == first && shard) AF_TRY(af_merge_add_source(s, dir, af_shard_dir_index(real), err));
        if (s->n == first && !shard) AF_TRY(af_merge_add_source(s, dir, -1, err)); /* bundles, or none yet */
    }
    return AF_OK;
}

/* Reads each source's stats (NULL where there are none yet or they do not parse: a
 * shard that has not started, or one killed before its first write). */
static void af_merge_read_stats(af_merge_set *s, bool quiet) {
    for (size_t i = 0; i < s->n; i++) {
        af_merge_source *x = &s->src[i];
        if (!x->stats[0] || access(x->stats, F_OK) != 0) continue;
        char *text = NULL;
        size_t len = 0;
        af_error e;
        if (af_file_read(x->stats, (size_t)256 << 20, &text, &len, &e) != AF_OK) {
            if (!quiet) fprintf(stderr, "attnfuzz merge: skipped %s\n", e.msg);
            continue;
        }
        x->st = cJSON_ParseWithLength(text, len);
        af_free(text);
        if (!x->st || !cJSON_IsObject(x->st)) {
            if (!quiet) fprintf(stderr, "attnfuzz merge: skipped %s: not a JSON object\n", x->stats);
            cJSON_Delete(x->st);
            x->st = NULL;
            continue;
        }
        const cJSON *k = cJSON_GetObjectItem(x->st, "shard"), *n = cJSON_GetObjectItem(x->st, "shards");
        if (cJSON_IsNumber(k) && cJSON_IsNumber(n) && n->valuedouble > 0) x->index = (long)k->valuedouble;
    }
}

/* --- candidates --------------------------------------------------------------------- */

typedef struct af_merge_cand {
    char name[AF_MERGE_NAME_MAX + 1];
    char src[PATH_MAX]; /* the bundle directory, resolved */
    af_merge_rank rank;
    size_t order;       /* source position: the first source wins a tie */
} af_merge_cand;

static int af_merge_cand_cmp(const void *a, const void *b) {
    const af_merge_cand *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    c = af_merge_rank_cmp(&x->rank, &y->rank);
    if (c) return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

typedef struct af_merge_cands {
    af_merge_cand *c;
    size_t n, cap;
} af_merge_cands;

/* Adds every complete bundle of source i (names without a leading dot). */
static af_status af_merge_scan(const af_merge_source *x, size_t order, af_merge_cands *cs, af_merge_result *r,
                               bool quiet, af_error *err) {
    DIR *d = opendir(x->crashes);
    if (!d) return AF_OK; /* no bundle yet */
    struct dirent *e;
    af_status st = AF_OK;
    while (st == AF_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strlen(e->d_name) > AF_MERGE_NAME_MAX) continue;
        char path[PATH_MAX], real[PATH_MAX], json[PATH_MAX];
        if (!af_merge_join(path, sizeof path, x->crashes, e->d_name) || !af_merge_is_dir(path)) continue;
        if (!af_merge_join(json, sizeof json, path, "case.json") || access(json, F_OK) != 0) continue;
        if (!realpath(path, real)) continue;
        r->seen++;
        af_merge_rank rank;
        af_error be;
        if (af_merge_rank_of(real, &rank, &be) != AF_OK) {
            r->unreadable++;
            if (!quiet) fprintf(stderr, "attnfuzz merge: skipped %s: %s\n", path, be.msg);
            continue;
        }
        if (cs->n == cs->cap) {
            size_t cap = cs->cap ? 2 * cs->cap : 256;
            af_merge_cand *g = af_calloc(cap, sizeof *g);
            if (!g) {
                st = af_error_set(err, AF_ERR_NOMEM, "out of memory");
                break;
            }
            if (cs->c) memcpy(g, cs->c, cs->n * sizeof *g);
            af_free(cs->c);
            cs->c = g, cs->cap = cap;
        }
        af_merge_cand *c = &cs->c[cs->n++];
        memcpy(c->name, e->d_name, strlen(e->d_name) + 1); /* at most AF_MERGE_NAME_MAX: checked above */
        snprintf(c->src, sizeof c->src, "%s", real);
        c->rank = rank;
        c->order = order;
    }
    closedir(d);
    return st;
}

static size_t af_merge_count(const char *crashes) {
    DIR *d = opendir(crashes);
    if (!d) return 0;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[PATH_MAX];
        if (e->d_name[0] != '.' && af_merge_join(path, sizeof path, crashes, e->d_name) && af_merge_is_dir(path)) n++;
    }
    closedir(d);
    return n;
}

/* Writes text to path through a temporary name no other writer (another merge, another
 * host) picks, then renames it over path. */
static af_status af_merge_write_atomic(const char *path, const char *text, af_error *err) {
    char hex[20], tmp[PATH_MAX];
    af_merge_unique(hex, sizeof hex);
    int w = snprintf(tmp, sizeof tmp, "%s.tmp-%s", path, hex);
    AF_RETURN_ERROR_IF(w < 0 || (size_t)w >= sizeof tmp, err, AF_ERR_IO, "%s: path is too long", path);
    AF_TRY(af_file_write(tmp, text, strlen(text), true, err));
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return af_error_set(err, AF_ERR_IO, "%s: cannot rename %s into place: %s", path, tmp, strerror(e));
    }
    return AF_OK;
}

/* --- one pass ------------------------------------------------------------------------ */

af_status af_merge_run(const af_merge_opts *o, af_merge_result *r, af_error *err) {
    memset(r, 0, sizeof *r);
    AF_RETURN_ERROR_IF(!o->out || !o->out[0], err, AF_ERR_INVALID, "merge: no output directory");
    AF_RETURN_ERROR_IF(o->n_sources == 0, err, AF_ERR_INVALID, "merge: no source directories");
    double grace = o->grace == 0 ? AF_MERGE_GRACE : o->grace;
    af_merge_out m;
    memset(&m, 0, sizeof m);
    m.lock = -1;
    AF_RETURN_ERROR_IF(!af_merge_join(m.crashes, sizeof m.crashes, o->out, "crashes") ||
                           !af_merge_join(m.versions, sizeof m.versions, m.crashes, ".v"),
                       err, AF_ERR_IO, "%s: path is too long", o->out);
    AF_TRY(af_file_mkdirs(m.versions, err));
    char out_real[PATH_MAX];
    AF_RETURN_ERROR_IF(!realpath(o->out, out_real), err, AF_ERR_IO, "%s: %s", o->out, strerror(errno));

    af_merge_set set = {af_calloc(AF_MERGE_MAX_SOURCES, sizeof *set.src), 0};
    AF_RETURN_ERROR_IF(!set.src, err, AF_ERR_NOMEM, "out of memory");
    af_merge_cands cs = {0};
    af_status st = af_merge_sources(o, out_real, &set, err);
    /* 1. the stats first: every bundle they name was stored before them, so the scan
     * below sees it */
    if (st == AF_OK) {
        af_merge_read_stats(&set, o->quiet);
        qsort(set.src, set.n, sizeof *set.src, af_merge_shard_cmp);
    }
    /* 2. the bundles: per name the smallest (the first source on a tie) */
    for (size_t i = 0; st == AF_OK && i < set.n; i++) st = af_merge_scan(&set.src[i], i, &cs, r, o->quiet, err);
    if (st == AF_OK && cs.n) qsort(cs.c, cs.n, sizeof *cs.c, af_merge_cand_cmp);
    /* 3. install, the link updates under the lock */
    m.lock = af_merge_lock_open(m.crashes);
    for (size_t i = 0; st == AF_OK && i < cs.n; i++) {
        if (i > 0 && !strcmp(cs.c[i].name, cs.c[i - 1].name)) continue; /* a bigger copy */
        af_merge_outcome how;
        st = af_merge_install(&m, cs.c[i].name, cs.c[i].src, &cs.c[i].rank, &how, err);
        r->added += how == AF_MERGE_ADDED;
        r->replaced += how == AF_MERGE_REPLACED;
    }
    /* 4. old versions past their grace */
    if (st == AF_OK) {
        bool held = af_merge_lock(m.lock);
        r->removed = af_merge_gc(&m, grace);
        af_merge_unlock(m.lock, held);
    }
    if (m.lock >= 0) close(m.lock);
    /* 5. the stats */
    if (st == AF_OK) {
        r->sources = set.n;
        for (size_t i = 0; i < set.n; i++) {
            const cJSON *j = set.src[i].st;
            if (!j) continue;
            r->stats_read++;
            const cJSON *e = cJSON_GetObjectItem(j, "execs"), *n = cJSON_GetObjectItem(j, "shards");
            if (cJSON_IsNumber(e)) r->execs += (uint64_t)e->valuedouble;
            if (cJSON_IsNumber(n) && n->valuedouble > (double)r->shards_expected)
                r->shards_expected = (size_t)n->valuedouble;
            if (cJSON_IsTrue(cJSON_GetObjectItem(j, "finished"))) r->shards_finished++;
        }
        r->bundles = af_merge_count(m.crashes);
        char *text = af_merge_stats_print(set.src, set.n, m.crashes, err);
        char path[PATH_MAX];
        if (!text) {
            st = err ? err->code : AF_ERR_NOMEM;
        } else if (!af_merge_join(path, sizeof path, o->out, "stats.json")) {
            st = af_error_set(err, AF_ERR_IO, "%s: path is too long", o->out);
        } else {
            st = af_merge_write_atomic(path, text, err);
        }
        cJSON_free(text);
    }
    for (size_t i = 0; i < set.n; i++) cJSON_Delete(set.src[i].st);
    af_free(set.src);
    af_free(cs.c);
    return st;
}
