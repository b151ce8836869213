/* test_minrec.c - the shared record of minimized signatures (src/campaign/minrec.h):
 *   - an alias reads back only while its bundle exists; a claim is exclusive between
 *     processes, a dead process's claim (or a garbage one, or another host's old one) is
 *     taken over, another host's fresh one is not;
 *   - what is not a record is no record: garbage, a wrong raw signature, a file far too
 *     large (refused unread), temporary files;
 *   - many processes claiming and publishing the same signatures at once, with readers
 *     reading the files raw all along: every file read is whole, and each signature is
 *     minimized (claimed as MINE) by exactly one process. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attnfuzz/bundle.h"
#include "campaign/minrec.h"

static char af_tmp[256];

static void make_dir(const char *path) { assert_true(mkdir(path, 0755) == 0 || errno == EEXIST); }

/* A stand-in for the bundle an alias points at: the record checks that it exists. */
static void make_bundle(const char *crashes, af_kind kind, uint64_t sig) {
    char name[64], path[PATH_MAX];
    af_bundle_name(kind, sig, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", crashes, name);
    make_dir(crashes);
    make_dir(path);
}

static void write_file(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(text, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void record_path(char *buf, const char *crashes, uint64_t raw, const char *suffix) {
    snprintf(buf, PATH_MAX, "%s/%s/%016llx%s", crashes, AF_MINREC_DIR, (unsigned long long)raw, suffix);
}

/* The expected text of the alias raw -> raw ^ 0x5a5a (diverge). */
static void alias_text(char *buf, size_t cap, uint64_t raw) {
    snprintf(buf, cap, "attnfuzz-minimized 1 %016llx %016llx diverge\n", (unsigned long long)raw,
             (unsigned long long)(raw ^ 0x5a5a));
}

static void test_alias_and_claims(void **state) {
    (void)state;
    char crashes[512], path[PATH_MAX];
    snprintf(crashes, sizeof crashes, "%s/basic", af_tmp);
    af_minrec *r = af_minrec_open(crashes);
    assert_non_null(r);
    af_minrec_alias a;
    struct stat st;
    assert_int_equal(af_minrec_lookup(r, 0x11, &a), AF_MINREC_NONE);
    assert_int_not_equal(stat(crashes, &st), 0); /* a lookup creates nothing */

    /* claim, then publish: the alias reads back while its bundle is there */
    assert_int_equal(af_minrec_claim(r, 0x11, &a), AF_MINREC_MINE);
    assert_int_equal(af_minrec_lookup(r, 0x11, &a), AF_MINREC_MINE);
    assert_int_equal(af_minrec_claim(r, 0x11, &a), AF_MINREC_MINE); /* ours already */
    af_minrec_alias pub = {0x11, 0x22, AF_KIND_NAN_MISMATCH};
    af_error err = {0};
    assert_int_equal(af_minrec_publish(r, &pub, &err), AF_OK);
    record_path(path, crashes, 0x11, ".claim");
    assert_int_not_equal(stat(path, &st), 0); /* publishing dropped the claim */
    assert_int_equal(af_minrec_lookup(r, 0x11, &a), AF_MINREC_NONE); /* no bundle yet */
    make_bundle(crashes, AF_KIND_NAN_MISMATCH, 0x22);
    assert_int_equal(af_minrec_lookup(r, 0x11, &a), AF_MINREC_ALIAS);
    assert_true(a.raw == 0x11 && a.sig == 0x22 && a.kind == AF_KIND_NAN_MISMATCH);
    assert_int_equal(af_minrec_claim(r, 0x11, &a), AF_MINREC_ALIAS);

    /* another live process's claim: busy; once it is gone (a zombie counts as gone,
     * then reaped), the claim is taken over */
    int to_child[2], to_parent[2];
    assert_int_equal(pipe(to_child), 0);
    assert_int_equal(pipe(to_parent), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(20); /* never outlives a failed test */
        close(to_child[1]);
        close(to_parent[0]);
        af_minrec *c = af_minrec_open(crashes);
        char ok = af_minrec_claim(c, 0x33, &a) == AF_MINREC_MINE ? 'y' : 'n';
        if (write(to_parent[1], &ok, 1) != 1) _exit(3);
        char go;
        if (read(to_child[0], &go, 1) != 1) _exit(3);
        _exit(0); /* dies holding the claim (no af_minrec_close) */
    }
    close(to_child[0]);
    close(to_parent[1]);
    char ok = 0, go = 'g';
    assert_int_equal(read(to_parent[0], &ok, 1), 1);
    assert_int_equal(ok, 'y');
    assert_int_equal(af_minrec_claim(r, 0x33, &a), AF_MINREC_BUSY);
    assert_int_equal(af_minrec_lookup(r, 0x33, &a), AF_MINREC_BUSY);
    assert_int_equal(write(to_child[1], &go, 1), 1);
    close(to_child[1]);
    close(to_parent[0]);
    for (int i = 0; i < 200; i++) { /* until it is a zombie */
        char st_path[64], buf[512];
        snprintf(st_path, sizeof st_path, "/proc/%ld/stat", (long)pid);
        FILE *f = fopen(st_path, "r");
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f) fclose(f);
        buf[n] = 0;
        if (!f || strstr(buf, ") Z ")) break;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(af_minrec_claim(r, 0x33, &a), AF_MINREC_MINE); /* a zombie holds nothing */
    af_minrec_release(r, 0x33);
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);

    /* claims written by hand: a dead pid, garbage, another host (fresh, then old) */
    record_path(path, crashes, 0x44, ".claim");
    char text[256];
    snprintf(text, sizeof text, "attnfuzz-claim 1 %ld 0 ", (long)pid); /* reaped: no such process */
    char host[64] = "";
    gethostname(host, sizeof host);
    strncat(text, host[0] ? host : "?", sizeof text - strlen(text) - 2);
    strcat(text, "\n");
    write_file(path, text, strlen(text));
    assert_int_equal(af_minrec_claim(r, 0x44, &a), AF_MINREC_MINE);
    af_minrec_release(r, 0x44);
    assert_int_not_equal(stat(path, &st), 0);
    write_file(path, "garbage", 7);
    assert_int_equal(af_minrec_claim(r, 0x44, &a), AF_MINREC_MINE);
    af_minrec_release(r, 0x44);
    write_file(path, "attnfuzz-claim 1 1 0 some-other-host\n", 37);
    assert_int_equal(af_minrec_claim(r, 0x44, &a), AF_MINREC_BUSY);
    struct timespec old[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
    assert_int_equal(utimensat(AT_FDCWD, path, old, 0), 0);
    assert_int_equal(af_minrec_claim(r, 0x44, &a), AF_MINREC_MINE);

    /* close drops the claims it holds */
    af_minrec_close(r);
    assert_int_not_equal(stat(path, &st), 0);
    af_minrec_close(NULL);
}

/* Files that are not records read as no record, and one far too large is not read. */
static void test_not_records(void **state) {
    (void)state;
    char crashes[512], path[PATH_MAX], dir[600];
    snprintf(crashes, sizeof crashes, "%s/junk", af_tmp);
    snprintf(dir, sizeof dir, "%s/%s", crashes, AF_MINREC_DIR);
    make_dir(crashes);
    make_dir(dir);
    make_bundle(crashes, AF_KIND_DIVERGE, 0x5a5a ^ 0x77);
    af_minrec *r = af_minrec_open(crashes);
    af_minrec_alias a;
    char good[128];
    alias_text(good, sizeof good, 0x77);
    record_path(path, crashes, 0x77, "");
    static const char *const bad[] = {
        "",                                                         /* emptied (a power cut) */
        "attnfuzz-minimized 1 0000000000000077 000000000000",       /* cut short */
        "attnfuzz-minimized 1 0000000000000078 0000000000005a2d diverge\n", /* another raw */
        "attnfuzz-minimized 1 0000000000000077 0000000000005a2d warp\n",    /* no such kind */
        "attnfuzz-minimized 2 0000000000000077 0000000000005a2d diverge\n", /* another version */
        "attnfuzz-minimized 1 0000000000000077 0000000000005a2d diverge\nmore\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(path, bad[i], strlen(bad[i]));
        assert_int_equal(af_minrec_lookup(r, 0x77, &a), AF_MINREC_NONE);
    }
    write_file(path, good, strlen(good));
    assert_int_equal(af_minrec_lookup(r, 0x77, &a), AF_MINREC_ALIAS);
    /* 64 MiB of a sparse file: refused from its size, not read */
    int fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)64 << 20), 0);
    close(fd);
    clock_t t0 = clock();
    for (int i = 0; i < 1000; i++) assert_int_equal(af_minrec_lookup(r, 0x77, &a), AF_MINREC_NONE);
    assert_true((double)(clock() - t0) / CLOCKS_PER_SEC < 1.0);
    /* a directory, a link */
    unlink(path);
    make_dir(path);
    assert_int_equal(af_minrec_lookup(r, 0x77, &a), AF_MINREC_NONE);
    rmdir(path);
    char target[512];
    snprintf(target, sizeof target, "%s/elsewhere", af_tmp);
    write_file(target, good, strlen(good));
    assert_int_equal(symlink(target, path), 0);
    assert_int_equal(af_minrec_lookup(r, 0x77, &a), AF_MINREC_NONE);
    /* publishing replaces whatever is there (a link included) */
    af_minrec_alias pub = {0x77, 0x77 ^ 0x5a5a, AF_KIND_DIVERGE};
    af_error err = {0};
    assert_int_equal(af_minrec_publish(r, &pub, &err), AF_OK);
    assert_int_equal(af_minrec_lookup(r, 0x77, &a), AF_MINREC_ALIAS);
    /* temporary files are not records, and only the dead process's are removed */
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s/.tmp.4242.0000000000000088", dir);
    write_file(tmp, good, 10);
    snprintf(tmp, sizeof tmp, "%s/.tmp.42421.0000000000000088", dir);
    write_file(tmp, good, 10);
    assert_int_equal(af_minrec_lookup(r, 0x88, &a), AF_MINREC_NONE);
    assert_int_equal(af_minrec_remove_partial(crashes, 4242), 1);
    assert_int_equal(af_minrec_remove_partial(crashes, 4242), 0);
    struct stat st;
    assert_int_equal(stat(tmp, &st), 0);
    af_minrec_close(r);
}

