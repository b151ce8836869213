/* frame_harness.c - a second libFuzzer target: what a worker sends. A worker is another
 * process, possibly broken or hostile, and its frames reach attnfuzz's reader unchecked:
 * every input is one frame body (the bytes after the length) read as a hello and as the
 * result of a fixed case (B 1, Hq 2, Sq 3, Dv 2; conventions.dropout keep_mask, so a keep
 * mask is required where the case has dropout), and a result the reader accepts is copied
 * out as attnfuzz would (af_wp_copy_out, af_wp_copy_keep). Under AddressSanitizer a read
 * outside the frame is a crash. The reader's JSON is also held to cJSON: a header the
 * token reader (json_scan.h) accepts must parse in cJSON (lone \u surrogates aside, which
 * cJSON refuses).
 *
 *   scripts/fuzz_smoke_libfuzzer.sh builds and runs it briefly (seeds: fuzz/frame_seeds/). */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/case.h"
#include "json_scan.h"
#include "worker_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static af_case c;
    static bool ready;
    if (!ready) {
        af_case_default(&c);
        c.q_heads = c.kv_heads = 2;
        c.q_len = 3;
        c.kv_len = 4;
        c.head_dim = c.v_head_dim = 2;
        ready = true;
    }
    af_error err;
    af_wp_hello hello;
    (void)af_wp_parse_hello(data, size, &hello, &err);

    af_wp_hello keep = {0};
    keep.dropout = AF_WP_DROPOUT_KEEP_MASK;
    af_wp_result r;
    const uint8_t *payload = NULL;
    if (af_wp_parse_result(data, size, 5, &c, &keep, &r, &payload, &err) == AF_OK && r.status == AF_WP_OK) {
        double out[1 * 2 * 3 * 2];
        uint8_t kept[1 * 2 * 3 * 4];
        af_tensor dst;
        size_t ne[4] = {1, 2, 3, 2};
        af_tensor_contiguous(&dst, AF_F64, 4, ne);
        dst.data = out;
        af_wp_copy_out(&r, payload, &c, &dst);
        if (r.has_keep) af_wp_copy_keep(&r, payload, &c, kept);
    }

    /* the token reader against cJSON on the header (up to the first newline) */
    const char *text = (const char *)data;
    const char *nl = memchr(text, '\n', size);
    size_t hlen = nl ? (size_t)(nl - text) : size;
    af_js_tok toks[256];
    size_t used;
    long nt = af_js_parse(text, hlen, toks, 256, &used);
    if (nt >= 0 && used == hlen && !memmem(text, hlen, "\\ud", 3) && !memmem(text, hlen, "\\uD", 3)) {
        cJSON *j = cJSON_ParseWithLength(text, hlen);
        if (!j) abort(); /* accepted by the protocol's reader, refused by cJSON */
        cJSON_Delete(j);
    }
    return 0;
}
