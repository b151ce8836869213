/* afl_mutator.h - the AFL++ custom mutator API that afl_mutator.c implements
 * (docs/custom_mutators.md of AFL++ 4.x; afl_state_t is opaque here). */
#ifndef ATTNFUZZ_AFL_MUTATOR_H
#define ATTNFUZZ_AFL_MUTATOR_H

#include <stddef.h>
#include <stdint.h>

void *afl_custom_init(void *afl, unsigned int seed);
size_t afl_custom_fuzz(void *data, uint8_t *buf, size_t buf_size, uint8_t **out_buf, uint8_t *add_buf,
                       size_t add_buf_size, size_t max_size);
const char *afl_custom_describe(void *data, size_t max_description_len);
int32_t afl_custom_init_trim(void *data, uint8_t *buf, size_t buf_size);
size_t afl_custom_trim(void *data, uint8_t **out_buf);
int32_t afl_custom_post_trim(void *data, unsigned char success);
void afl_custom_deinit(void *data);

#endif
