/* cpu_bind.c - binding campaign jobs to CPUs (see cpu_bind.h). */
#include "cpu_bind.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

/* The single CPU a process is bound to, from its /proc status; -1 when it may run on
 * more than one, is a kernel thread (those are per-CPU by design), or cannot be read. */
static int af_cpu_bound_alone(const char *pid) {
    char path[300];
    snprintf(path, sizeof path, "/proc/%s/status", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[512];
    int cpu = -1;
    bool kthread = false;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "PPid:", 5)) {
            long ppid = strtol(line + 5, NULL, 10);
            kthread = ppid == 2 || !strcmp(pid, "2"); /* children of kthreadd */
        } else if (!strncmp(line, "Cpus_allowed_list:", 18)) {
            char *p = line + 18, *end;
            while (*p == ' ' || *p == '\t') p++;
            long c = strtol(p, &end, 10);
            if (end != p && (*end == '\n' || *end == '\0') && c >= 0 && c < CPU_SETSIZE) cpu = (int)c;
            break; /* PPid comes before it */
        }
    }
    fclose(f);
    return kthread ? -1 : cpu;
}

size_t af_cpu_bind_choose(int *cpus, size_t max) {
    cpu_set_t allowed, taken;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) <= 1) return 0;
    CPU_ZERO(&taken);
    DIR *d = opendir("/proc");
    if (d) {
        char self[24];
        snprintf(self, sizeof self, "%ld", (long)getpid());
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] < '1' || e->d_name[0] > '9' || !strcmp(e->d_name, self)) continue;
            int c = af_cpu_bound_alone(e->d_name);
            if (c >= 0) CPU_SET((size_t)c, &taken);
        }
        closedir(d);
    }
    size_t n = 0;
    int now = sched_getcpu();
    if (now >= 0 && CPU_ISSET((size_t)now, &allowed) && !CPU_ISSET((size_t)now, &taken) && n < max) cpus[n++] = now;
    for (size_t c = 0; c < CPU_SETSIZE && n < max; c++)
        if (CPU_ISSET(c, &allowed) && !CPU_ISSET(c, &taken) && (int)c != now) cpus[n++] = (int)c;
    return n;
}

void af_cpu_bind(pid_t pid, int cpu) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET((size_t)cpu, &set);
    (void)sched_setaffinity(pid, sizeof set, &set);
}

int af_cpu_bind_lock(void) {
    int fd = open(AF_CPU_BIND_LOCK, O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            close(fd);
            return -1;
        }
    }
    return fd;
}

void af_cpu_bind_unlock(int fd) {
    if (fd >= 0) close(fd); /* releases the flock */
}
