/* test_parallel.c - af_parallel_for and af_parallel_for_beside: every piece done exactly
 * once whatever the thread count; the side work runs once, before the pieces when there is
 * one thread, and while the helper threads already work on them when there are several
 * (what the batch frames rely on: written while the references are computed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_util.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "parallel.h"

typedef struct count_ctx {
    atomic_uint calls[256];
    atomic_uint done;     /* pieces finished */
    atomic_uint side;     /* side calls */
    atomic_uint before;   /* pieces finished when the side work began */
    bool saw_helper;      /* the side work saw a piece finish while it waited */
    double wait_s;        /* how long the side work waits for one (0: 5 s) */
} count_ctx;

static void count_one(void *arg, size_t i) {
    count_ctx *c = arg;
    atomic_fetch_add(&c->calls[i], 1);
    atomic_fetch_add(&c->done, 1);
}

static void test_every_piece_once(void **state) {
    (void)state;
    static const size_t ns[] = {0, 1, 2, 5, 100, 256};
    static const unsigned ts[] = {0, 1, 2, 3, 8, 200};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof ts / sizeof ts[0]; b++) {
            static count_ctx c;
            memset(&c, 0, sizeof c);
            af_parallel_for(ns[a], ts[b], count_one, &c);
            for (size_t i = 0; i < ns[a]; i++)
                if (atomic_load(&c.calls[i]) != 1)
                    fail_msg("n %zu, threads %u: piece %zu ran %u times", ns[a], ts[b], i, atomic_load(&c.calls[i]));
            assert_int_equal(atomic_load(&c.done), ns[a]);
        }
}

/* The side work: notes what had finished when it began, then waits (at most wait_s, or
 * 5 s) for a piece to finish, which with helper threads happens while it waits. */
static void side_wait(void *arg) {
    count_ctx *c = arg;
    atomic_fetch_add(&c->side, 1);
    atomic_store(&c->before, atomic_load(&c->done));
    struct timespec t0, now, nap = {0, 1000000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (atomic_load(&c->done) > 0) {
            c->saw_helper = true;
            return;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        double limit = c->wait_s > 0 ? c->wait_s : 5.0;
        if ((double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec) > limit) return;
        nanosleep(&nap, NULL);
    }
}

static void test_beside_runs_alongside(void **state) {
    (void)state;
    static const size_t ns[] = {1, 3, 64};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        /* one thread: the side work first (nothing can finish while it waits), then every
         * piece here */
        static count_ctx c;
        memset(&c, 0, sizeof c);
        c.wait_s = 0.05;
        af_parallel_for_beside(ns[a], 1, count_one, &c, side_wait, &c);
        assert_int_equal(atomic_load(&c.side), 1);
        assert_int_equal(atomic_load(&c.before), 0);
        assert_false(c.saw_helper);
        assert_int_equal(atomic_load(&c.done), ns[a]);
        /* several: the helpers work while the side work waits, and every piece runs once */
        for (unsigned t = 2; t <= 4; t++) {
            memset(&c, 0, sizeof c);
            af_parallel_for_beside(ns[a], t, count_one, &c, side_wait, &c);
            assert_int_equal(atomic_load(&c.side), 1);
            assert_true(c.saw_helper);
            for (size_t i = 0; i < ns[a]; i++) assert_int_equal(atomic_load(&c.calls[i]), 1);
        }
    }
    /* no pieces: the side work still runs once; no side work: as af_parallel_for */
    static count_ctx c;
    memset(&c, 0, sizeof c);
    c.wait_s = 0.05;
    af_parallel_for_beside(0, 4, count_one, &c, side_wait, &c);
    assert_int_equal(atomic_load(&c.side), 1);
    memset(&c, 0, sizeof c);
    af_parallel_for_beside(10, 3, count_one, &c, NULL, NULL);
    assert_int_equal(atomic_load(&c.done), 10);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_piece_once),
        cmocka_unit_test(test_beside_runs_alongside),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
