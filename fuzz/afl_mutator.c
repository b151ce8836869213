/* afl_mutator.c - the structure-aware mutator as an AFL++ custom mutator library
 * (AFL_CUSTOM_MUTATOR_LIBRARY=.../libattnfuzz_afl_mutator.so). AFL++'s libFuzzer driver
 * ignores libFuzzer's mutator hooks, hence this separate library over the same code.
 *
 * It is built without AFL instrumentation (--afl-noopt): it runs inside afl-fuzz, not
 * in the target, and must not touch the coverage map.
 *
 * Trimming is structural: instead of cutting bytes (which for a fixed-layout record only
 * zeroes fields at random), each trim step halves a dimension or drops a feature, and
 * afl-fuzz keeps the step when the coverage stays the same - smaller, cheaper cases for
 * the queue. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "attnfuzz/mem.h"
#include "attnfuzz/rng.h"
#include "afl_mutator.h"
#include "case_mutator.h"


#define AF_AFLMUT_MAX_TRIMS 48 /* trim executions per queue entry */

typedef struct af_aflmut {
    af_rng rng;
    af_casemut_opts opts;
    uint8_t out[AF_CASE_ENCODED_MAX];
    const char *last; /* what the last afl_custom_fuzz did */
    /* trimming */
    af_case trim_cur, trim_try;
    size_t trim_len;   /* length of trim_cur's encoding (the queue entry) */
    unsigned trim_step;
    unsigned trim_runs;
} af_aflmut;

void *afl_custom_init(void *afl, unsigned int seed) {
    (void)afl;
    af_aflmut *m = af_calloc(1, sizeof *m);
    if (!m) return NULL;
    af_rng_init(&m->rng, seed, 0x41464cu);
    af_casemut_opts_from_env(&m->opts);
    m->last = "attnfuzz";
    return m;
}

void afl_custom_deinit(void *data) { af_free(data); }

size_t afl_custom_fuzz(void *data, uint8_t *buf, size_t buf_size, uint8_t **out_buf, uint8_t *add_buf,
                       size_t add_buf_size, size_t max_size) {
    af_aflmut *m = data;
    size_t cap = max_size < sizeof m->out ? max_size : sizeof m->out;
    uint64_t seed = af_rng_u64(&m->rng);
    size_t n;
    if (add_buf && add_buf_size && af_rng_below(&m->rng, 4) == 0) {
        n = af_casemut_crossover(buf, buf_size, add_buf, add_buf_size, m->out, cap, seed, &m->opts);
        m->last = "attnfuzz-crossover";
    } else {
        n = af_casemut_mutate(buf, buf_size, m->out, cap, seed, &m->opts);
        m->last = "attnfuzz-mutate";
    }
    if (n == 0) { /* nothing fits in max_size: hand back the input unchanged */
        *out_buf = buf;
        return buf_size;
    }
    *out_buf = m->out;
    return n;
}

const char *afl_custom_describe(void *data, size_t max_description_len) {
    af_aflmut *m = data;
    return strlen(m->last) <= max_description_len ? m->last : "af";
}

/* The next step at or after m->trim_step that changes the current case and does not make
 * its encoding longer; AF_CASEMUT_SHRINK_STEPS when none is left. Leaves the candidate in
 * m->trim_try and its bytes in m->out. */
static unsigned af_aflmut_next_step(af_aflmut *m, size_t *len) {
    for (; m->trim_step < AF_CASEMUT_SHRINK_STEPS; m->trim_step++) {
        m->trim_try = m->trim_cur;
        if (!af_casemut_shrink(&m->trim_try, m->trim_step, &m->opts)) continue;
        *len = af_casemut_encode(&m->trim_try, m->out, m->trim_len, &m->opts);
        if (*len > 0) return m->trim_step;
    }
    return AF_CASEMUT_SHRINK_STEPS;
}

int32_t afl_custom_init_trim(void *data, uint8_t *buf, size_t buf_size) {
    af_aflmut *m = data;
    af_case_decode(&m->trim_cur, buf, buf_size, m->opts.budget);
    m->trim_len = buf_size < sizeof m->out ? buf_size : sizeof m->out;
    m->trim_step = 0;
    m->trim_runs = 0;
    size_t len;
    if (af_aflmut_next_step(m, &len) == AF_CASEMUT_SHRINK_STEPS) return 0; /* nothing to trim */
    return (int32_t)AF_CASEMUT_SHRINK_STEPS;
}

size_t afl_custom_trim(void *data, uint8_t **out_buf) {
    af_aflmut *m = data;
    size_t len = 0;
    af_aflmut_next_step(m, &len); /* recomputes the candidate of the current step */
    *out_buf = m->out;
    return len;
}

int32_t afl_custom_post_trim(void *data, unsigned char success) {
    af_aflmut *m = data;
    if (success) {
        /* the same coverage with a smaller case: keep it */
        m->trim_cur = m->trim_try;
        uint8_t tmp[AF_CASE_ENCODED_MAX];
        m->trim_len = af_casemut_encode(&m->trim_cur, tmp, sizeof tmp, &m->opts);
        if (!af_casemut_shrink_repeats(m->trim_step)) m->trim_step++;
    } else {
        m->trim_step++;
    }
    if (++m->trim_runs >= AF_AFLMUT_MAX_TRIMS) return (int32_t)AF_CASEMUT_SHRINK_STEPS;
    size_t len;
    return (int32_t)af_aflmut_next_step(m, &len);
}