#define WRITERS 6
#define READERS 2
#define RAWS 96

/* A writer: for each raw signature (in its own order), claim it until it is minimized;
 * when the claim is ours, "minimize" (a short pause) and publish. Reports on fd which
 * raws it got as MINE. */
static void writer(const char *crashes, unsigned seed, int fd) {
    af_minrec *r = af_minrec_open(crashes);
    uint8_t mine[RAWS] = {0};
    for (unsigned k = 0; k < RAWS; k++) {
        uint64_t raw = 0x1000 + (k * 7 + seed * 13) % RAWS;
        for (;;) {
            af_minrec_alias a;
            af_minrec_state s = af_minrec_claim(r, raw, &a);
            if (s == AF_MINREC_ALIAS) {
                if (a.sig != (raw ^ 0x5a5a) || a.kind != AF_KIND_DIVERGE) _exit(4);
                break;
            }
            if (s == AF_MINREC_MINE) {
                mine[raw - 0x1000] = 1;
                struct timespec ts = {0, 200000};
                nanosleep(&ts, NULL);
                af_minrec_alias pub = {raw, raw ^ 0x5a5a, AF_KIND_DIVERGE};
                af_error err;
                if (af_minrec_publish(r, &pub, &err) != AF_OK) _exit(5);
                break;
            }
            sched_yield(); /* busy: another process minimizes it */
        }
    }
    af_minrec_close(r);
    if (write(fd, mine, sizeof mine) != (ssize_t)sizeof mine) _exit(6);
    _exit(0);
}

