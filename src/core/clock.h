/* clock.h - seconds on the monotonic clock, for deadlines and rates. */
#ifndef AF_CLOCK_H
#define AF_CLOCK_H

#include <time.h>

static inline double af_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
