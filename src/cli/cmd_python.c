/* cmd_python.c - the commands written in the Python kit: `attnfuzz triage ...`,
 * `attnfuzz bisect ...`, `attnfuzz export ...` and `attnfuzz capture ...` run
 * `python -m attnfuzz.triage ...` (.bisect, .export, .capture) with the project's
 * Python (proc.h: the checkout's .venv, or the interpreter the wheel's `attnfuzz` command
 * names) and the kit first on PYTHONPATH, replacing this process, so its output, exit status
 * and signals are the module's own; $ATTNFUZZ_EXE tells the module where this executable
 * is, for the replays it runs. */

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnfuzz/mem.h"
#include "cli.h"
#include "core/proc.h"

int af_cmd_python(const char *verb, const char *module, int argc, char **argv) {
    af_proc_python py;
    af_error err;
    char **envp = NULL;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = 0;
        setenv("ATTNFUZZ_EXE", self, 1);
    }
    if (af_proc_python_find(&py, &err) != AF_OK || af_proc_python_env(&py, &envp, &err) != AF_OK) {
        fprintf(stderr, "attnfuzz %s: no Python for the kit: %s\n", verb, err.msg);
        return 2;
    }
    /* python -m MODULE ARGS... (argv[0] is the verb) */
    char **a = af_calloc((size_t)argc + 3, sizeof *a);
    if (!a) {
        af_free(envp);
        fprintf(stderr, "attnfuzz %s: out of memory\n", verb);
        return 2;
    }
    a[0] = py.exe;
    a[1] = (char *)"-m";
    a[2] = (char *)module;
    for (int i = 1; i < argc; i++) a[i + 2] = argv[i];
    fflush(NULL);
    execvpe(py.exe, a, envp);
    fprintf(stderr, "attnfuzz %s: cannot run %s -m %s: %s\n", verb, py.exe, module, strerror(errno));
    af_free(a);
    af_free(envp);
    return 2;
}
