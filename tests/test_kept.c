/* test_kept.c - the compiled structures a campaign draws new values for
 * (src/campaign/kept.h):
 *   - the set holds the last AF_KEPT_STRUCTURES structures (a full set replaces the oldest,
 *     after drops too), a structure compiled again takes its own place, a dropped one is
 *     gone and dropping one not kept changes nothing;
 *   - a pick is of the kind asked for (with or without gradients), each structure of that
 *     kind alike, and none when that kind is not kept (the campaign then draws a new
 *     structure of it). */
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

    /* full again after a drop: the next one still replaces the oldest (3), whatever
     * place the drop moved things to */
    af_case more = structure(100, false);
    af_kept_add(&k, &more, 100);
    assert_false(kept_has(&k, 3));
    for (uint64_t h = 4; h <= AF_KEPT_STRUCTURES + 2; h++) assert_true(h == 7 || kept_has(&k, h));
    assert_true(kept_has(&k, 99) && kept_has(&k, 100));
}

static void test_pick_by_kind(void **state) {
    (void)state;
    af_kept k = {0};
    for (uint64_t h = 1; h <= AF_KEPT_STRUCTURES; h++) {
        af_case c = structure((size_t)h, h == 3 || h == 6); /* two with gradients among eight */
        af_kept_add(&k, &c, h);
    }
    af_rng rng;
    af_rng_init(&rng, 7, 0);
    enum { N = 60000 };
    size_t count[AF_KEPT_STRUCTURES + 1] = {0};
    for (int i = 0; i < N; i++) {
        const af_case *c = af_kept_pick(&k, &rng, i % 2 == 0);
        assert_non_null(c);
        assert_int_equal(c->bwd.grads != 0, i % 2 == 0); /* the kind asked for */
        count[c->q_len]++;
    }
    for (size_t h = 1; h <= AF_KEPT_STRUCTURES; h++) { /* alike within a kind: 1/2 and 1/6 of a half */
        double want = (h == 3 || h == 6) ? 0.25 : 1.0 / 12.0;
        assert_true(fabs((double)count[h] / N - want) < 0.01);
    }
    af_kept one = {0}; /* a kind not kept: none */
    af_case b = structure(4, true);
    af_kept_add(&one, &b, 4);
    assert_null(af_kept_pick(&one, &rng, false));
    assert_int_equal(af_kept_pick(&one, &rng, true)->q_len, 4);
    af_kept none = {0};
    assert_null(af_kept_pick(&none, &rng, true));
    assert_null(af_kept_pick(&none, &rng, false));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_replace_drop),
        cmocka_unit_test(test_pick_by_kind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
