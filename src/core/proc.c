/* proc.c - external processes: words of a command line, the project root and its Python,
 * a child's environment, posix_spawn without a shell, and capturing a command's output
 * within a deadline (see proc.h).
 *
 * Children start through posix_spawnp rather than fork + exec: the child is created
 * without copying our address space (a campaign may hold gigabytes), it needs no code of
 * ours between fork and exec (which would have to be async-signal-safe), and a program
 * that cannot be run is reported here, as an error value, instead of by a child that
 * exits 127. */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attnfuzz/mem.h"
#include "clock.h"

extern char **environ;

/* --- words ----------------------------------------------------------------------------- */

static bool af_proc_blank(char ch) { return ch == ' ' || ch == '\t' || ch == '\n'; }

af_status af_proc_split(const char *s, char ***argv_out, af_error *err) {
    *argv_out = NULL;
    size_t n = strlen(s);
    /* words: at most (n + 1) / 2 (each takes a character and a blank after it); text: a
     * word never grows (quotes and backslashes only go), so n bytes and a NUL per word */
    size_t nptr = n / 2 + 2;
    size_t bytes = nptr * sizeof(char *) + 2 * n + 2;
    char **argv = af_malloc(bytes);
    AF_RETURN_ERROR_IF(!argv, err, AF_ERR_NOMEM, "out of memory");
    memset(argv, 0, nptr * sizeof(char *));
    char *buf = (char *)(argv + nptr);
    size_t argc = 0, o = 0;
    const char *p = s;
    for (;;) {
        while (af_proc_blank(*p)) p++;
        if (!*p) break;
        argv[argc++] = buf + o;
        while (*p && !af_proc_blank(*p)) {
            if (*p == '\'') {
                const char *q = strchr(p + 1, '\'');
                if (!q) goto unbalanced;
                memcpy(buf + o, p + 1, (size_t)(q - p - 1));
                o += (size_t)(q - p - 1);
                p = q + 1;
            } else if (*p == '"') {
                p++;
                while (*p && *p != '"') {
                    if (*p == '\\' && p[1] && strchr("\"\\$`", p[1])) p++;
                    buf[o++] = *p++;
                }
                if (*p != '"') goto unbalanced;
                p++;
            } else if (*p == '\\' && p[1]) {
                buf[o++] = p[1];
                p += 2;
            } else {
                buf[o++] = *p++;
            }
        }
        buf[o++] = 0;
    }
    if (argc == 0) {
        af_free(argv);
        return af_error_set(err, AF_ERR_INVALID, "empty command");
    }
    *argv_out = argv;
    return AF_OK;
unbalanced:
    af_free(argv);
    return af_error_set(err, AF_ERR_INVALID, "unbalanced quotes");
}

/* --- the project and its Python ---------------------------------------------------------- */

/* Copies s into buf of len bytes; false when it does not fit. */
static bool af_proc_copy(char *buf, size_t len, const char *s) {
    size_t n = strlen(s);
    if (n >= len) return false;
    memcpy(buf, s, n + 1);
    return true;
}

af_status af_proc_root_from(const char *start, char *root, size_t len, af_error *err) {
    static const char probe[] = "/python/attnfuzz/__init__.py";
    char dir[AF_PROC_PATH_MAX + sizeof probe];
    AF_RETURN_ERROR_IF(!start || start[0] != '/', err, AF_ERR_INVALID, "%s: not an absolute directory",
                       start ? start : "(null)");
    size_t n = strlen(start);
    AF_RETURN_ERROR_IF(n >= AF_PROC_PATH_MAX, err, AF_ERR_INVALID, "%.64s...: path too long", start);
    memcpy(dir, start, n + 1);
    while (n > 1 && dir[n - 1] == '/') dir[--n] = 0;
    for (;;) {
        /* "/" probes "/python/...", anything else "<dir>/python/..." */
        memcpy(dir + (n == 1 ? 0 : n), probe, sizeof probe);
        bool found = access(dir, R_OK) == 0;
        dir[n] = 0;
        if (found) {
            AF_RETURN_ERROR_IF(!af_proc_copy(root, len, dir), err, AF_ERR_INVALID, "%.64s...: path too long", dir);
            return AF_OK;
        }
        if (n == 1) break;
        char *slash = strrchr(dir, '/');
        n = slash == dir ? 1 : (size_t)(slash - dir);
        dir[n] = 0;
    }
    return af_error_set(err, AF_ERR_IO, "no python/attnfuzz/__init__.py in %s or a directory above it", start);
}

/* The directory of this executable (/proc/self/exe; "/" for a program in the root) into
 * dir of len bytes; false when it does not read or fit. */
