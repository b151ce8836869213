/* test_proc.c - external processes (src/core/proc.c): word splitting against hand-split
 * command lines, the project root found in a temporary directory tree, the wheel's installed
 * layout recognized, the project's Python, the child environment, and children: spawned
 * without a shell with a clean signal state, output captured into bounded buffers, a
 * sleeping child killed at the deadline together with what it started. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attnfuzz/mem.h"
#include "clock.h"
#include "proc.h"

extern char **environ;

/* --- words ----------------------------------------------------------------------------- */

static void expect_words(const char *line, const char *const *want, size_t n) {
    char **argv = NULL;
    af_error err;
    af_status st = af_proc_split(line, &argv, &err);
    if (st != AF_OK) fail_msg("split [%s]: %s", line, err.msg);
    size_t i = 0;
    for (; argv[i]; i++) {
        if (i >= n) fail_msg("split [%s]: extra word [%s]", line, argv[i]);
        if (strcmp(argv[i], want[i]) != 0)
            fail_msg("split [%s]: word %zu is [%s], want [%s]", line, i, argv[i], want[i]);
    }
    assert_int_equal(i, n);
    af_free(argv);
}

static void test_split(void **state) {
    (void)state;
    {
        const char *w[] = {"python3", "-m", "x"};
        expect_words("  python3\t-m \n x  ", w, 3);
    }
    {
        /* single quotes keep everything; double quotes unescape only \" \\ \$ \` */
        const char *w[] = {"a b", "c \"d\" $x \\n", "e f", "ghi", ""};
        expect_words("'a b' \"c \\\"d\\\" \\$x \\n\" e\\ f g'h'\"i\" ''", w, 5);
    }
    {
        const char *w[] = {"it's", "a\\b", "end\\"};
        expect_words("it\\'s 'a\\b' end\\", w, 3);
    }
    {
        const char *w[] = {"$HOME", "*", "a;b", "|", "`x`"};
        expect_words("$HOME * a;b | `x`", w, 5); /* no expansion, no operators: these are words */
    }
    char **argv = (char **)1;
    af_error err;
    assert_int_equal(af_proc_split("run 'open", &argv, &err), AF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "unbalanced quotes"));
    assert_null(argv);
    assert_int_equal(af_proc_split("run \"open\\\"", &argv, &err), AF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "unbalanced quotes"));
    assert_int_equal(af_proc_split(" \t\n", &argv, &err), AF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "empty command"));
    assert_int_equal(af_proc_split("", &argv, &err), AF_ERR_INVALID);
}

/* --- the project and its Python ---------------------------------------------------------- */

static void make_dirs(const char *path) {
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        mkdir(buf, 0755);
        *p = '/';
    }
    mkdir(buf, 0755);
}

static void make_file(const char *path, mode_t mode) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (fd < 0) fail_msg("cannot create %s: %s", path, strerror(errno));
    if (write(fd, "#\n", 2) != 2) fail_msg("cannot write %s", path);
    close(fd);
    chmod(path, mode);
}

static void remove_tree(const char *dir) {
    char *argv[] = {"rm", "-rf", (char *)dir, NULL};
    af_proc_opts o;
    af_proc_opts_init(&o);
    pid_t pid;
    int ws;
    if (af_proc_spawn(argv, &o, &pid, NULL) == AF_OK) af_proc_wait(pid, &ws, NULL);
}

