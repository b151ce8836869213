/* cpu_bind.h - binding campaign jobs (and the workers they start) to CPUs.
 *
 * A job and its worker take turns (a case out, a result back): on one CPU the wake-up is
 * cheap, across CPUs it costs more than a small case. So each job is bound to one CPU, as
 * AFL++ binds each instance to a core, choosing among the CPUs this process may run on
 * those that no other process is bound to alone (kernel threads aside), so that two
 * campaigns side by side do not share CPUs while others idle. */
#ifndef AF_CPU_BIND_H
#define AF_CPU_BIND_H

#include <stddef.h>
#include <sys/types.h>

#define AF_CPU_BIND_MAX 1024

/* The CPUs to bind jobs to, in order, into cpus[0..max); returns how many (0: do not
 * bind: a single allowed CPU, every allowed CPU already taken, or the set unreadable).
 * The CPU this process runs on now comes first when it is free. */
size_t af_cpu_bind_choose(int *cpus, size_t max);

/* Binds process pid (0: this one) and the workers it starts later to cpu (-1: nothing);
 * a failure leaves it unbound, which only costs speed. */
void af_cpu_bind(pid_t pid, int cpu);

/* The machine-wide binding lock (flock on AF_CPU_BIND_LOCK), held from choosing CPUs until
 * the processes are bound, so that campaigns started together do not choose the same
 * CPU. Returns the descriptor to give back to af_cpu_bind_unlock, or -1 when the lock
 * cannot be had (binding goes on without it). */
#define AF_CPU_BIND_LOCK "/tmp/attnfuzz-cpu-bind.lock"
int af_cpu_bind_lock(void);
void af_cpu_bind_unlock(int fd);

#endif
