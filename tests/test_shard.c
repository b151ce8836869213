/* test_shard.c - shards of one campaign (shard.h):
 *   - "I/N" and "auto/N" parse, "auto" from SLURM_ARRAY_TASK_ID (offset by
 *     SLURM_ARRAY_TASK_MIN) or JOB_COMPLETION_INDEX, and every bad spec is refused with a
 *     message naming the problem;
 *   - the case streams of one campaign seed are disjoint: every (shard, --jobs slot,
 *     restart) gets a distinct Philox (key, stream word) pair, checked exhaustively over
 *     the slots and restarts a campaign can have; and the words actually drawn from a
 *     sample of those streams never repeat across them;
 *   - an unsharded campaign keeps the streams it had before shards existed (the --jobs
 *     key formula, the "CAMP" stream word);
 *   - the output root layout and shard-I directory names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/rng.h"
#include "attnfuzz/shard.h"

static void clear_env(void) {
    unsetenv("SLURM_ARRAY_TASK_ID");
    unsetenv("SLURM_ARRAY_TASK_MIN");
    unsetenv("JOB_COMPLETION_INDEX");
}

static void parse_ok(const char *spec, uint32_t index, uint32_t count) {
    af_shard s;
    af_error err = {0};
    assert_int_equal(af_shard_parse(spec, &s, &err), AF_OK);
    assert_int_equal(s.index, index);
    assert_int_equal(s.count, count);
}

static void parse_bad(const char *spec, const char *says) {
    af_shard s;
    af_error err = {0};
    assert_int_equal(af_shard_parse(spec, &s, &err), AF_ERR_INVALID);
    if (!strstr(err.msg, says)) fail_msg("\"%s\": message \"%s\" does not say \"%s\"", spec, err.msg, says);
}

static void test_parse(void **state) {
    (void)state;
    clear_env();
    parse_ok("0/1", 0, 1);
    parse_ok("2/8", 2, 8);
    parse_ok("7/8", 7, 8);
    parse_bad("8/8", "I must be a number from 0 to 7");
    parse_bad("-1/8", "I must be");
    parse_bad("1/0", "N must be a number from 1");
    parse_bad("1/x", "N must be");
    parse_bad("3", "not I/N");
    parse_bad("/4", "not I/N");
    parse_bad("1/99999999999", "N must be");
    parse_bad("auto/4", "neither SLURM_ARRAY_TASK_ID");
}

static void test_parse_auto(void **state) {
    (void)state;
    clear_env();
    setenv("SLURM_ARRAY_TASK_ID", "3", 1);
    parse_ok("auto/4", 3, 4);
    parse_bad("auto/3", "not below 3");
    /* an array submitted as 1-4: shards 0-3 */
    setenv("SLURM_ARRAY_TASK_MIN", "1", 1);
    setenv("SLURM_ARRAY_TASK_ID", "4", 1);
    parse_ok("auto/4", 3, 4);
    setenv("SLURM_ARRAY_TASK_ID", "0", 1);
    parse_bad("auto/4", "below SLURM_ARRAY_TASK_MIN");
    setenv("SLURM_ARRAY_TASK_ID", "two", 1);
    parse_bad("auto/4", "is not a task index");
    /* Kubernetes: JOB_COMPLETION_INDEX (Slurm's variable wins when both are set) */
    clear_env();
    setenv("JOB_COMPLETION_INDEX", "5", 1);
    parse_ok("auto/6", 5, 6);
    parse_bad("auto/5", "not below 5");
    setenv("SLURM_ARRAY_TASK_ID", "1", 1);
    parse_ok("auto/6", 1, 6);
    clear_env();
}

typedef struct stream_id {
    uint64_t key;
    uint32_t word;
} stream_id;

static int cmp_stream(const void *a, const void *b) {
    const stream_id *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->word < y->word ? -1 : x->word > y->word;
}

/* Every process of one campaign seed: N shards x (1 + 256 slots) x 4 generations, plus
 * the unsharded campaign's processes. Distinct (key, word) pairs mean distinct Philox
 * inputs for every counter value: no block is ever drawn twice. */