static bool af_proc_exe_dir(char *dir, size_t len) {
    ssize_t n = readlink("/proc/self/exe", dir, len - 1);
    if (n <= 0 || (size_t)n >= len - 1) return false;
    dir[n] = 0;
    char *slash = strrchr(dir, '/');
    if (!slash) return false;
    *(slash == dir ? slash + 1 : slash) = 0;
    return true;
}

/* The source tree CMakeLists.txt configured this build from (a compile definition of this
 * file alone); none in a wheel build, whose binary finds its package instead. */
#ifndef AF_SOURCE_ROOT
#define AF_SOURCE_ROOT ""
#endif

const char *af_proc_source_recorded(void) { return AF_SOURCE_ROOT; }

af_status af_proc_source_root(char *root, size_t len, af_error *err) {
    static const char probe[] = "/python/attnfuzz/__init__.py";
    const char *src = af_proc_source_recorded();
    char path[AF_PROC_PATH_MAX + sizeof probe];
    AF_RETURN_ERROR_IF(!src[0], err, AF_ERR_IO, "this build recorded no source root");
    AF_RETURN_ERROR_IF(strlen(src) >= AF_PROC_PATH_MAX, err, AF_ERR_INVALID, "%.64s...: path too long", src);
    snprintf(path, sizeof path, "%s%s", src, probe);
    AF_RETURN_ERROR_IF(access(path, R_OK) != 0, err, AF_ERR_IO, "the source root %.200s no longer holds %s", src,
                       probe + 1);
    AF_RETURN_ERROR_IF(!af_proc_copy(root, len, src), err, AF_ERR_INVALID, "%.64s...: path too long", src);
    return AF_OK;
}

af_status af_proc_root(char *root, size_t len, af_error *err) {
    char exe[AF_PROC_PATH_MAX] = "?", cwd[AF_PROC_PATH_MAX] = "?";
    bool have_exe = af_proc_exe_dir(exe, sizeof exe);
    if (have_exe && af_proc_root_from(exe, root, len, NULL) == AF_OK) return AF_OK;
    if (getcwd(cwd, sizeof cwd) && af_proc_root_from(cwd, root, len, NULL) == AF_OK) return AF_OK;
    /* built out of tree (cmake -S SRC -B ../out) and run from there: the tree it came from */
    if (af_proc_source_root(root, len, NULL) == AF_OK) return AF_OK;
    const char *src = af_proc_source_recorded();
    return af_error_set(err, AF_ERR_IO,
                        "no python/attnfuzz/__init__.py in the executable's directory (%.200s), the current "
                        "directory (%.200s) or a directory above them, nor in the source root it was built from "
                        "(%.200s)",
                        have_exe ? exe : "?", cwd, src[0] ? src : "none recorded");
}

bool af_proc_installed_at(const char *dir) {
    static const char tail[] = "/attnfuzz/bin", init[] = "/__init__.py";
    char path[AF_PROC_PATH_MAX + sizeof init];
    size_t n = dir ? strlen(dir) : 0;
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t t = sizeof tail - 1;
    if (n < t || n >= AF_PROC_PATH_MAX || memcmp(dir + n - t, tail, t) != 0) return false;
    /* <package>/__init__.py, <package> being dir without its "/bin" */
    size_t pkg = n - (sizeof "/bin" - 1);
    memcpy(path, dir, pkg);
    memcpy(path + pkg, init, sizeof init);
    return access(path, R_OK) == 0;
}

af_status af_proc_python_at(const char *root, af_proc_python *py, af_error *err) {
    memset(py, 0, sizeof *py);
    if (root && root[0]) {
        int a = snprintf(py->root, sizeof py->root, "%s", root);
        int b = snprintf(py->pythonpath, sizeof py->pythonpath, "%s/python", root);
        int c = snprintf(py->exe, sizeof py->exe, "%s/.venv/bin/python", root);
        AF_RETURN_ERROR_IF(a < 0 || b < 0 || c < 0 || (size_t)c >= sizeof py->exe, err, AF_ERR_INVALID,
                           "%.64s...: path too long", root);
        if (access(py->exe, X_OK) == 0) return AF_OK;
    }
    const char *env = getenv("ATTNFUZZ_PYTHON");
    if (!env || !env[0]) env = "python3";
    AF_RETURN_ERROR_IF(!af_proc_copy(py->exe, sizeof py->exe, env), err, AF_ERR_INVALID,
                       "$ATTNFUZZ_PYTHON: path too long");
    return AF_OK;
}

