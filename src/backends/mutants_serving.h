/* mutants_serving.h - the serving-form mutants' deviations (mutants_serving.c), called by
 * mutants.c (library-internal). */
#ifndef ATTNFUZZ_MUTANTS_SERVING_H
#define ATTNFUZZ_MUTANTS_SERVING_H

#include <stdbool.h>

#include "attnfuzz/tensor.h"
#include "scratch.h"

/* block_table_off_by_one: does the case have a row of two pages or more? Then views[1],
 * views[2] become K and V as read from the page caches with every table entry after a
 * row's first one page too far (modulo the cache), in float64 scratch of ws. */
bool af_mutant_block_table_applies(const af_case *c);
af_status af_mutant_block_table_misread(const af_case_tensors *in, af_scratch *ws, af_view views[3], af_error *err);

/* segment_leak: a packed case where nothing but the segment boundary keeps a segment from
 * the next one's keys (no causal, window, ALiBi, tensor mask or dropout). Then each
 * segment attends to its own keys and the next segment's: views[1], views[2] hold the two
 * concatenated and bent the case (kv_len and kv_lens) that reads them. */
bool af_mutant_segment_leak_applies(const af_case *c);
af_status af_mutant_segment_leak(const af_case_tensors *in, af_case *bent, af_scratch *ws, af_view views[3],
                                 af_error *err);

/* page_tail_read: a paged case with a row whose keys end inside a page before the padded
 * kv_len. Then that row's length is rounded up to its pages' end (at most kv_len): views[1],
 * views[2] hold the keys and values with those slots read from the caches (the poisoned
 * tail, docs/design.md section 2) and bent's kv_lens counts them. */
bool af_mutant_page_tail_applies(const af_case *c);
af_status af_mutant_page_tail_read(const af_case_tensors *in, af_case *bent, af_scratch *ws, af_view views[3],
                                   af_error *err);

/* splitkv_batch_stride: on the split-KV path with several rows, every row's output
 * [Hq, Sq, Dv] replaced by row 0's (out is the reference's [B, Hq, Sq, Dv]). */
void af_mutant_splitkv_fold(const af_case *c, double *out);

/* zero_len_nan: the queries of a row without keys (kv_lens[b] = 0) NaN. */
void af_mutant_zero_len_nan(const af_case *c, double *out);

#endif