static void test_streams_distinct(void **state) {
    (void)state;
    const uint64_t seeds[] = {1, 0, 0xffffffffffffffffull, 0x9e3779b9ull};
    const uint32_t shards = 16;
    size_t per = (AF_SHARD_SLOTS_MAX + 1) * (AF_SHARD_GENS_MAX + 1);
    size_t n = (shards + 1) * per;
    stream_id *ids = calloc(n, sizeof *ids);
    assert_non_null(ids);
    for (size_t si = 0; si < sizeof seeds / sizeof seeds[0]; si++) {
        size_t k = 0;
        for (uint32_t sh = 0; sh <= shards; sh++) {
            af_shard s = {sh, sh < shards ? shards : 0}; /* the last: unsharded */
            for (unsigned slot = 0; slot <= AF_SHARD_SLOTS_MAX; slot++)
                for (unsigned gen = 0; gen <= AF_SHARD_GENS_MAX; gen++)
                    ids[k++] = (stream_id){af_shard_job_seed(seeds[si], slot, gen), af_shard_stream(&s)};
        }
        assert_int_equal(k, n);
        qsort(ids, n, sizeof *ids, cmp_stream);
        for (size_t i = 1; i < n; i++)
            if (!cmp_stream(&ids[i - 1], &ids[i]))
                fail_msg("seed %llu: two processes share key %016llx, stream %08x", (unsigned long long)seeds[si],
                         (unsigned long long)ids[i].key, ids[i].word);
    }
    free(ids);
}

/* The unsharded campaign is what it was: key = seed for one process, seed + 0x9e3779b9
 * (k + 1) + 0xbf58476d1ce4e5b9 gen for job k (the formula campaign.c always had), and the
 * stream word "CAMP"; shard I's word is 0x80000000 | I. */
static void test_unsharded_unchanged(void **state) {
    (void)state;
    af_shard none = {0, 0}, s3 = {3, 8};
    assert_int_equal(af_shard_stream(NULL), 0x43414d50u);
    assert_int_equal(af_shard_stream(&none), 0x43414d50u);
    assert_int_equal(af_shard_stream(&s3), 0x80000003u);
    assert_true(af_shard_job_seed(7, 0, 0) == 7);
    assert_true(af_shard_job_seed(7, 1, 0) == 7 + 0x9e3779b9ull);
    assert_true(af_shard_job_seed(7, 3, 2) == 7 + 3 * 0x9e3779b9ull + 2 * 0xbf58476d1ce4e5b9ull);
}

/* 64-bit words drawn from the streams of 8 shards x 3 slots x 2 generations: no word
 * appears in two of them (a shared stream, or an overlapping one, would repeat whole
 * runs of them). Open addressing over the words. */
static void test_streams_draw_apart(void **state) {
    (void)state;
    enum { SHARDS = 8, SLOTS = 3, GENS = 2, DRAWS = 4096 };
    size_t cap = 1u << 20;
    uint64_t *word = calloc(cap, sizeof *word);
    uint16_t *owner = calloc(cap, sizeof *owner);
    assert_non_null(word);
    assert_non_null(owner);
    uint16_t id = 0;
    for (uint32_t sh = 0; sh < SHARDS; sh++)
        for (unsigned slot = 0; slot < SLOTS; slot++)
            for (unsigned gen = 0; gen < GENS; gen++) {
                id++;
                af_shard s = {sh, SHARDS};
                af_rng r;
                af_rng_init(&r, af_shard_job_seed(42, slot, gen), af_shard_stream(&s));
                for (int d = 0; d < DRAWS; d++) {
                    uint64_t w = af_rng_u64(&r);
                    size_t i = (size_t)(w * 0x9e3779b97f4a7c15ull >> 44) & (cap - 1);
                    while (owner[i] && word[i] != w) i = (i + 1) & (cap - 1);
                    if (owner[i] && owner[i] != id)
                        fail_msg("shard %u slot %u gen %u drew %016llx, as stream %u did", sh, slot, gen,
                                 (unsigned long long)w, owner[i]);
                    word[i] = w;
                    owner[i] = id;
                }
            }
    free(word);
    free(owner);
}

static void test_paths(void **state) {
    (void)state;
    af_shard s = {5, 8};
    af_shard_paths p;
    af_error err = {0};
    assert_int_equal(af_shard_paths_of("/tmp/camp//", &s, &p, &err), AF_OK);
    assert_string_equal(p.dir, "/tmp/camp/shard-5");
    assert_string_equal(p.crashes, "/tmp/camp/shard-5/crashes");
    assert_string_equal(p.stats, "/tmp/camp/shard-5/stats.json");
    assert_string_equal(p.corpus, "/tmp/camp/corpus");
    assert_string_equal(p.known, "/tmp/camp/known.json");
    assert_int_equal(af_shard_paths_of("", &s, &p, &err), AF_ERR_INVALID);
    assert_int_equal(af_shard_dir_index("/a/b/shard-12"), 12);
    assert_int_equal(af_shard_dir_index("shard-0/"), 0);
    assert_int_equal(af_shard_dir_index("/a/shard-"), -1);
    assert_int_equal(af_shard_dir_index("/a/shard-1x"), -1);
    assert_int_equal(af_shard_dir_index("/a/merged"), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_parse_auto),
        cmocka_unit_test(test_streams_distinct),
        cmocka_unit_test(test_unsharded_unchanged),
        cmocka_unit_test(test_streams_draw_apart),
        cmocka_unit_test(test_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