af_status af_proc_package(char *dir, size_t len, af_error *err) {
    char exe[AF_PROC_PATH_MAX];
    AF_RETURN_ERROR_IF(!af_proc_exe_dir(exe, sizeof exe) || !af_proc_installed_at(exe), err, AF_ERR_IO,
                       "this attnfuzz was not installed from the wheel");
    size_t n = strlen(exe);
    while (n > 1 && exe[n - 1] == '/') n--;
    n -= sizeof "/bin" - 1; /* af_proc_installed_at saw ".../attnfuzz/bin" */
    AF_RETURN_ERROR_IF(n >= len, err, AF_ERR_INVALID, "%.64s...: path too long", exe);
    memcpy(dir, exe, n);
    dir[n] = 0;
    return AF_OK;
}

af_status af_proc_python_find(af_proc_python *py, af_error *err) {
    char dir[AF_PROC_PATH_MAX];
    if (af_proc_package(dir, sizeof dir, NULL) == AF_OK) {
        /* installed from the wheel: the environment's interpreter imports the package; a
         * checkout around the current directory has nothing to do with it */
        AF_TRY(af_proc_python_at(NULL, py, err));
        py->installed = true;
        return AF_OK;
    }
    char root[AF_PROC_PATH_MAX];
    if (af_proc_root(root, sizeof root, NULL) != AF_OK) root[0] = 0;
    return af_proc_python_at(root, py, err);
}

/* --- the environment ------------------------------------------------------------------------ */

af_status af_proc_env_prepend(char *const *env, const char *name, const char *value, char ***out, af_error *err) {
    *out = NULL;
    size_t nlen = strlen(name);
    AF_RETURN_ERROR_IF(nlen == 0 || strchr(name, '='), err, AF_ERR_INVALID, "\"%s\": not a variable name", name);
    bool set = value && value[0];
    size_t n = 0, text = 0;
    const char *old = NULL;
    for (; env[n]; n++) {
        text += strlen(env[n]) + 1;
        if (!old && strncmp(env[n], name, nlen) == 0 && env[n][nlen] == '=') old = env[n] + nlen + 1;
    }
    if (set) text += nlen + 1 + strlen(value) + (old && old[0] ? 1 + strlen(old) : 0) + 1;
    size_t nptr = n + 2;
    char **e = af_malloc(nptr * sizeof(char *) + text);
    AF_RETURN_ERROR_IF(!e, err, AF_ERR_NOMEM, "out of memory");
    char *t = (char *)(e + nptr);
    size_t k = 0;
    bool placed = false;
    for (size_t i = 0; i < n; i++) {
        bool match = strncmp(env[i], name, nlen) == 0 && env[i][nlen] == '=';
        if (set && match) {
            if (placed) continue; /* a duplicate: the variable has one value now */
            placed = true;
            e[k++] = t;
            t += sprintf(t, "%s=%s%s%s", name, value, old && old[0] ? ":" : "", old && old[0] ? old : "") + 1;
            continue;
        }
        size_t len = strlen(env[i]) + 1;
        memcpy(t, env[i], len);
        e[k++] = t;
        t += len;
    }
    if (set && !placed) {
        e[k++] = t;
        sprintf(t, "%s=%s", name, value);
    }
    e[k] = NULL;
    *out = e;
    return AF_OK;
}

af_status af_proc_python_env(const af_proc_python *py, char ***out, af_error *err) {
    return af_proc_env_prepend(environ, "PYTHONPATH", py->pythonpath, out, err);
}

/* --- children ------------------------------------------------------------------------------ */

void af_proc_opts_init(af_proc_opts *o) {
    memset(o, 0, sizeof *o);
    o->fd[0] = o->fd[1] = o->fd[2] = AF_PROC_INHERIT;
}

/* errno values of exec that say the program cannot be run, as opposed to the system
 * running out of something. */
static bool af_proc_not_runnable(int e) {
    return e == ENOENT || e == EACCES || e == ENOEXEC || e == ENOTDIR || e == ELOOP || e == ENAMETOOLONG ||
           e == EISDIR || e == EPERM || e == ETXTBSY || e == ELIBBAD;
}