static void test_root(void **state) {
    (void)state;
    char top[] = "/tmp/af_proc_XXXXXX";
    assert_non_null(mkdtemp(top));
    char p[PATH_MAX], root[PATH_MAX];
    af_error err;
    /* top/proj is a project; top/proj/a/b/c lies inside it; top/proj/a/b has a python/
     * directory (and a CMakeLists.txt) but no attnfuzz package: not a root */
    snprintf(p, sizeof p, "%s/proj/python/attnfuzz", top), make_dirs(p);
    snprintf(p, sizeof p, "%s/proj/python/attnfuzz/__init__.py", top), make_file(p, 0644);
    snprintf(p, sizeof p, "%s/proj/a/b/c", top), make_dirs(p);
    snprintf(p, sizeof p, "%s/proj/a/b/python/other", top), make_dirs(p);
    snprintf(p, sizeof p, "%s/proj/a/b/CMakeLists.txt", top), make_file(p, 0644);
    snprintf(p, sizeof p, "%s/elsewhere", top), make_dirs(p);
    char want[PATH_MAX];
    snprintf(want, sizeof want, "%s/proj", top);

    snprintf(p, sizeof p, "%s/proj/a/b/c", top);
    assert_int_equal(af_proc_root_from(p, root, sizeof root, &err), AF_OK);
    assert_string_equal(root, want);
    snprintf(p, sizeof p, "%s/proj/a/b/c//", top);
    assert_int_equal(af_proc_root_from(p, root, sizeof root, &err), AF_OK);
    assert_string_equal(root, want);
    assert_int_equal(af_proc_root_from(want, root, sizeof root, &err), AF_OK); /* start itself first */
    assert_string_equal(root, want);
    /* the nearest project wins */
    snprintf(p, sizeof p, "%s/proj/a/python/attnfuzz", top), make_dirs(p);
    snprintf(p, sizeof p, "%s/proj/a/python/attnfuzz/__init__.py", top), make_file(p, 0644);
    snprintf(p, sizeof p, "%s/proj/a/b/c", top);
    assert_int_equal(af_proc_root_from(p, root, sizeof root, &err), AF_OK);
    snprintf(want, sizeof want, "%s/proj/a", top);
    assert_string_equal(root, want);
    /* none above (assumes no /tmp/python/attnfuzz or /python/attnfuzz on this machine) */
    snprintf(p, sizeof p, "%s/elsewhere", top);
    assert_int_equal(af_proc_root_from(p, root, sizeof root, &err), AF_ERR_IO);
    assert_non_null(strstr(err.msg, "python/attnfuzz/__init__.py"));
    assert_int_equal(af_proc_root_from("relative/dir", root, sizeof root, &err), AF_ERR_INVALID);
    /* a root that does not fit the caller's buffer */
    char tiny[8];
    snprintf(p, sizeof p, "%s/proj/a/b", top);
    assert_int_equal(af_proc_root_from(p, tiny, sizeof tiny, &err), AF_ERR_INVALID);

    /* this test program lies in the build tree: when that is inside the source tree, the
     * root of the running executable is the source tree */
    const char *src = getenv("AF_SOURCE_DIR");
    char exe[PATH_MAX], srcreal[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (src && n > 0 && realpath(src, srcreal)) {
        exe[n] = 0;
        if (strncmp(exe, srcreal, strlen(srcreal)) == 0) {
            assert_int_equal(af_proc_root(root, sizeof root, &err), AF_OK);
            assert_string_equal(root, srcreal);
        }
        /* the source root recorded at configure time is that tree, and it still holds the
         * project; so a build out of the tree (neither the executable's directory nor the
         * current one inside a project) has the source tree as its root too */
        char rec[PATH_MAX], got[PATH_MAX];
        assert_non_null(realpath(af_proc_source_recorded(), rec));
        assert_string_equal(rec, srcreal);
        assert_int_equal(af_proc_source_root(root, sizeof root, &err), AF_OK);
        assert_string_equal(root, af_proc_source_recorded());
        char dir[PATH_MAX], cwd[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", exe);
        *strrchr(dir, '/') = 0;
        bool inside = af_proc_root_from(dir, got, sizeof got, NULL) == AF_OK ||
                      (getcwd(cwd, sizeof cwd) && af_proc_root_from(cwd, got, sizeof got, NULL) == AF_OK);
        assert_int_equal(af_proc_root(root, sizeof root, &err), AF_OK);
        if (!inside) assert_string_equal(root, af_proc_source_recorded());
    }

    /* the Python: the project's .venv when executable, else $ATTNFUZZ_PYTHON, else python3 */
    const char *saved = getenv("ATTNFUZZ_PYTHON");
    char saved_copy[PATH_MAX] = "";
    if (saved) snprintf(saved_copy, sizeof saved_copy, "%s", saved);
    af_proc_python py;
    snprintf(want, sizeof want, "%s/proj", top);
    unsetenv("ATTNFUZZ_PYTHON");
    assert_int_equal(af_proc_python_at(want, &py, &err), AF_OK);
    assert_string_equal(py.exe, "python3");
    assert_string_equal(py.root, want);
    snprintf(p, sizeof p, "%s/proj/python", top);
    assert_string_equal(py.pythonpath, p);
    setenv("ATTNFUZZ_PYTHON", "/opt/py/bin/python", 1);
    assert_int_equal(af_proc_python_at(want, &py, &err), AF_OK);
    assert_string_equal(py.exe, "/opt/py/bin/python");
    snprintf(p, sizeof p, "%s/proj/.venv/bin", top), make_dirs(p);
    snprintf(p, sizeof p, "%s/proj/.venv/bin/python", top), make_file(p, 0644); /* not executable: skipped */
    assert_int_equal(af_proc_python_at(want, &py, &err), AF_OK);
    assert_string_equal(py.exe, "/opt/py/bin/python");
    chmod(p, 0755);
    assert_int_equal(af_proc_python_at(want, &py, &err), AF_OK);
    assert_string_equal(py.exe, p);
    assert_int_equal(af_proc_python_at(NULL, &py, &err), AF_OK); /* no project */
    assert_string_equal(py.exe, "/opt/py/bin/python");
    assert_string_equal(py.root, "");
    assert_string_equal(py.pythonpath, "");
    setenv("ATTNFUZZ_PYTHON", "", 1); /* empty counts as unset */
    assert_int_equal(af_proc_python_at("", &py, &err), AF_OK);
    assert_string_equal(py.exe, "python3");
    if (saved)
        setenv("ATTNFUZZ_PYTHON", saved_copy, 1);
    else
        unsetenv("ATTNFUZZ_PYTHON");
    remove_tree(top);
}

/* The wheel's layout: <site-packages>/attnfuzz/bin/attnfuzz beside the package's
 * __init__.py is installed; a checkout's build directory, a bin/ elsewhere or a package of
 * another name are not. */
static void test_installed(void **state) {
    (void)state;
    char top[] = "/tmp/af_proc_XXXXXX";
    assert_non_null(mkdtemp(top));
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/site/attnfuzz/bin", top), make_dirs(p);
    snprintf(p, sizeof p, "%s/site/attnfuzz/__init__.py", top), make_file(p, 0644);
    snprintf(p, sizeof p, "%s/site/other/bin", top), make_dirs(p);
    snprintf(p, sizeof p, "%s/site/other/__init__.py", top), make_file(p, 0644);
    snprintf(p, sizeof p, "%s/site/xattnfuzz/bin", top), make_dirs(p);
    snprintf(p, sizeof p, "%s/site/xattnfuzz/__init__.py", top), make_file(p, 0644);
    snprintf(p, sizeof p, "%s/bare/attnfuzz/bin", top), make_dirs(p); /* no __init__.py */
    snprintf(p, sizeof p, "%s/proj/python/attnfuzz", top), make_dirs(p);
    snprintf(p, sizeof p, "%s/proj/python/attnfuzz/__init__.py", top), make_file(p, 0644);
    snprintf(p, sizeof p, "%s/proj/build", top), make_dirs(p);

    snprintf(p, sizeof p, "%s/site/attnfuzz/bin", top);
    assert_true(af_proc_installed_at(p));
    snprintf(p, sizeof p, "%s/site/attnfuzz/bin//", top);
    assert_true(af_proc_installed_at(p));
    snprintf(p, sizeof p, "%s/site/attnfuzz", top); /* the package itself is not its bin/ */
    assert_false(af_proc_installed_at(p));
    snprintf(p, sizeof p, "%s/site/other/bin", top);
    assert_false(af_proc_installed_at(p));
    snprintf(p, sizeof p, "%s/site/xattnfuzz/bin", top);
    assert_false(af_proc_installed_at(p));
    snprintf(p, sizeof p, "%s/bare/attnfuzz/bin", top);
    assert_false(af_proc_installed_at(p));
    snprintf(p, sizeof p, "%s/proj/build", top); /* a checkout: af_proc_root's business */
    assert_false(af_proc_installed_at(p));
    assert_false(af_proc_installed_at("attnfuzz/bin"));
    assert_false(af_proc_installed_at(""));
    assert_false(af_proc_installed_at(NULL));

    /* this test program is not installed: the project's Python is found as in a checkout */
    af_proc_python py;
    af_error err;
    assert_int_equal(af_proc_python_find(&py, &err), AF_OK);
    assert_false(py.installed);
    assert_int_equal(af_proc_package(p, sizeof p, &err), AF_ERR_IO);
    remove_tree(top);
}

/* --- the environment ------------------------------------------------------------------------ */

static size_t env_count(char *const *e) {
    size_t n = 0;
    while (e[n]) n++;
    return n;
}

static void test_env(void **state) {
    (void)state;
    char *base[] = {"A=1", "PYTHONPATH=/old:/older", "PYTHONPATHX=keep", "B=2", "PYTHONPATH=/dup", NULL};
    char *copy[6];
    memcpy(copy, base, sizeof base);
    char **e = NULL;
    af_error err;
    assert_int_equal(af_proc_env_prepend(base, "PYTHONPATH", "/proj/python", &e, &err), AF_OK);
    assert_int_equal(env_count(e), 4);
    assert_string_equal(e[0], "A=1");
    assert_string_equal(e[1], "PYTHONPATH=/proj/python:/old:/older");
    assert_string_equal(e[2], "PYTHONPATHX=keep");
    assert_string_equal(e[3], "B=2");
    assert_memory_equal(base, copy, sizeof base); /* the base is only read */
    assert_string_equal(base[1], "PYTHONPATH=/old:/older");
    af_free(e);

    char *none[] = {"A=1", NULL};
    assert_int_equal(af_proc_env_prepend(none, "PYTHONPATH", "/p", &e, &err), AF_OK);
    assert_int_equal(env_count(e), 2);
    assert_string_equal(e[0], "A=1");
    assert_string_equal(e[1], "PYTHONPATH=/p");
    af_free(e);

    char *empty_old[] = {"PYTHONPATH=", "Z=", NULL};
    assert_int_equal(af_proc_env_prepend(empty_old, "PYTHONPATH", "/p", &e, &err), AF_OK);
    assert_int_equal(env_count(e), 2);
    assert_string_equal(e[0], "PYTHONPATH=/p");
    assert_string_equal(e[1], "Z=");
    af_free(e);

    /* nothing to add: a plain copy, in its own storage */
    assert_int_equal(af_proc_env_prepend(base, "PYTHONPATH", "", &e, &err), AF_OK);
    assert_int_equal(env_count(e), 5);
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(e[i], base[i]);
        assert_ptr_not_equal(e[i], base[i]);
    }
    af_free(e);

    char *empty[] = {NULL};
    assert_int_equal(af_proc_env_prepend(empty, "PYTHONPATH", "/p", &e, &err), AF_OK);
    assert_int_equal(env_count(e), 1);
    assert_string_equal(e[0], "PYTHONPATH=/p");
    af_free(e);

    assert_int_equal(af_proc_env_prepend(base, "A=B", "/p", &e, &err), AF_ERR_INVALID);
    assert_null(e);
    assert_int_equal(af_proc_env_prepend(base, "", "/p", &e, &err), AF_ERR_INVALID);

    /* this process's environment: PYTHONPATH of the copy changes, ours does not */
    const char *ours = getenv("PYTHONPATH");
    char ours_copy[PATH_MAX] = "";
    if (ours) snprintf(ours_copy, sizeof ours_copy, "%s", ours);
    af_proc_python py;
    memset(&py, 0, sizeof py);
    snprintf(py.pythonpath, sizeof py.pythonpath, "/x/python");
    assert_int_equal(af_proc_python_env(&py, &e, &err), AF_OK);
    size_t hits = 0;
    for (size_t i = 0; e[i]; i++)
        if (strncmp(e[i], "PYTHONPATH=", 11) == 0) {
            hits++;
            assert_true(strncmp(e[i], "PYTHONPATH=/x/python", 20) == 0);
            if (ours && ours[0]) {
                assert_int_equal(e[i][20], ':');
                assert_string_equal(e[i] + 21, ours_copy);
            } else {
                assert_int_equal(e[i][20], 0);
            }
        }
    assert_int_equal(hits, 1);
    assert_int_equal(env_count(e), env_count(environ) + (ours ? 0 : 1));
    if (ours)
        assert_string_equal(getenv("PYTHONPATH"), ours_copy);
    else
        assert_null(getenv("PYTHONPATH"));
    af_free(e);
}

/* --- children ------------------------------------------------------------------------------ */

static void test_capture(void **state) {
    (void)state;
    char obuf[64], ebuf[64];
    af_proc_buf out = {obuf, sizeof obuf, 0, false}, errout = {ebuf, sizeof ebuf, 0, false};
    int ws = -1;
    af_error err;
    char *sh[] = {"/bin/sh", "-c", "printf 'hello\\n'; printf oops >&2; exit 3", NULL};
    assert_int_equal(af_proc_capture(sh, NULL, 10.0, &out, &errout, &ws, &err), AF_OK);
    assert_string_equal(obuf, "hello\n");
    assert_int_equal(out.len, 6);
    assert_false(out.truncated);
    assert_string_equal(ebuf, "oops");
    assert_true(WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 3);
    char how[128];
    af_proc_describe(ws, how, sizeof how);
    assert_string_equal(how, "exited with status 3");

    /* more than fits: the first cap - 1 bytes kept, the rest read (the child never blocks) */
    char small[5];
    af_proc_buf sb = {small, sizeof small, 0, false};
    char *big[] = {"/bin/sh", "-c", "printf 0123456789; head -c 1000000 /dev/zero", NULL};
    assert_int_equal(af_proc_capture(big, NULL, 20.0, &sb, NULL, &ws, &err), AF_OK);
    assert_string_equal(small, "0123");
    assert_int_equal(sb.len, 4);
    assert_true(sb.truncated);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);

    /* the environment given is the child's */
    char *base[] = {"PYTHONPATH=/old", "PATH=/usr/bin:/bin", NULL};
    char **env = NULL;
    assert_int_equal(af_proc_env_prepend(base, "PYTHONPATH", "/new", &env, &err), AF_OK);
    char *show[] = {"/bin/sh", "-c", "printf '%s|%s' \"$PYTHONPATH\" \"${HOME-unset}\"", NULL};
    assert_int_equal(af_proc_capture(show, env, 10.0, &out, NULL, &ws, &err), AF_OK);
    assert_string_equal(obuf, "/new:/old|unset");
    af_free(env);

    /* a program that cannot be run is an error value, not a child that exits 127 */
    char *missing[] = {"/nonexistent/af-no-such-program", NULL};
    assert_int_equal(af_proc_capture(missing, NULL, 10.0, &out, NULL, &ws, &err), AF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "cannot run /nonexistent/af-no-such-program"));
    char *on_path[] = {"af-no-such-program-on-path", NULL};
    assert_int_equal(af_proc_capture(on_path, NULL, 10.0, &out, NULL, &ws, &err), AF_ERR_INVALID);

    /* a signal ends it: described */
    char *killed[] = {"/bin/sh", "-c", "kill -9 $$", NULL};
    assert_int_equal(af_proc_capture(killed, NULL, 10.0, &out, NULL, &ws, &err), AF_OK);
    assert_true(WIFSIGNALED(ws));
    af_proc_describe(ws, how, sizeof how);
    assert_non_null(strstr(how, "was killed by signal 9"));
}

