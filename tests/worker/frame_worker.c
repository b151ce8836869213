/* frame_worker.c - a worker that answers with hand-written frames, for the protocol tests
 * (tests/test_worker_proto.c): it says hello, answers every run with an all-zero f32
 * output of the right shape, except on cases with q_len == 2, where it writes the broken
 * frame MODE names:
 *
 *   frame_worker MODE
 *
 *   short      the header declares 4 bytes more of out than the payload holds
 *   badjson    a header that is not JSON
 *   nonewline  a JSON header and no newline after it
 *   status     status "maybe"
 *   shape      out with q_len + 1 rows
 *   id         the request's id + 1
 *   dtype      out of dtype bool
 *   extra      8 payload bytes more than the tensors need
 *   noout      status ok without tensor out
 *   huge       a length prefix of 0xfffffff0 (over any limit), then nothing
 *   empty      a length prefix of 0
 *   truncated  a length prefix of 1000, 10 bytes, then exit 0 (a crash)
 *   hello      a second hello instead of a result
 *   ok         never breaks (the control)
 *
 * Only cJSON: the bytes are written here, not through attnfuzz. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint8_t *fw_buf;
static size_t fw_cap;

/* One frame into fw_buf; its length, or -1 at end of input. */
static long fw_read(void) {
    uint8_t len[4];
    if (fread(len, 1, 4, stdin) != 4) return -1;
    size_t n = (size_t)len[0] | (size_t)len[1] << 8 | (size_t)len[2] << 16 | (size_t)len[3] << 24;
    if (n + 1 > fw_cap) {
        fw_cap = n + 1;
        fw_buf = realloc(fw_buf, fw_cap);
        if (!fw_buf) exit(1);
    }
    if (fread(fw_buf, 1, n, stdin) != n) return -1;
    return (long)n;
}

static void fw_len(size_t n) {
    uint8_t len[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
    fwrite(len, 1, 4, stdout);
}

static int fw_hold; /* fw_frame leaves the frame in stdout's buffer */

/* A frame: header, a newline unless nl is 0, then plen zero bytes. */
static void fw_frame(const char *header, int nl, size_t plen) {
    size_t hl = strlen(header);
    fw_len(hl + (nl ? 1 : 0) + plen);
    fwrite(header, 1, hl, stdout);
    if (nl) fputc('\n', stdout);
    for (size_t i = 0; i < plen; i++) fputc(0, stdout);
    if (!fw_hold) fflush(stdout);
}

static const char fw_hello[] =
    "{\"type\":\"hello\",\"protocol\":1,\"name\":\"frame_worker\",\"version\":\"1\",\"variant\":\"%s\","
    "\"caps\":[\"f32\",\"gqa\",\"cross\",\"dv\",\"scale\"],\"layouts\":[\"bhsd\"],\"dtypes\":[\"f32\"]}";

static double fw_num(const cJSON *o, const char *k) {
    const cJSON *x = cJSON_GetObjectItem(o, k);
    return cJSON_IsNumber(x) ? x->valuedouble : 0.0;
}

static void fw_answer(const char *mode, const cJSON *req) {
    const cJSON *c = cJSON_GetObjectItem(req, "case");
    unsigned long long id = (unsigned long long)fw_num(req, "id");
    size_t B = (size_t)fw_num(c, "batch"), H = (size_t)fw_num(c, "q_heads"), S = (size_t)fw_num(c, "q_len");
    size_t D = (size_t)fw_num(c, "v_head_dim");
    int bad = S == 2 && strcmp(mode, "ok") != 0;
    const char *m = bad ? mode : "ok";
    const char *status = strcmp(m, "status") == 0 ? "maybe" : "ok";
    const char *dtype = strcmp(m, "dtype") == 0 ? "bool" : "f32";
    size_t es = strcmp(m, "dtype") == 0 ? 1 : 4;
    size_t rows = strcmp(m, "shape") == 0 ? S + 1 : S;
    size_t need = B * H * rows * D * es;
    size_t plen = strcmp(m, "short") == 0 ? need - 4 : strcmp(m, "extra") == 0 ? need + 8 : need;
    if (strcmp(m, "id") == 0) id++;
    char hdr[1024];
    if (strcmp(m, "badjson") == 0) {
        fw_frame("{\"type\":\"result\",\"id\":,\"status\":\"ok\"}", 1, 0);
        return;
    }
    if (strcmp(m, "huge") == 0) {
        fw_len(0xfffffff0u);
        fflush(stdout);
        return;
    }
    if (strcmp(m, "empty") == 0) {
        fw_len(0);
        fflush(stdout);
        return;
    }
    if (strcmp(m, "truncated") == 0) {
        fw_len(1000);
        fwrite("{\"type\":\"r", 1, 10, stdout);
        fflush(stdout);
        exit(0);
    }
    if (strcmp(m, "hello") == 0) {
        snprintf(hdr, sizeof hdr, fw_hello, "again");
        fw_frame(hdr, 1, 0);
        return;
    }
    if (strcmp(m, "noout") == 0) {
        snprintf(hdr, sizeof hdr, "{\"type\":\"result\",\"id\":%llu,\"status\":\"ok\",\"tensors\":[]}", id);
        fw_frame(hdr, 1, 0);
        return;
    }
    snprintf(hdr, sizeof hdr,
             "{\"type\":\"result\",\"id\":%llu,\"status\":\"%s\",\"tensors\":[{\"name\":\"out\",\"dtype\":\"%s\","
             "\"shape\":[%zu,%zu,%zu,%zu],\"strides\":[%zu,%zu,%zu,%zu],\"offset\":0}]}",
             id, status, dtype, B, H, rows, D, H * rows * D * es, rows * D * es, D * es, es);
    /* twice: the answer two times in one write (atomic below PIPE_BUF: read together) */
    fw_hold = strcmp(m, "twice") == 0;
    fw_frame(hdr, strcmp(m, "nonewline") != 0, strcmp(m, "nonewline") == 0 ? 0 : plen);
    fw_hold = 0;
    if (strcmp(m, "twice") == 0) fw_frame(hdr, 1, plen);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "ok";
    char hello[1024];
    snprintf(hello, sizeof hello, fw_hello, mode);
    fw_frame(hello, 1, 0);
    for (;;) {
        long n = fw_read();
        if (n < 0) return 0;
        const char *end = NULL;
        cJSON *h = cJSON_ParseWithLengthOpts((const char *)fw_buf, (size_t)n, &end, 0);
        if (!h) return 1;
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(h, "type"));
        if (type && strcmp(type, "bye") == 0) {
            cJSON_Delete(h);
            return 0;
        }
        fprintf(stderr, "frame_worker: %s request\n", type ? type : "(untyped)");
        if (type && strcmp(type, "run") == 0) fw_answer(mode, h);
        cJSON_Delete(h);
    }
}