af_status af_proc_spawn(char *const *argv, const af_proc_opts *o, pid_t *pid, af_error *err) {
    *pid = 0;
    AF_RETURN_ERROR_IF(!argv || !argv[0] || !argv[0][0], err, AF_ERR_INVALID, "no program to run");
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    int rc = posix_spawn_file_actions_init(&fa);
    AF_RETURN_ERROR_IF(rc != 0, err, AF_ERR_IO, "%s: cannot start: %s", argv[0], strerror(rc));
    rc = posix_spawnattr_init(&at);
    if (rc != 0) {
        posix_spawn_file_actions_destroy(&fa);
        return af_error_set(err, AF_ERR_IO, "%s: cannot start: %s", argv[0], strerror(rc));
    }
    /* stderr to a file: opened here, so that a path that cannot be opened is told apart
     * from a program that cannot be run */
    int errfd = -1;
    if (o->err_path) {
        errfd = open(o->err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (errfd < 0) {
            int e = errno;
            posix_spawnattr_destroy(&at);
            posix_spawn_file_actions_destroy(&fa);
            return af_error_set(err, AF_ERR_IO, "%s: cannot open %s for its stderr: %s", argv[0], o->err_path,
                                strerror(e));
        }
    }
    /* A descriptor of ours that is itself 0, 1 or 2 but goes elsewhere in the child would
     * be overwritten by an earlier dup2: it is moved out of the way first. */
    int want[3] = {o->fd[0], o->fd[1], errfd >= 0 ? errfd : o->fd[2]};
    int moved[3] = {-1, -1, -1};
    for (int k = 0; k < 3 && rc == 0; k++) {
        if (want[k] >= 0 && want[k] < 3 && want[k] != k) {
            moved[k] = fcntl(want[k], F_DUPFD_CLOEXEC, 3);
            if (moved[k] < 0) rc = errno;
        }
    }
    for (int k = 0; k < 3 && rc == 0; k++) {
        int fd = moved[k] >= 0 ? moved[k] : want[k];
        if (fd == AF_PROC_DEVNULL) {
            rc = posix_spawn_file_actions_addopen(&fa, k, "/dev/null", k == 0 ? O_RDONLY : O_WRONLY, 0);
        } else if (fd >= 0) {
            rc = posix_spawn_file_actions_adddup2(&fa, fd, k); /* clears close-on-exec, even for fd == k */
        }
    }
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE); /* a worker that writes to a closed pipe should die of it, as usual */
    short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
    if (o->new_group) flags |= POSIX_SPAWN_SETPGROUP;
    if (rc == 0) rc = posix_spawnattr_setsigmask(&at, &none);
    if (rc == 0) rc = posix_spawnattr_setsigdefault(&at, &dfl);
    if (rc == 0 && o->new_group) rc = posix_spawnattr_setpgroup(&at, 0);
    if (rc == 0) rc = posix_spawnattr_setflags(&at, flags);
    af_status st = AF_OK;
    if (rc != 0) {
        st = af_error_set(err, AF_ERR_IO, "%s: cannot start: %s", argv[0], strerror(rc));
    } else {
        rc = posix_spawnp(pid, argv[0], &fa, &at, argv, o->envp ? o->envp : environ);
        if (rc != 0) {
            *pid = 0;
            st = af_error_set(err, af_proc_not_runnable(rc) ? AF_ERR_INVALID : AF_ERR_IO, "cannot run %s: %s",
                              argv[0], strerror(rc));
        }
    }
    for (int k = 0; k < 3; k++)
        if (moved[k] >= 0) close(moved[k]);
    if (errfd >= 0) close(errfd);
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
    return st;
}

af_status af_proc_wait(pid_t pid, int *wstatus, af_error *err) {
    for (;;) {
        if (waitpid(pid, wstatus, 0) == pid) return AF_OK;
        if (errno != EINTR)
            return af_error_set(err, AF_ERR_IO, "waiting for process %d: %s", (int)pid, strerror(errno));
    }
}

bool af_proc_ended(pid_t pid) {
    siginfo_t si;
    si.si_pid = 0;
    for (;;) {
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0) return si.si_pid == pid;
        if (errno != EINTR) return false;
    }
}

void af_proc_kill(pid_t pid, bool group, int *wstatus) {
    if (pid <= 0) return;
    if (group) kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    int ws = SIGKILL; /* as waitpid reports a death by SIGKILL */
    double end = af_now() + AF_PROC_KILL_WAIT, nap = 1e-4;
    for (;;) {
        pid_t r = waitpid(pid, &ws, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR)) break;
        if (r == 0 && af_now() >= end) {
            ws = SIGKILL;
            fprintf(stderr, "attnfuzz: process %d has not ended %.0f s after SIGKILL; left behind\n", (int)pid,
                    AF_PROC_KILL_WAIT);
            break;
        }
        if (r == 0) {
            struct timespec ts = {0, (long)(nap * 1e9)};
            nanosleep(&ts, NULL);
            nap = fmin(nap * 2.0, 0.01);
        }
    }
    if (wstatus) *wstatus = ws;
}

void af_proc_describe(int wstatus, char *buf, size_t len) {
    if (WIFEXITED(wstatus)) {
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(wstatus));
    } else if (WIFSIGNALED(wstatus)) {
        snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)));
    } else {
        snprintf(buf, len, "ended (wait status %d)", wstatus);
    }
}