/* A reader: reads every record file raw, over and over for a second and a half; a file
 * that exists is whole. */
static void reader(const char *crashes) {
    char path[PATH_MAX], want[128], got[256];
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec) > 1.5) break;
        for (unsigned k = 0; k < RAWS; k++) {
            uint64_t raw = 0x1000 + k;
            record_path(path, crashes, raw, "");
            int fd = open(path, O_RDONLY);
            if (fd < 0) continue;
            ssize_t n = read(fd, got, sizeof got - 1);
            close(fd);
            got[n < 0 ? 0 : n] = 0;
            alias_text(want, sizeof want, raw);
            if (strcmp(got, want) != 0) _exit(7); /* torn */
        }
    }
    _exit(0);
}

static void test_concurrent_writers(void **state) {
    (void)state;
    char crashes[512];
    snprintf(crashes, sizeof crashes, "%s/many", af_tmp);
    for (unsigned k = 0; k < RAWS; k++) make_bundle(crashes, AF_KIND_DIVERGE, (0x1000 + k) ^ 0x5a5a);
    int fds[WRITERS][2];
    pid_t pids[WRITERS + READERS];
    for (unsigned w = 0; w < WRITERS + READERS; w++) {
        if (w < WRITERS) assert_int_equal(pipe(fds[w]), 0);
        pids[w] = fork();
        assert_true(pids[w] >= 0);
        if (pids[w] == 0) {
            alarm(60);
            if (w < WRITERS) writer(crashes, w, fds[w][1]);
            reader(crashes);
        }
        if (w < WRITERS) close(fds[w][1]); /* the writer's end: a read gets EOF when it exits */
    }
    unsigned minimized[RAWS] = {0};
    for (unsigned w = 0; w < WRITERS; w++) {
        uint8_t mine[RAWS];
        size_t got = 0;
        while (got < sizeof mine) {
            ssize_t n = read(fds[w][0], mine + got, sizeof mine - got);
            if (n <= 0) break;
            got += (size_t)n;
        }
        assert_int_equal(got, sizeof mine);
        for (unsigned k = 0; k < RAWS; k++) minimized[k] += mine[k];
    }
    for (unsigned w = 0; w < WRITERS + READERS; w++) {
        int ws;
        assert_int_equal(waitpid(pids[w], &ws, 0), pids[w]);
        if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) fprintf(stderr, "process %u: status %d\n", w, ws);
        assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    }
    for (unsigned k = 0; k < RAWS; k++) {
        if (minimized[k] != 1) fprintf(stderr, "raw %u minimized %u times\n", k, minimized[k]);
        assert_int_equal(minimized[k], 1);
    }
    /* nothing left but the records: no claims, no temporary files */
    af_minrec *r = af_minrec_open(crashes);
    for (unsigned k = 0; k < RAWS; k++) {
        af_minrec_alias a;
        assert_int_equal(af_minrec_lookup(r, 0x1000 + k, &a), AF_MINREC_ALIAS);
    }
    af_minrec_close(r);
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s/%s' | wc -l) -eq %d", crashes, AF_MINREC_DIR, RAWS);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    snprintf(af_tmp, sizeof af_tmp, "/tmp/attnfuzz-test-minrec-XXXXXX");
    if (!mkdtemp(af_tmp)) return 1;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_alias_and_claims), cmocka_unit_test(test_not_records),
                                       cmocka_unit_test(test_concurrent_writers)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", af_tmp);
    if (system(cmd) != 0) rc = rc ? rc : 1;
    return rc;
}