/* Is process pid gone (no such process, or a zombie nobody reaped yet)? */
static bool process_gone(pid_t pid) {
    char path[64], stat[256] = "";
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return true;
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = 0;
    const char *paren = strrchr(stat, ')');
    return !paren || paren[1] == 0 || paren[2] == 'Z' || paren[2] == 'X';
}

/* A child that ends at once but leaves a process behind in its group: the capture ends
 * with the child, and the leftover is killed with its group. */
static void test_capture_leftover(void **state) {
    (void)state;
    char obuf[64];
    af_proc_buf out = {obuf, sizeof obuf, 0, false};
    int ws = -1;
    af_error err;
    char *sh[] = {"/bin/sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!", NULL};
    double t0 = af_now();
    assert_int_equal(af_proc_capture(sh, NULL, 20.0, &out, NULL, &ws, &err), AF_OK);
    assert_true(af_now() - t0 < 10.0);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    long leftover = strtol(obuf, NULL, 10);
    assert_true(leftover > 1);
    bool gone = false;
    for (int i = 0; i < 200 && !gone; i++) {
        gone = process_gone((pid_t)leftover);
        if (!gone) usleep(10000);
    }
    assert_true(gone);
}

static void test_capture_timeout(void **state) {
    (void)state;
    char obuf[64];
    af_proc_buf out = {obuf, sizeof obuf, 0, false};
    int ws = -1;
    af_error err;
    /* the shell starts a sleep of its own and waits: both must go at the deadline */
    char *sh[] = {"/bin/sh", "-c", "sleep 30 & echo $!; wait", NULL};
    double t0 = af_now();
    assert_int_equal(af_proc_capture(sh, NULL, 0.5, &out, NULL, &ws, &err), AF_ERR_TIMEOUT);
    double took = af_now() - t0;
    assert_true(took >= 0.45 && took < 5.0);
    assert_non_null(strstr(err.msg, "did not finish within 0.5 s"));
    long grandchild = strtol(obuf, NULL, 10); /* what it wrote before the deadline stays */
    assert_true(grandchild > 1);
    bool gone = false;
    for (int i = 0; i < 200 && !gone; i++) {
        gone = process_gone((pid_t)grandchild);
        if (!gone) usleep(10000);
    }
    assert_true(gone);
}