/* --- running a command for its output --------------------------------------------------------- */

/* Reads what fd holds now into b (the excess dropped); false at end of file or on error. */
static bool af_proc_drain(int fd, af_proc_buf *b) {
    char chunk[4096];
    for (;;) {
        ssize_t r = read(fd, chunk, sizeof chunk);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
        if (r == 0) return false;
        size_t room = b && b->data && b->cap > b->len + 1 ? b->cap - b->len - 1 : 0;
        size_t take = (size_t)r < room ? (size_t)r : room;
        if (take) memcpy(b->data + b->len, chunk, take);
        if (b) {
            b->len += take;
            if (b->data && b->cap) b->data[b->len] = 0;
            b->truncated |= take < (size_t)r;
        }
    }
}

af_status af_proc_capture(char *const *argv, char *const *envp, double timeout, af_proc_buf *out,
                          af_proc_buf *errout, int *wstatus, af_error *err) {
    af_proc_buf *bufs[2] = {out, errout};
    for (int k = 0; k < 2; k++)
        if (bufs[k]) {
            bufs[k]->len = 0;
            bufs[k]->truncated = false;
            if (bufs[k]->data && bufs[k]->cap) bufs[k]->data[0] = 0;
        }
    *wstatus = 0;
    int fds[2][2] = {{-1, -1}, {-1, -1}}; /* stdout, stderr pipes: read end, write end */
    for (int k = 0; k < (errout ? 2 : 1); k++) {
        if (pipe2(fds[k], O_CLOEXEC) != 0) {
            int e = errno;
            for (int j = 0; j < k; j++) close(fds[j][0]), close(fds[j][1]);
            return af_error_set(err, AF_ERR_IO, "%s: pipe: %s", argv[0], strerror(e));
        }
    }
    af_proc_opts o;
    af_proc_opts_init(&o);
    o.fd[0] = AF_PROC_DEVNULL;
    o.fd[1] = fds[0][1];
    o.fd[2] = errout ? fds[1][1] : AF_PROC_DEVNULL;
    o.envp = envp;
    o.new_group = true; /* a timeout kills what it started too */
    pid_t pid;
    af_status st = af_proc_spawn(argv, &o, &pid, err);
    for (int k = 0; k < 2; k++)
        if (fds[k][1] >= 0) close(fds[k][1]);
    if (st != AF_OK) {
        for (int k = 0; k < 2; k++)
            if (fds[k][0] >= 0) close(fds[k][0]);
        return st;
    }
    int open_fds[2] = {fds[0][0], fds[1][0]};
    for (int k = 0; k < 2; k++)
        if (open_fds[k] >= 0) fcntl(open_fds[k], F_SETFL, fcntl(open_fds[k], F_GETFL) | O_NONBLOCK);
    double deadline = af_now() + timeout;
    bool ended = false; /* it exited (not yet reaped) */
    for (;;) {
        /* 1. once both pipes are closed and the child has ended: done; 2. or time out; 3. read what came */
        if (open_fds[0] < 0 && open_fds[1] < 0 && af_proc_ended(pid)) {
            ended = true;
            break;
        }
        double left = deadline - af_now();
        if (left <= 0) {
            st = af_error_set(err, AF_ERR_TIMEOUT, "%s did not finish within %g s (killed)", argv[0], timeout);
            break;
        }
        struct pollfd pf[2];
        int np = 0, which[2];
        for (int k = 0; k < 2; k++)
            if (open_fds[k] >= 0) pf[np] = (struct pollfd){open_fds[k], POLLIN, 0}, which[np++] = k;
        if (np == 0) {
            /* both closed, the child still running: look again shortly */
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
            continue;
        }
        int ms = left > 1e6 ? 1000000000 : (int)ceil(left * 1000.0);
        if (poll(pf, (nfds_t)np, ms) < 0) {
            if (errno == EINTR) continue;
            st = af_error_set(err, AF_ERR_IO, "poll: %s", strerror(errno));
            break;
        }
        for (int i = 0; i < np; i++) {
            int k = which[i];
            if (pf[i].revents && !af_proc_drain(open_fds[k], bufs[k])) {
                close(open_fds[k]);
                open_fds[k] = -1;
            }
        }
    }
    for (int k = 0; k < 2; k++)
        if (open_fds[k] >= 0) close(open_fds[k]);
    /* what it left behind in its group goes too; its own status is kept when it had ended */
    af_proc_kill(pid, true, wstatus);
    return ended ? AF_OK : st;
}
