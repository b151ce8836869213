/* proc.h - external processes (library-internal; the CLI uses it too): the project's root
 * and its Python, a child's environment, starting a program without a shell, and running
 * one to capture its output within a deadline.
 *
 * No shell runs anything here: a command line is split into words by af_proc_split and
 * the words are executed as they are (posix_spawnp; a name without '/' is looked up on
 * PATH). Nothing here changes this process's environment or signal state. Every fallible
 * function returns an af_status with its message in a caller-owned af_error (which may be
 * NULL); memory comes from af_malloc and is freed with af_free. */
#ifndef ATTNFUZZ_PROC_H
#define ATTNFUZZ_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "attnfuzz/status.h"

#define AF_PROC_PATH_MAX 4096 /* longest path kept (root, interpreter, PYTHONPATH entry) */

/* --- words ----------------------------------------------------------------------------- */

/* Splits the command line s into words the way a POSIX shell splits them, with no
 * expansion of any kind: blanks (space, tab, newline) separate words; '...' keeps every
 * character literally; "..." keeps every character except that a backslash before " \ $
 * or ` stands for that character; outside quotes a backslash keeps the next character
 * (a trailing backslash is itself). Quoted parts join the word they touch (a'b'"c" is
 * abc; '' is an empty word).
 * *argv: NULL-terminated, one af_malloc'ed block (pointers and text): af_free(*argv).
 * AF_ERR_INVALID "empty command" when s holds no word, "unbalanced quotes" when a quote
 * is not closed (*argv is then NULL); AF_ERR_NOMEM. */
af_status af_proc_split(const char *s, char ***argv, af_error *err);

/* --- the project and its Python ---------------------------------------------------------- */

/* The project root: the first of start and its ancestors (start itself first, then up to
 * "/") that holds python/attnfuzz/__init__.py. start must be an absolute path (else
 * AF_ERR_INVALID); symbolic links are not resolved (start's own spelling is walked). root
 * receives the directory (len bytes with its NUL; AF_ERR_INVALID when it does not fit).
 * AF_ERR_IO when no such directory exists. */
af_status af_proc_root_from(const char *start, char *root, size_t len, af_error *err);

/* The root of the running attnfuzz: af_proc_root_from the directory of this executable
 * (/proc/self/exe), else from the current directory, else the source root this build was
 * configured from (af_proc_source_root: a build out of the tree, `cmake -S . -B ../out`,
 * run from its own directory). AF_ERR_IO when none has one. */
af_status af_proc_root(char *root, size_t len, af_error *err);

/* The source tree CMakeLists.txt recorded at configure time ("" when none: a wheel build). */
const char *af_proc_source_recorded(void);
/* That source tree, when it still holds python/attnfuzz/__init__.py (a project root).
 * AF_ERR_IO when none was recorded or it is gone or moved; AF_ERR_INVALID when it does not
 * fit len. */
af_status af_proc_source_root(char *root, size_t len, af_error *err);

/* Is dir (an executable's directory, as /proc/self/exe spells it) the bin/ folder of an
 * installed attnfuzz Python package: ".../attnfuzz/bin" (trailing slashes aside) whose
 * parent holds __init__.py? That is where the wheel (pyproject.toml) puts the binary, in
 * site-packages, with the package it runs as workers. */
bool af_proc_installed_at(const char *dir);

/* The package directory (<site-packages>/attnfuzz) of this executable when it was installed
 * from the wheel (its directory passes af_proc_installed_at): the data the wheel ships
 * lies there as it lies under a project root (corpus/findings/STACK/known.json). dir gets
 * len bytes with the NUL (AF_ERR_INVALID when it does not fit); AF_ERR_IO when this
 * executable is not installed so. */
af_status af_proc_package(char *dir, size_t len, af_error *err);

/* The Python that runs the project's code (target: workers, `python -m attnfuzz.repro`,
 * the listing of targets). */
typedef struct af_proc_python {
    char root[AF_PROC_PATH_MAX];       /* the project root, "" when none was found */
    char exe[AF_PROC_PATH_MAX];        /* the interpreter: a path, or a name looked up on PATH */
    char pythonpath[AF_PROC_PATH_MAX]; /* <root>/python, to put first on PYTHONPATH; "" without a root */
    bool installed;                    /* this executable was installed from the wheel (no root) */
} af_proc_python;

/* The Python of the project at root (NULL or "": no project): <root>/.venv/bin/python if
 * it is executable, else $ATTNFUZZ_PYTHON when set and not empty, else "python3".
 * AF_ERR_INVALID only when a path does not fit AF_PROC_PATH_MAX. */
af_status af_proc_python_at(const char *root, af_proc_python *py, af_error *err);

/* The project's Python as found from this process. Installed from the wheel (this
 * executable's directory passes af_proc_installed_at): af_proc_python_at(NULL), that is
 * $ATTNFUZZ_PYTHON, which the `attnfuzz` command sets to the interpreter of its
 * environment (python/attnfuzz/__main__.py), else python3; py->installed is true and no
 * checkout is looked for. Otherwise af_proc_python_at(af_proc_root()), as in a checkout:
 * finding no root is not an error (py->root is "", py->exe $ATTNFUZZ_PYTHON or python3).
 * AF_ERR_INVALID only when a path does not fit. */