static void test_spawn(void **state) {
    (void)state;
    af_error err;
    /* the child starts with an empty signal mask and SIGPIPE at its default, whatever we
     * block or ignore; read from its own /proc status, no shell in between */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGUSR1);
    sigprocmask(SIG_BLOCK, &block, &old);
    void (*old_pipe)(int) = signal(SIGPIPE, SIG_IGN);
    char obuf[4096];
    af_proc_buf out = {obuf, sizeof obuf, 0, false};
    int ws;
    char *cat[] = {"/bin/cat", "/proc/self/status", NULL};
    af_status st = af_proc_capture(cat, NULL, 10.0, &out, NULL, &ws, &err);
    signal(SIGPIPE, old_pipe);
    sigprocmask(SIG_SETMASK, &old, NULL);
    assert_int_equal(st, AF_OK);
    const char *blk = strstr(obuf, "SigBlk:"), *ign = strstr(obuf, "SigIgn:");
    assert_non_null(blk);
    assert_non_null(ign);
    assert_int_equal(strtoull(blk + 7, NULL, 16), 0);
    assert_int_equal(strtoull(ign + 7, NULL, 16) & (1ull << (SIGPIPE - 1)), 0);

    /* stderr into a file; stdin and stdout from /dev/null */
    char errpath[] = "/tmp/af_proc_err_XXXXXX";
    int fd = mkstemp(errpath);
    assert_true(fd >= 0);
    close(fd);
    af_proc_opts o;
    af_proc_opts_init(&o);
    o.fd[0] = o.fd[1] = AF_PROC_DEVNULL;
    o.err_path = errpath;
    char *sh[] = {"/bin/sh", "-c", "cat; echo to-stderr >&2; echo to-stdout", NULL};
    pid_t pid;
    assert_int_equal(af_proc_spawn(sh, &o, &pid, &err), AF_OK);
    assert_int_equal(af_proc_wait(pid, &ws, &err), AF_OK);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    char text[64] = "";
    FILE *f = fopen(errpath, "r");
    assert_non_null(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    assert_string_equal(text, "to-stderr\n");
    unlink(errpath);
    o.err_path = "/nonexistent-dir/err.txt";
    assert_int_equal(af_proc_spawn(sh, &o, &pid, &err), AF_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/err.txt"));

    /* a new process group: the child leads it; af_proc_kill ends and reaps it */
    int in[2];
    assert_int_equal(pipe2(in, O_CLOEXEC), 0);
    af_proc_opts_init(&o);
    o.fd[0] = in[0];
    o.new_group = true;
    char *wait_in[] = {"/bin/sh", "-c", "read x; sleep 30", NULL};
    assert_int_equal(af_proc_spawn(wait_in, &o, &pid, &err), AF_OK);
    close(in[0]);
    assert_int_equal(getpgid(pid), pid);
    assert_int_not_equal(getpgid(0), pid);
    assert_false(af_proc_ended(pid));
    af_proc_kill(pid, true, &ws);
    assert_true(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
    assert_int_equal(waitpid(pid, NULL, WNOHANG), -1); /* reaped already */
    assert_int_equal(errno, ECHILD);
    close(in[1]);
    /* a child that ended stays unreaped until killed or waited for, and keeps its status */
    char *five[] = {"/bin/sh", "-c", "exit 5", NULL};
    af_proc_opts_init(&o);
    o.new_group = true;
    assert_int_equal(af_proc_spawn(five, &o, &pid, &err), AF_OK);
    bool ended = false;
    for (int i = 0; i < 500 && !ended; i++) {
        ended = af_proc_ended(pid);
        if (!ended) usleep(2000);
    }
    assert_true(ended);
    assert_true(af_proc_ended(pid)); /* still there: not reaped */
    af_proc_kill(pid, true, &ws);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 5);

    char *none[] = {NULL};
    assert_int_equal(af_proc_spawn(none, &o, &pid, &err), AF_ERR_INVALID);
    af_proc_describe(9, text, sizeof text); /* wait status of a SIGKILL */
    assert_string_equal(text, "was killed by signal 9 (Killed)");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split),   cmocka_unit_test(test_root),
        cmocka_unit_test(test_installed),
        cmocka_unit_test(test_env),     cmocka_unit_test(test_capture),
        cmocka_unit_test(test_capture_leftover), cmocka_unit_test(test_capture_timeout),
        cmocka_unit_test(test_spawn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
