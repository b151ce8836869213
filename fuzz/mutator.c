/* mutator.c - libFuzzer's structure-aware hooks over the case codec.
 *
 * With LLVMFuzzerCustomMutator defined, libFuzzer mutates only through it (and through
 * LLVMFuzzerCustomCrossOver when crossing over), so one call in eight hands the bytes to
 * libFuzzer's own byte mutators instead: they carry the dictionary (fuzz/attnfuzz.dict)
 * and the comparison operands libFuzzer traced, which reach values - a softcap of 50,
 * a NaN scale - that no structural edit proposes. */
#include <stddef.h>
#include <stdint.h>

#include "attnfuzz/rng.h"
#include "case_mutator.h"

/* Weak: libFuzzer defines it; other engines linked through the same API (AFL++'s or
 * honggfuzz's libFuzzer drivers) may not, and then a byte is changed here instead. */
__attribute__((weak)) size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);
size_t LLVMFuzzerCustomCrossOver(const uint8_t *data1, size_t size1, const uint8_t *data2, size_t size2, uint8_t *out,
                                 size_t max_out_size, unsigned int seed);

static size_t af_mutator_bytes(uint8_t *data, size_t size, size_t max_size, af_rng *r) {
    if (LLVMFuzzerMutate) return LLVMFuzzerMutate(data, size, max_size);
    if (size == 0 || max_size == 0) return size;
    data[af_rng_below(r, (uint32_t)(size < max_size ? size : max_size))] ^= (uint8_t)(1u << af_rng_below(r, 8));
    return size < max_size ? size : max_size;
}

static const af_casemut_opts *af_mutator_opts(void) {
    static af_casemut_opts opts;
    static int loaded;
    if (!loaded) {
        af_casemut_opts_from_env(&opts);
        loaded = 1;
    }
    return &opts;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    af_rng r;
    af_rng_init(&r, seed, 0x4c46u);
    if (af_rng_below(&r, 8) == 0) return af_mutator_bytes(data, size, max_size, &r);
    size_t n = af_casemut_mutate(data, size, data, max_size, af_rng_u64(&r), af_mutator_opts());
    return n ? n : af_mutator_bytes(data, size, max_size, &r); /* the case does not fit in max_size */
}

size_t LLVMFuzzerCustomCrossOver(const uint8_t *data1, size_t size1, const uint8_t *data2, size_t size2, uint8_t *out,
                                 size_t max_out_size, unsigned int seed) {
    return af_casemut_crossover(data1, size1, data2, size2, out, max_out_size, seed, af_mutator_opts());
}