af_status af_proc_python_find(af_proc_python *py, af_error *err);

/* --- the environment ------------------------------------------------------------------------ */

/* A copy of env (NULL-terminated "NAME=value" strings, e.g. environ) in which variable name
 * holds value followed, when it had a non-empty value, by ':' and that old value; the
 * entry stays where the first one stood (later duplicates are dropped) or is appended.
 * Every other entry is copied unchanged and in order. value NULL or "": a plain copy.
 * env is only read. *out: one af_malloc'ed block (pointers and strings): af_free(*out).
 * AF_ERR_INVALID for a name that is empty or holds '='; AF_ERR_NOMEM. */
af_status af_proc_env_prepend(char *const *env, const char *name, const char *value, char ***out, af_error *err);

/* This process's environment with py->pythonpath put first on PYTHONPATH (a plain copy
 * when it is ""): af_proc_env_prepend(environ, "PYTHONPATH", ...). */
af_status af_proc_python_env(const af_proc_python *py, char ***out, af_error *err);

/* --- children ------------------------------------------------------------------------------ */

enum {
    AF_PROC_INHERIT = -1, /* the child shares this process's descriptor */
    AF_PROC_DEVNULL = -2  /* the child gets /dev/null */
};

/* How to start a child (af_proc_opts_init gives: everything inherited, this environment,
 * this process group). */
typedef struct af_proc_opts {
    int fd[3];            /* the child's stdin, stdout, stderr: a descriptor of ours, or AF_PROC_* */
    const char *err_path; /* not NULL: stderr goes to this file (created or truncated, 0644), not fd[2] */
    char *const *envp;    /* the child's environment; NULL: this process's */
    bool new_group;       /* the child leads a new process group (af_proc_kill reaches its helpers) */
} af_proc_opts;

void af_proc_opts_init(af_proc_opts *o);

/* Starts argv[0] with arguments argv (NULL-terminated) without a shell. The child starts
 * with an empty signal mask and SIGPIPE at its default action, whatever this process
 * blocks or ignores, and with descriptors 0, 1, 2 as o says (ours stay open; descriptors
 * made close-on-exec do not reach it). *pid: the child, to be reaped by af_proc_wait or
 * af_proc_kill. AF_ERR_INVALID when the program cannot be run (not found, not executable,
 * not a program) or argv is empty, AF_ERR_IO when the system refuses (no processes or
 * memory left, err_path cannot be opened); the message names argv[0] and why. */
af_status af_proc_spawn(char *const *argv, const af_proc_opts *o, pid_t *pid, af_error *err);

/* Waits for child pid to end (retrying after signals); *wstatus as waitpid gives it.
 * AF_ERR_IO when pid is not a child of ours. */
af_status af_proc_wait(pid_t pid, int *wstatus, af_error *err);

/* Has child pid ended? It is left unreaped: while it is a zombie its pid, and so its
 * process group id, cannot be taken by another process, so af_proc_kill may still signal
 * the group safely. false while it runs (or when pid is no child of ours). */
bool af_proc_ended(pid_t pid);

/* SIGKILL to pid and, when group, to its process group (a child started with new_group:
 * what it started goes too), then reaps pid; *wstatus (may be NULL) gets how it ended,
 * its own exit status when it had ended before. pid <= 0 does nothing. A child that has
 * not ended AF_PROC_KILL_WAIT seconds after the signal (a process cannot die while its
 * GPU driver tears down a context whose kernel does not stop) is left unreaped, said so on
 * stderr once per child, and counted as killed by SIGKILL: the caller goes on. */
#define AF_PROC_KILL_WAIT 10.0
void af_proc_kill(pid_t pid, bool group, int *wstatus);

/* How a child ended, in words: "exited with status 3", "was killed by signal 9 (Killed)". */
void af_proc_describe(int wstatus, char *buf, size_t len);

/* --- running a command for its output --------------------------------------------------------- */

/* A caller-owned buffer for af_proc_capture: at most cap - 1 bytes are kept, followed by
 * a NUL (data may be NULL with cap 0: everything is read and dropped). */
typedef struct af_proc_buf {
    char *data;
    size_t cap;
    size_t len;     /* bytes kept */
    bool truncated; /* the child wrote more than fit; the rest was read and dropped */
} af_proc_buf;

/* Runs argv (as af_proc_spawn; envp NULL: this environment) with stdin /dev/null in a
 * process group of its own, reading its stdout into out and its stderr into errout
 * (NULL: /dev/null) as they come, until it has ended and closed both, or until timeout
 * seconds have passed. AF_OK when it ended in time, *wstatus saying how (a non-zero exit
 * is no error here). AF_ERR_TIMEOUT when it had not: the child and its process group are
 * killed and reaped, what it wrote so far stays in the buffers. AF_ERR_INVALID / AF_ERR_IO
 * when it cannot be started (as af_proc_spawn), AF_ERR_IO when a pipe fails. */
af_status af_proc_capture(char *const *argv, char *const *envp, double timeout, af_proc_buf *out,
                          af_proc_buf *errout, int *wstatus, af_error *err);

#endif
