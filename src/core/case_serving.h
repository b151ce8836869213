/* case_serving.h - the serving part of a case inside the library: the hooks case.c,
 * case_codec.c, case_json.c and case_key.c call (case_serving.c), so those files name the
 * serving part once each and know nothing of its fields. */
#ifndef ATTNFUZZ_CASE_SERVING_H
#define ATTNFUZZ_CASE_SERVING_H

#include <stddef.h>
#include <stdint.h>

#include "attnfuzz/case.h"
#include "attnfuzz/tensor.h"
#include "json_write.h"

/* Repair, in two steps around the budget's shrinking: before, enum ranges, the layouts
 * and broadcasts the forms need, the forward-only rule and lengths within the shapes;
 * after, the lengths again within the shrunken shapes. */
void af_serving_repair_pre(af_case *c);
void af_serving_repair_post(af_case *c);
/* AF_OK or AF_ERR_INVALID naming the field ("serving.q_lens[1] (9) exceeds q_len (8)"). */
af_status af_serving_validate(const af_case *c, af_error *err);
bool af_serving_equal(const af_case *a, const af_case *b);
/* Bytes of the physical serving tensors (THD copies, page caches, tables, sinks, slopes). */
double af_serving_tensor_bytes(const af_case *c);

/* The serving bytes, after the backward ones: batch is the batch byte as it read (before
 * repair). Returns the bytes the record spans (missing ones read 0: no serving form). */
void af_serving_decode(af_case *c, const uint8_t *p, size_t n, uint32_t batch);
/* Writes the record of a case with a serving form; returns false when cap is too small. */
bool af_serving_encode(const af_case *c, uint8_t *out, size_t cap, size_t *len);
#define AF_SERVING_FIXED_BYTES 19

/* "serving": {...} at w's position (nothing for a case without a serving form). */
void af_serving_write_json(af_jw *w, const af_case *c);
/* Reads "serving" of the case object o (a cJSON *; absent or null: none). */
af_status af_serving_read_json(af_case *c, const void *o, af_error *err);

/* Row b > 0's leading full pages shared with row 0 (min of shared_pages and both rows'
 * full pages); the pages of the cache (every row's own, the shared ones once, and the null
 * page unused table entries name) and the block table's width (at least 1). */
uint32_t af_serving_shared(const af_case *c, uint32_t b);
uint32_t af_serving_page_count(const af_case *c, uint32_t *max_pages);
/* Tokens of all segments: queries (keys false) or keys. */
uint32_t af_serving_total(const af_case *c, bool keys);
/* Shape and strides (data NULL) of tensor w in THD form [T, H, D] (its spec's perm modulo
 * the 6 orders, its pad) or as a page cache [P, page_size, H, D] (perm modulo 24, pad);
 * returns the span in bytes. */
size_t af_serving_thd_layout(const af_case *c, af_tensor_id w, size_t T, af_tensor *t);
size_t af_serving_cache_layout(const af_case *c, af_tensor_id w, size_t P, af_tensor *t);

/* The serving part's contribution to a compile key: the forms always, the lengths and page
 * geometry with shapes, the ALiBi form with causal. */
uint64_t af_serving_key(const af_case *c, bool shapes, bool causal);

/* case_serving_gen.c. A serving part for a generated case (forms, lengths, page geometry,
 * sinks, slopes; a decode step resizes Sq, Sk, the batch and causal alignment): returns
 * 0, or for a decode step its size class for the flop cap (1 medium, 2 large). */
struct af_rng;
int af_serving_generate(af_case *c, struct af_rng *r);
/* One edit of a serving case's serving part (a form toggled, a length, the page geometry,
 * the ALiBi form, seeds); the caller repairs. */
void af_serving_mutate(af_case *c, struct af_rng *r);
/* New seeds for what no compile key names: the block table's shuffle, sinks, random slopes. */
void af_serving_revalue(af_case *c, struct af_rng *r);

#endif
