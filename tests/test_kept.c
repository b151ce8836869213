/* test_kept.c - the compiled structures a campaign draws new values for
 * (src/campaign/kept.h):
 *   - the set holds the last AF_KEPT_STRUCTURES structures, a structure compiled again
 *     takes its own place, a dropped one is gone and dropping one not kept changes nothing;
 *   - picks hold the backward share: one structure with gradients among seven without is
 *     picked about `backward` of the time (not 1/8, not all or nothing), each of the seven
 *     alike; with only one kind kept, that kind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>

#include "attnfuzz/case.h"
#include "attnfuzz/rng.h"
#include "campaign/kept.h"

/* A structure told apart by its q_len, with or without gradients. */
static af_case structure(size_t q_len, bool grads) {
    af_case c;
    af_case_default(&c);
    c.q_len = (uint32_t)q_len;
    c.bwd.grads = grads ? AF_GRAD_ALL : 0;
    return c;
}

static bool kept_has(const af_kept *k, uint64_t hash) {
    for (size_t i = 0; i < k->n; i++)
        if (k->hash[i] == hash) return k->c[i].q_len == (size_t)hash;
    return false;
}

static void test_add_replace_drop(void **state) {
    (void)state;
    af_kept k = {0};
    for (uint64_t h = 1; h <= AF_KEPT_STRUCTURES + 2; h++) {
        af_case c = structure((size_t)h, false);
        af_kept_add(&k, &c, h);
    }
    assert_int_equal(k.n, AF_KEPT_STRUCTURES);
    assert_false(kept_has(&k, 1)); /* the two oldest replaced */
    assert_false(kept_has(&k, 2));
    for (uint64_t h = 3; h <= AF_KEPT_STRUCTURES + 2; h++) assert_true(kept_has(&k, h));

    af_case again = structure(5, true); /* compiled again: its own place, now with gradients */
    af_kept_add(&k, &again, 5);
    assert_int_equal(k.n, AF_KEPT_STRUCTURES);
    for (size_t i = 0; i < k.n; i++)
        if (k.hash[i] == 5) assert_int_equal(k.c[i].bwd.grads, AF_GRAD_ALL);

    af_kept_drop(&k, 7);
    assert_int_equal(k.n, AF_KEPT_STRUCTURES - 1);
    assert_false(kept_has(&k, 7));
    af_kept_drop(&k, 7); /* not kept: nothing */
    af_kept_drop(&k, 1000);
    assert_int_equal(k.n, AF_KEPT_STRUCTURES - 1);
    for (uint64_t h = 3; h <= AF_KEPT_STRUCTURES + 2; h++) assert_true(h == 7 || kept_has(&k, h));

    af_case fresh = structure(99, false); /* the free place first */
    af_kept_add(&k, &fresh, 99);
    assert_int_equal(k.n, AF_KEPT_STRUCTURES);
    assert_true(kept_has(&k, 99));
    for (uint64_t h = 3; h <= AF_KEPT_STRUCTURES + 2; h++) assert_true(h == 7 || kept_has(&k, h));
}

static void test_pick_holds_backward_share(void **state) {
    (void)state;
    af_kept k = {0};
    for (uint64_t h = 1; h <= AF_KEPT_STRUCTURES; h++) {
        af_case c = structure((size_t)h, h == 3); /* one with gradients among seven without */
        af_kept_add(&k, &c, h);
    }
    af_rng rng;
    af_rng_init(&rng, 7, 0);
    enum { N = 60000 };
    size_t count[AF_KEPT_STRUCTURES + 1] = {0};
    for (int i = 0; i < N; i++) count[af_kept_pick(&k, &rng, 1.0 / 3.0)->q_len]++;
    double share = (double)count[3] / N;
    print_message("one structure with gradients among 8: picked %.3f of the time (backward share 1/3)\n", share);
    assert_true(share > 0.32 && share < 0.347);
    for (size_t h = 1; h <= AF_KEPT_STRUCTURES; h++) /* the seven without: 2/3 / 7 each */
        if (h != 3) assert_true(fabs((double)count[h] / N - 2.0 / 21.0) < 0.01);

    for (int i = 0; i < 1000; i++) assert_int_equal(af_kept_pick(&k, &rng, 0.0)->bwd.grads, 0);
    for (int i = 0; i < 1000; i++) assert_int_equal(af_kept_pick(&k, &rng, 1.0)->q_len, 3);

    af_kept one = {0}; /* one kind only: that kind, whatever the share */
    af_case b = structure(4, true);
    af_kept_add(&one, &b, 4);
    assert_int_equal(af_kept_pick(&one, &rng, 0.0)->q_len, 4);
    af_kept none = {0};
    af_case f = structure(6, false);
    af_kept_add(&none, &f, 6);
    assert_int_equal(af_kept_pick(&none, &rng, 1.0)->q_len, 6);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_replace_drop),
        cmocka_unit_test(test_pick_holds_backward_share),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
