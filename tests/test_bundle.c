/* test_bundle.c - .npy.zst arrays, repro bundles and heatmaps (bundle.h).
 *
 * Expected values come from outside the code under test: .npy headers and zstd frames
 * built by hand here, the oracle's own reference and metrics, libpng's reader. The round
 * trip also leaves bundles in $AF_BINARY_DIR/bundle-from-c for the Python loader's test
 * (tests/bundle.cmake), which recomputes their metrics with numpy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <png.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/bundle.h"
#include "attnfuzz/mem.h"
#include "attnfuzz/oracle.h"
#include "attnfuzz/rng.h"
#include "attnfuzz/tensor.h"

/* --- helpers ------------------------------------------------------------------------ */

static char g_dir[PATH_MAX]; /* a fresh temporary directory per test */

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    return flag == FTW_DP ? rmdir(p) : unlink(p);
}

static void rm_rf(const char *path) { nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static int setup_dir(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/af_test_bundle_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown_dir(void **state) {
    (void)state;
    rm_rf(g_dir);
    return 0;
}

static void path_in(char *buf, const char *dir, const char *name) {
    int n = snprintf(buf, PATH_MAX, "%s/%s", dir, name);
    assert_true(n > 0 && n < PATH_MAX);
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static uint8_t *read_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    assert_non_null(buf);
    for (;;) {
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        if (r == 0) break;
        len += r;
    }
    fclose(f);
    buf = realloc(buf, len + 1); /* NUL-terminated for text files */
    assert_non_null(buf);
    buf[len] = 0;
    *n = len;
    return buf;
}

static uint8_t *zstd_compress(const void *src, size_t n, size_t *out_n) {
    size_t cap = ZSTD_compressBound(n);
    uint8_t *dst = malloc(cap);
    assert_non_null(dst);
    size_t r = ZSTD_compress(dst, cap, src, n, 3);
    assert_false(ZSTD_isError(r));
    *out_n = r;
    return dst;
}

/* A frame without a content size, as streaming writers (python zstandard's stream_writer)
 * produce. */
static uint8_t *zstd_compress_unsized(const void *src, size_t n, size_t *out_n) {
    size_t cap = ZSTD_compressBound(n);
    uint8_t *dst = malloc(cap);
    assert_non_null(dst);
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0)));
    size_t r = ZSTD_compress2(cctx, dst, cap, src, n);
    assert_false(ZSTD_isError(r));
    ZSTD_freeCCtx(cctx);
    assert_true(ZSTD_getFrameContentSize(dst, r) == ZSTD_CONTENTSIZE_UNKNOWN);
    *out_n = r;
    return dst;
}

static uint8_t *zstd_decompress(const uint8_t *src, size_t n, size_t *out_n) {
    unsigned long long fcs = ZSTD_getFrameContentSize(src, n);
    assert_true(fcs != ZSTD_CONTENTSIZE_ERROR && fcs != ZSTD_CONTENTSIZE_UNKNOWN);
    uint8_t *dst = malloc(fcs ? fcs : 1);
    assert_non_null(dst);
    size_t r = ZSTD_decompress(dst, fcs, src, n);
    assert_false(ZSTD_isError(r));
    assert_int_equal(r, fcs);
    *out_n = r;
    return dst;
}

/* A .npy 1.0 (major 1) or 2.0 file: magic, version, little-endian header length, the dict
 * padded with spaces to a multiple of 64 and '\n', then data. Written independently of
 * npy.c. */
static uint8_t *npy_bytes(int major, const char *dict, const void *data, size_t data_len, size_t *out_n) {
    size_t pre = major == 1 ? 10 : 12;
    size_t total_hdr = (pre + strlen(dict) + 1 + 63) / 64 * 64;
    size_t hlen = total_hdr - pre;
    uint8_t *buf = malloc(total_hdr + data_len + 1);
    assert_non_null(buf);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)major;
    buf[7] = 0;
    buf[8] = (uint8_t)(hlen & 0xff);
    buf[9] = (uint8_t)(hlen >> 8);
    if (major != 1) {
        buf[10] = (uint8_t)(hlen >> 16);
        buf[11] = (uint8_t)(hlen >> 24);
    }
    memset(buf + pre, ' ', hlen);
    memcpy(buf + pre, dict, strlen(dict));
    buf[total_hdr - 1] = '\n';
    if (data_len) memcpy(buf + total_hdr, data, data_len);
    *out_n = total_hdr + data_len;
    return buf;
}

/* Writes the .npy bytes compressed (one sized frame) to path. */
static void write_npy_zst(const char *path, const char *dict, const void *data, size_t data_len) {
    size_t n, zn;
    uint8_t *raw = npy_bytes(1, dict, data, data_len, &n);
    uint8_t *z = zstd_compress(raw, n, &zn);
    write_bytes(path, z, zn);
    free(z);
    free(raw);
}

static void expect_error(af_status st, const af_error *err, af_status code, const char *needle) {
    if (st != code || !strstr(err->msg, needle)) {
        print_error("expected %s with \"%s\", got %s: %s\n", af_status_str(code), needle, af_status_str(st),
                    err->msg);
        fail();
    }
}

static void expect_ok(af_status st, const af_error *err) {
    if (st != AF_OK) {
        print_error("expected ok, got %s: %s\n", af_status_str(st), err->msg);
        fail();
    }
}

static bool same_double(double a, double b) { return a == b ? (a != 0.0 || signbit(a) == signbit(b)) : isnan(a) && isnan(b); }

static size_t count_entries(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (!prefix || strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    }
    closedir(d);
    return n;
}

static size_t count_containing(const char *dir, const char *needle) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, needle)) n++;
    closedir(d);
    return n;
}

/* --- .npy.zst --------------------------------------------------------------------------- */

static void test_bundle_name(void **state) {
    (void)state;
    char buf[64];
    af_bundle_name(AF_KIND_DIVERGE, 0x0123456789abcdefull, buf, sizeof buf);
    assert_string_equal(buf, "diverge-0123456789abcdef");
    af_bundle_name(AF_KIND_NAN_MISMATCH, 0xff, buf, sizeof buf);
    assert_string_equal(buf, "nan_mismatch-00000000000000ff");
}

static void fill_pattern(af_array *a, unsigned salt) {
    size_t n = af_array_numel(a);
    for (size_t i = 0; i < n; i++) {
        unsigned k = (unsigned)i * 2654435761u + salt;
        switch (a->dtype) {
        case AF_F32: {
            static const float special[] = {-0.0f, INFINITY, -INFINITY, 1e-45f, 3.4028235e38f};
            float x = (float)((int)(k % 2001u) - 1000) / 7.0f;
            if (i % 11 == 3) x = special[(i / 11) % 5];
            if (i % 13 == 5) x = nanf("");
            ((float *)a->data)[i] = x;
            break;
        }
        case AF_F64: {
            double x = ((double)(k % 100003u) - 50000.0) * 1e-3;
            if (i % 7 == 2) x = i % 2 ? -HUGE_VAL : 4.9e-324;
            if (i % 9 == 4) x = nan("");
            ((double *)a->data)[i] = x;
            break;
        }
        case AF_BOOL: ((uint8_t *)a->data)[i] = (k >> 3) & 1u; break;
        case AF_F16:
        case AF_BF16:
        case AF_I32:
        case AF_E4M3:
        case AF_E5M2:
        case AF_DTYPE_COUNT: fail();
        }
    }
}

static void test_npy_round_trip(void **state) {
    (void)state;
    static const struct {
        int ndim;
        size_t shape[5];
    } shapes[] = {{0, {0}},       {1, {0}},       {1, {1}},          {1, {7}},         {2, {2, 3}},
                  {2, {3, 0}},    {3, {2, 1, 5}}, {4, {1, 2, 3, 4}}, {4, {2, 3, 17, 9}}, {5, {2, 1, 3, 1, 2}},
                  {5, {0, 2, 3, 4, 5}}};
    static const af_dtype dts[] = {AF_F32, AF_F64, AF_BOOL};
    char path[PATH_MAX];
    path_in(path, g_dir, "a.npy.zst");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t t = 0; t < 3; t++) {
            af_array a = {.dtype = dts[t], .ndim = shapes[s].ndim};
            memcpy(a.shape, shapes[s].shape, sizeof a.shape);
            size_t n = af_array_numel(&a), es = af_dtype_size(a.dtype);
            a.data = n ? calloc(n, es) : NULL;
            if (n) fill_pattern(&a, (unsigned)(s * 3 + t));
            af_error err = {0};
            expect_ok(af_npy_write_zst(path, &a, &err), &err);
            af_array b;
            expect_ok(af_npy_read_zst(path, &b, &err), &err);
            assert_int_equal(b.dtype, a.dtype);
            assert_int_equal(b.ndim, a.ndim);
            for (int d = 0; d < a.ndim; d++) assert_int_equal(b.shape[d], a.shape[d]);
            assert_int_equal(af_array_numel(&b), n);
            if (n) assert_memory_equal(b.data, a.data, n * es);
            af_array_free(&b);
            assert_null(b.data);
            free(a.data);
        }
    assert_int_equal(count_containing(g_dir, ".tmp."), 0);
}

/* The bytes inside the frame are exactly the .npy numpy writes. */
static void test_npy_written_bytes(void **state) {
    (void)state;
    static const struct {
        af_dtype dt;
        int ndim;
        size_t shape[5];
        const char *dict;
    } cases[] = {
        {AF_F32, 2, {2, 3}, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"},
        {AF_F64, 1, {5}, "{'descr': '<f8', 'fortran_order': False, 'shape': (5,), }"},
        {AF_F64, 0, {0}, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }"},
        {AF_BOOL, 4, {1, 2, 1, 3}, "{'descr': '|b1', 'fortran_order': False, 'shape': (1, 2, 1, 3), }"},
    };
    char path[PATH_MAX];
    path_in(path, g_dir, "w.npy.zst");
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        af_array a = {.dtype = cases[k].dt, .ndim = cases[k].ndim};
        memcpy(a.shape, cases[k].shape, sizeof a.shape);
        size_t nbytes = af_array_numel(&a) * af_dtype_size(a.dtype);
        a.data = calloc(1, nbytes);
        fill_pattern(&a, 9);
        af_error err = {0};
        expect_ok(af_npy_write_zst(path, &a, &err), &err);
        size_t zn, n, want_n;
        uint8_t *z = read_bytes(path, &zn);
        uint8_t *raw = zstd_decompress(z, zn, &n);
        uint8_t *want = npy_bytes(1, cases[k].dict, a.data, nbytes, &want_n);
        assert_int_equal(n, want_n);
        assert_memory_equal(raw, want, n);
        assert_int_equal((10 + raw[8] + 256 * raw[9]) % 64, 0);
        free(want);
        free(raw);
        free(z);
        free(a.data);
    }
}

static void test_npy_handwritten(void **state) {
    (void)state;
    char path[PATH_MAX];
    af_error err = {0};
    af_array a;

    /* float64, 1-d */
    const double d3[3] = {1.5, -2.25, 1e300};
    path_in(path, g_dir, "d.npy.zst");
    write_npy_zst(path, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", d3, sizeof d3);
    expect_ok(af_npy_read_zst(path, &a, &err), &err);
    assert_int_equal(a.dtype, AF_F64);
    assert_int_equal(a.ndim, 1);
    assert_int_equal(a.shape[0], 3);
    assert_true(((double *)a.data)[0] == 1.5 && ((double *)a.data)[1] == -2.25 && ((double *)a.data)[2] == 1e300);
    af_array_free(&a);

    /* version 2.0, double quotes, another key order, no trailing comma, Python 2 long */
    const float f4[4] = {1.0f, -0.5f, 65504.0f, 1e-40f};
    size_t n, zn;
    uint8_t *raw = npy_bytes(2, "{\"shape\": (2, 2L), \"fortran_order\": False, \"descr\": \"<f4\"}", f4, sizeof f4, &n);
    uint8_t *z = zstd_compress(raw, n, &zn);
    path_in(path, g_dir, "f.npy.zst");
    write_bytes(path, z, zn);
    expect_ok(af_npy_read_zst(path, &a, &err), &err);
    assert_int_equal(a.dtype, AF_F32);
    assert_int_equal(a.ndim, 2);
    assert_int_equal(a.shape[0], 2);
    assert_int_equal(a.shape[1], 2);
    assert_memory_equal(a.data, f4, sizeof f4);
    af_array_free(&a);
    free(z);

    /* the same bytes uncompressed, read as a plain .npy */
    path_in(path, g_dir, "f.npy");
    write_bytes(path, raw, n);
    expect_ok(af_npy_read_zst(path, &a, &err), &err);
    assert_memory_equal(a.data, f4, sizeof f4);
    af_array_free(&a);

    /* a frame without a content size (streaming writers) */
    z = zstd_compress_unsized(raw, n, &zn);
    path_in(path, g_dir, "u.npy.zst");
    write_bytes(path, z, zn);
    expect_ok(af_npy_read_zst(path, &a, &err), &err);
    assert_int_equal(a.shape[0], 2);
    assert_memory_equal(a.data, f4, sizeof f4);
    af_array_free(&a);
    free(z);
    free(raw);

    /* float16: 1, -2, +inf, smallest subnormal */
    const uint16_t h4[4] = {0x3c00, 0xc000, 0x7c00, 0x0001};
    path_in(path, g_dir, "h.npy.zst");
    write_npy_zst(path, "{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }", h4, sizeof h4);
    expect_ok(af_npy_read_zst(path, &a, &err), &err);
    assert_int_equal(a.dtype, AF_F16);
    assert_true(af_dtype_load(AF_F16, a.data, 0) == 1.0);
    assert_true(af_dtype_load(AF_F16, a.data, 2) == -2.0);
    assert_true(isinf(af_dtype_load(AF_F16, a.data, 4)));
    assert_true(af_dtype_load(AF_F16, a.data, 6) == 0x1p-24);
    af_array_free(&a);

    /* uint8 reads as bool, nonzero = true, its bytes kept (an FP8 case's stored bits);
     * '|b1' written by another tool with a byte other than 0 and 1 reads as 0 and 1 */
    const uint8_t u3[3] = {0, 1, 7};
    path_in(path, g_dir, "b.npy.zst");
    write_npy_zst(path, "{'descr': '|u1', 'fortran_order': False, 'shape': (1, 3), }", u3, sizeof u3);
    expect_ok(af_npy_read_zst(path, &a, &err), &err);
    assert_int_equal(a.dtype, AF_BOOL);
    assert_true(a.u8);
    assert_int_equal(((uint8_t *)a.data)[0], 0);
    assert_int_equal(((uint8_t *)a.data)[1], 1);
    assert_int_equal(((uint8_t *)a.data)[2], 7);
    assert_true(af_dtype_load(AF_BOOL, a.data, 2) == 1.0);
    af_array_free(&a);
    write_npy_zst(path, "{'descr': '|b1', 'fortran_order': False, 'shape': (1, 3), }", u3, sizeof u3);
    expect_ok(af_npy_read_zst(path, &a, &err), &err);
    assert_int_equal(a.dtype, AF_BOOL);
    assert_false(a.u8);
    assert_int_equal(((uint8_t *)a.data)[2], 1);
    af_array_free(&a);

    /* 0-d and empty */
    const double one = 42.0;
    path_in(path, g_dir, "s.npy.zst");
    write_npy_zst(path, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }", &one, sizeof one);
    expect_ok(af_npy_read_zst(path, &a, &err), &err);
    assert_int_equal(a.ndim, 0);
    assert_int_equal(af_array_numel(&a), 1);
    assert_true(((double *)a.data)[0] == 42.0);
    af_array_free(&a);
    write_npy_zst(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", NULL, 0);
    expect_ok(af_npy_read_zst(path, &a, &err), &err);
    assert_int_equal(a.ndim, 2);
    assert_int_equal(af_array_numel(&a), 0);
    af_array_free(&a);
}

static void expect_format(const char *path, const char *needle) {
    af_error err = {0};
    af_array a;
    af_status st = af_npy_read_zst(path, &a, &err);
    expect_error(st, &err, AF_ERR_FORMAT, path);
    if (needle) expect_error(st, &err, AF_ERR_FORMAT, needle);
    assert_null(a.data);
}

static void test_npy_bad(void **state) {
    (void)state;
    char path[PATH_MAX];
    path_in(path, g_dir, "bad.npy.zst");
    const float f2[2] = {1, 2};
    static const struct {
        const char *dict, *needle;
    } dicts[] = {
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", "fortran_order"},
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", "descr"},
        {"{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", "descr"},
        {"{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", "descr"},
        {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", "descr"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", "data"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", "data"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4000000000, 4000000000), }", "large"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }", "overflow"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 2), }", "dimensions"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': [2], }", "shape"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", "shape"},
        {"{'descr': '<f4', 'fortran_order': False, }", "lacks"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", "extra"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", "descr"},
        {"{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", "header"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } x", "after"},
        {"['descr', '<f4']", "dict"},
        {"", "dict"},
    };
    for (size_t k = 0; k < sizeof dicts / sizeof dicts[0]; k++) {
        write_npy_zst(path, dicts[k].dict, f2, sizeof f2);
        expect_format(path, dicts[k].needle);
    }
    /* bad magic, bad version, header length past the end */
    size_t n, zn;
    uint8_t *raw = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", f2, sizeof f2, &n);
    static const struct {
        size_t at;
        uint8_t val;
        const char *needle;
    } pokes[] = {{0, 0x92, "magic"}, {3, 'n', "magic"}, {6, 9, "version"}, {7, 1, "version"}, {9, 0xff, "truncated"}};
    for (size_t k = 0; k < sizeof pokes / sizeof pokes[0]; k++) {
        uint8_t save = raw[pokes[k].at];
        raw[pokes[k].at] = pokes[k].val;
        uint8_t *z = zstd_compress(raw, n, &zn);
        write_bytes(path, z, zn);
        expect_format(path, pokes[k].needle);
        free(z);
        raw[pokes[k].at] = save;
    }
    /* not zstd at all; empty; a zstd frame of nothing */
    write_bytes(path, raw, n);
    expect_format(path, "magic");
    write_bytes(path, "", 0);
    expect_format(path, NULL);
    uint8_t *z = zstd_compress("", 0, &zn);
    write_bytes(path, z, zn);
    expect_format(path, NULL);
    free(z);
    /* a frame header that claims far more than the file can hold */
    z = zstd_compress(raw, n, &zn);
    uint8_t fake[32] = {0x28, 0xb5, 0x2f, 0xfd, 0xc0 /* 8-byte content size, single segment */};
    uint64_t huge = 1ull << 40;
    memcpy(fake + 5, &huge, 8);
    write_bytes(path, fake, sizeof fake);
    expect_format(path, NULL);
    free(z);
    free(raw);
    /* a missing file is the operating system's refusal */
    path_in(path, g_dir, "missing.npy.zst");
    af_error err = {0};
    af_array a;
    expect_error(af_npy_read_zst(path, &a, &err), &err, AF_ERR_IO, path);
}

/* Every prefix of a valid file is an error naming the file, never a short array. */
static void test_npy_truncated(void **state) {
    (void)state;
    float f[15];
    for (int i = 0; i < 15; i++) f[i] = (float)i * 0.25f - 1.0f;
    size_t n, zn, un;
    uint8_t *raw = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 5), }", f, sizeof f, &n);
    uint8_t *z = zstd_compress(raw, n, &zn);
    uint8_t *u = zstd_compress_unsized(raw, n, &un);
    char path[PATH_MAX], plain[PATH_MAX];
    path_in(path, g_dir, "t.npy.zst");
    path_in(plain, g_dir, "t.npy");
    for (size_t len = 0; len < zn; len++) {
        write_bytes(path, z, len);
        expect_format(path, NULL);
    }
    for (size_t len = 0; len < un; len++) {
        write_bytes(path, u, len);
        expect_format(path, NULL);
    }
    for (size_t len = 0; len < n; len++) {
        write_bytes(plain, raw, len);
        expect_format(plain, NULL);
    }
    free(u);
    free(z);
    free(raw);
}

/* Random damage to the compressed file and to the header under the compression: the
 * reader returns an array or AF_ERR_FORMAT naming the file, never crashes (run it under
 * ASan/UBSan). */
static void test_npy_corrupt(void **state) {
    (void)state;
    double d[40];
    for (int i = 0; i < 40; i++) d[i] = sin((double)i);
    size_t n, zn;
    uint8_t *raw = npy_bytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 4, 5), }", d, sizeof d, &n);
    uint8_t *z = zstd_compress(raw, n, &zn);
    uint8_t *buf = malloc(n > zn ? n : zn);
    char path[PATH_MAX];
    path_in(path, g_dir, "c.npy.zst");
    af_rng rng;
    af_rng_init(&rng, 1234, 0);
    size_t ok = 0, bad = 0;
    for (int it = 0; it < 3000; it++) {
        bool header = it % 2 == 1;
        const uint8_t *src = header ? raw : z;
        size_t len = header ? n : zn;
        memcpy(buf, src, len);
        int flips = 1 + (int)af_rng_below(&rng, 4);
        for (int k = 0; k < flips; k++) {
            size_t at = header ? af_rng_below(&rng, 64) : af_rng_below(&rng, (uint32_t)len);
            buf[at] = (uint8_t)af_rng_u32(&rng);
        }
        if (header) {
            size_t hz;
            uint8_t *hzb = zstd_compress(buf, len, &hz);
            write_bytes(path, hzb, hz);
            free(hzb);
        } else {
            write_bytes(path, buf, len);
        }
        af_error err = {0};
        af_array a;
        af_status st = af_npy_read_zst(path, &a, &err);
        if (st == AF_OK) {
            ok++;
            assert_true(a.ndim >= 0 && a.ndim <= AF_MAX_DIMS);
            af_array_free(&a);
        } else {
            bad++;
            expect_error(st, &err, AF_ERR_FORMAT, path);
        }
    }
    assert_true(bad > 0);
    free(buf);
    free(z);
    free(raw);
}

/* ENOSPC, simulated with a file size limit (EFBIG on the write, as a full disk gives a
 * short write): AF_ERR_IO naming the path, and no temporary file left behind. */
static void test_npy_write_errors(void **state) {
    (void)state;
    af_error err = {0};
    float f[4] = {1, 2, 3, 4};
    af_array a = {.dtype = AF_F32, .ndim = 1, .shape = {4}, .data = f};
    char path[PATH_MAX], file[PATH_MAX];
    path_in(path, g_dir, "no/such/dir/x.npy.zst");
    expect_error(af_npy_write_zst(path, &a, &err), &err, AF_ERR_IO, path);
    path_in(file, g_dir, "regular");
    write_bytes(file, "x", 1);
    path_in(path, g_dir, "regular/x.npy.zst");
    expect_error(af_npy_write_zst(path, &a, &err), &err, AF_ERR_IO, path);
    a.dtype = AF_BF16;
    path_in(path, g_dir, "x.npy.zst");
    expect_error(af_npy_write_zst(path, &a, &err), &err, AF_ERR_INVALID, path);

    size_t big_n = 1 << 16;
    float *big = malloc(big_n * sizeof *big);
    af_rng rng;
    af_rng_init(&rng, 5, 0);
    for (size_t i = 0; i < big_n; i++) big[i] = (float)af_rng_normal(&rng); /* incompressible */
    af_array b = {.dtype = AF_F32, .ndim = 1, .shape = {big_n}, .data = big};
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 4096;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    af_status st = af_npy_write_zst(path, &b, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    expect_error(st, &err, AF_ERR_IO, path);
    assert_int_equal(count_containing(g_dir, ".tmp."), 0);
    assert_int_equal(access(path, F_OK), -1);
    free(big);
}

/* --- bundles ----------------------------------------------------------------------------- */

#define MAX_OUT 5

typedef struct run {
    af_case c;
    af_inputs *in;
    af_oracle *o;
    af_tensor outs[MAX_OUT];
    af_bundle_output bo[MAX_OUT];
    char names[MAX_OUT][64], versions[MAX_OUT][32];
    size_t n;
    af_bundle_spec spec;
    uint8_t enc[AF_CASE_ENCODED_MAX];
} run;

/* Runs case c through the oracle, explicit, fused and a mutant, and fills a spec. */
static void run_make(run *r, const af_case *c, uint64_t salt) {
    memset(r, 0, sizeof *r);
    r->c = *c;
    af_error err = {0};
    r->in = af_inputs_create();
    assert_non_null(r->in);
    expect_ok(af_inputs_generate(r->in, &r->c, &err), &err);
    const af_case_tensors *t = af_inputs_get(r->in);
    r->o = af_oracle_create(NULL);
    expect_ok(af_oracle_prepare(r->o, t, &err), &err);
    static const char *const names[] = {"explicit", "fused", "mutant:scale_sqrt_q_only", "mutant:silent_tf32"};
    af_kind kind = AF_KIND_OK;
    for (size_t k = 0; k < 4; k++) {
        af_backend *be = NULL;
        expect_ok(af_backend_open(names[k], &be, &err), &err);
        if (!af_backend_supports(be, &r->c, NULL, 0)) {
            af_backend_close(be);
            continue;
        }
        size_t i = r->n++;
        snprintf(r->names[i], sizeof r->names[i], "%s", af_backend_name(be));
        snprintf(r->versions[i], sizeof r->versions[i], "%s", af_backend_version(be));
        af_backend_out_shape(be, &r->c, &r->outs[i]);
        r->outs[i].data = af_malloc(af_tensor_span(&r->outs[i]));
        assert_non_null(r->outs[i].data);
        expect_ok(af_backend_run(be, t, &r->outs[i], &err), &err);
        af_backend_close(be);
        af_bundle_output *bo = &r->bo[i];
        bo->backend = r->names[i];
        bo->version = r->versions[i];
        bo->out = &r->outs[i];
        expect_ok(af_oracle_compare(r->o, &r->outs[i], &bo->result, &err), &err);
        if (kind == AF_KIND_OK) kind = bo->result.kind;
    }
    /* a backend that failed: no output, an error message */
    size_t i = r->n++;
    snprintf(r->names[i], sizeof r->names[i], "worker:./broken --flag");
    r->bo[i].backend = r->names[i];
    r->bo[i].version = NULL;
    r->bo[i].out = NULL;
    r->bo[i].result.kind = AF_KIND_CRASH;
    r->bo[i].result.m.max_abs = INFINITY;
    r->bo[i].result.m.worst_ratio = -INFINITY;
    r->bo[i].result.m.max_rel = NAN;
    r->bo[i].error = "worker died: signal 11";

    af_bundle_spec *s = &r->spec;
    s->c = &r->c;
    s->input_len = af_case_encode(&r->c, r->enc, sizeof r->enc);
    s->input = r->enc;
    s->tensors = t;
    s->ref = af_oracle_ref(r->o);
    s->kind = kind == AF_KIND_OK ? AF_KIND_DIVERGE : kind;
    s->who = "explicit,fused";
    s->signature = af_signature(s->kind, s->who, &r->c) ^ salt;
    s->outputs = r->bo;
    s->n_outputs = r->n;
    expect_ok(af_oracle_tolerance(r->o, &s->tol, &err), &err);
}

static void run_free(run *r) {
    for (size_t i = 0; i < r->n; i++) af_free(r->outs[i].data);
    af_oracle_destroy(r->o);
    af_inputs_destroy(r->in);
}

static bool views_equal(const af_view *a, const af_view *b) {
    for (int d = 0; d < 4; d++)
        if (a->ne[d] != b->ne[d]) return false;
    for (size_t i0 = 0; i0 < a->ne[0]; i0++)
        for (size_t i1 = 0; i1 < a->ne[1]; i1++)
            for (size_t i2 = 0; i2 < a->ne[2]; i2++)
                for (size_t i3 = 0; i3 < a->ne[3]; i3++)
                    if (!same_double(af_view_get(a, i0, i1, i2, i3), af_view_get(b, i0, i1, i2, i3))) return false;
    return true;
}

static bool metrics_equal(const af_metrics *a, const af_metrics *b) {
    return same_double(a->max_abs, b->max_abs) && same_double(a->max_rel, b->max_rel) &&
           same_double(a->rel_fro, b->rel_fro) && same_double(a->worst_ratio, b->worst_ratio) &&
           same_double(a->worst_out, b->worst_out) && same_double(a->worst_ref, b->worst_ref) &&
           memcmp(a->worst, b->worst, sizeof a->worst) == 0 && a->n_nan == b->n_nan && a->n_inf == b->n_inf &&
           a->n_masked_row_nan == b->n_masked_row_nan && a->n_masked_value_leak == b->n_masked_value_leak &&
           a->n_diverge == b->n_diverge &&
           a->n_unstable == b->n_unstable;
}

/* Everything written comes back: case, records, inputs, reference and outputs. */
static void check_bundle(const run *r, const char *dir) {
    af_error err = {0};
    af_bundle *b = NULL;
    expect_ok(af_bundle_read(dir, &b, &err), &err);
    const af_bundle_spec *s = &r->spec;
    assert_true(af_case_equal(af_bundle_case(b), &r->c));
    assert_string_equal(af_bundle_dir(b), dir);
    assert_int_equal(af_bundle_kind(b), s->kind);
    assert_true(af_bundle_signature(b) == s->signature);
    assert_string_equal(af_bundle_who(b), s->who);
    if (s->relation) {
        assert_string_equal(af_bundle_relation(b), s->relation);
    } else {
        assert_null(af_bundle_relation(b));
    }
    af_tolerance tol;
    assert_true(af_bundle_has_tolerance(b, &tol));
    assert_true(same_double(tol.atol, s->tol.atol) && same_double(tol.rtol, s->tol.rtol) &&
                same_double(tol.fudge, s->tol.fudge) && tol.honest == s->tol.honest);
    assert_int_equal(af_bundle_record_count(b), s->n_outputs);
    assert_null(af_bundle_record_at(b, s->n_outputs));

    double *ref = NULL;
    expect_ok(af_bundle_load_output(b, "ref", &ref, &err), &err);
    size_t n = (size_t)r->c.batch * r->c.q_heads * r->c.q_len * r->c.v_head_dim;
    assert_memory_equal(ref, af_oracle_ref(r->o), n * sizeof(double));

    for (size_t i = 0; i < s->n_outputs; i++) {
        const af_bundle_record *rec = af_bundle_record_at(b, i);
        const af_bundle_output *o = &s->outputs[i];
        assert_string_equal(rec->backend, o->backend);
        assert_string_equal(rec->version, o->version ? o->version : "");
        assert_int_equal(rec->kind, o->result.kind);
        assert_true(metrics_equal(&rec->m, &o->result.m));
        assert_int_equal(rec->has_output, o->out != NULL);
        if (!o->out) continue;
        double *out = NULL;
        expect_ok(af_bundle_load_output(b, o->backend, &out, &err), &err);
        double mx = 0.0;
        for (size_t e = 0; e < n; e++) {
            double want = o->out->dtype == AF_F64 ? ((const double *)o->out->data)[e]
                                                  : (double)((const float *)o->out->data)[e];
            assert_true(same_double(out[e], want));
            if (isfinite(out[e]) && isfinite(ref[e]) && fabs(out[e] - ref[e]) > mx) mx = fabs(out[e] - ref[e]);
        }
        /* the oracle's max_abs, recomputed from what the bundle holds */
        if (mx != rec->m.max_abs) {
            print_error("%s: max_abs recomputed %.17g, recorded %.17g\n", o->backend, mx, rec->m.max_abs);
            fail();
        }
        af_free(out);
    }
    af_free(ref);

    af_inputs *in = af_inputs_create();
    expect_ok(af_bundle_load_inputs(b, in, &err), &err);
    const af_case_tensors *t0 = r->spec.tensors, *t1 = af_inputs_get(in);
    assert_true(views_equal(&t0->qv, &t1->qv));
    assert_true(views_equal(&t0->kv, &t1->kv));
    assert_true(views_equal(&t0->vv, &t1->vv));
    if (r->c.amask.present) assert_true(views_equal(&t0->am, &t1->am));
    if (r->c.bmask.present) assert_true(views_equal(&t0->bm, &t1->bm));
    af_inputs_destroy(in);

    double *expected = (double *)1;
    expect_ok(af_bundle_load_expected(b, &expected, &err), &err);
    assert_null(expected);

    char path[PATH_MAX];
    path_in(path, dir, "input.bin");
    size_t len;
    uint8_t *bytes = read_bytes(path, &len);
    assert_int_equal(len, s->input_len);
    assert_memory_equal(bytes, s->input, len);
    free(bytes);

    /* case.json: the documented fields */
    path_in(path, dir, "case.json");
    char *text = (char *)read_bytes(path, &len);
    cJSON *root = cJSON_ParseWithLength(text, len);
    assert_non_null(root);
    assert_string_equal(cJSON_GetObjectItem(root, "format")->valuestring, "attnfuzz-bundle");
    assert_true(cJSON_GetObjectItem(root, "version")->valuedouble == 1.0);
    assert_int_equal(strlen(cJSON_GetObjectItem(root, "signature")->valuestring), 16);
    assert_true(cJSON_IsString(cJSON_GetObjectItem(root, "features")));
    assert_true(cJSON_IsString(cJSON_GetObjectItem(root, "replay")));
    const cJSON *files = cJSON_GetObjectItem(root, "files");
    size_t want_files = 6u + (r->c.amask.present ? 1u : 0u) + (r->c.bmask.present ? 1u : 0u);
    for (size_t i = 0; i < s->n_outputs; i++) want_files += s->outputs[i].out != NULL;
    assert_int_equal((size_t)cJSON_GetArraySize(files), want_files);
    assert_int_equal(count_entries(dir, NULL), want_files);
    const cJSON *f;
    cJSON_ArrayForEach(f, files) {
        path_in(path, dir, f->valuestring);
        assert_int_equal(access(path, R_OK), 0);
    }
    if (s->extra_json) {
        const cJSON *extra = cJSON_GetObjectItem(root, "extra");
        assert_non_null(extra);
        assert_true(cJSON_GetObjectItem(extra, "n")->valuedouble == 3.0);
    }
    const cJSON *be0 = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "backends"), (int)s->n_outputs - 1);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(be0, "output")));
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(be0, "metrics"), "max_abs")->valuestring, "inf");
    cJSON_Delete(root);
    free(text);
    af_bundle_free(b);
}

static void test_bundle_round_trip(void **state) {
    (void)state;
    char crashes[PATH_MAX];
    const char *bin = getenv("AF_BINARY_DIR");
    if (bin) {
        path_in(crashes, bin, "bundle-from-c"); /* left for the Python loader's test */
        rm_rf(crashes);
    } else {
        path_in(crashes, g_dir, "crashes");
    }
    af_rng rng;
    af_rng_init(&rng, 20240601, 7);
    size_t budget = (size_t)1 << 20;
    int packed = 0, amask = 0, bmask = 0, f16 = 0;
    for (int i = 0; i < 24; i++) {
        af_case c;
        af_case_generate(&c, &rng, budget, 4e6);
        if (i % 4 == 1) { /* packed: the three views share one buffer */
            c.t[AF_Q].layout = i % 8 == 1 ? AF_LAYOUT_QKV_BSH3D : AF_LAYOUT_QKV_CHANNELS_FIRST;
        }
        if (i % 4 == 2) { /* both masks, broadcasting over some dims */
            c.amask.present = true;
            c.amask.dims = (uint8_t)(AF_MDIM_K | (i % 8 == 2 ? AF_MDIM_Q : AF_MDIM_B));
            c.amask.dtype = i % 3 ? AF_F32 : AF_F16;
            c.amask.pattern = AF_MASK_RANDOM;
            c.amask.density = 60;
            c.bmask.present = true;
            c.bmask.dims = (uint8_t)(AF_MDIM_Q | AF_MDIM_K | AF_MDIM_H);
            c.bmask.pattern = AF_MASK_KEY_COLS;
            c.bmask.density = 40;
        }
        if (i % 6 == 3) c.dtype = AF_F16;
        af_case_repair(&c, budget);
        af_error err = {0};
        expect_ok(af_case_validate(&c, budget, &err), &err);
        packed += af_case_is_packed(&c);
        amask += c.amask.present;
        bmask += c.bmask.present;
        f16 += c.dtype != AF_F32;

        run r;
        run_make(&r, &c, (uint64_t)i);
        if (i % 2) r.spec.relation = "layout";
        if (i % 3 == 0) r.spec.extra_json = "{\"note\": \"from test_bundle\", \"n\": 3}";
        char path[PATH_MAX] = "";
        expect_ok(af_bundle_write(crashes, &r.spec, path, sizeof path, &err), &err);
        char name[64], want[PATH_MAX];
        af_bundle_name(r.spec.kind, r.spec.signature, name, sizeof name);
        path_in(want, crashes, name);
        assert_string_equal(path, want);
        check_bundle(&r, path);
        run_free(&r);
    }
    assert_true(packed > 0 && amask > 0 && bmask > 0 && f16 > 0);
    assert_int_equal(count_entries(crashes, ".tmp-"), 0);
    assert_int_equal(count_entries(crashes, NULL), 24);
}

/* A worker's own dropout keep mask: written as keep.<backend>.npy.zst, and the reference
 * the bundle holds (which followed it) is computed again from the bundle's inputs and that
 * mask alone, bit for bit; the case's own Philox mask would give another reference. */
static void test_bundle_keep_mask(void **state) {
    (void)state;
    char crashes[PATH_MAX];
    path_in(crashes, g_dir, "crashes");
    af_rng rng;
    af_rng_init(&rng, 77, 3);
    int differ = 0;
    for (int i = 0; i < 4; i++) {
        af_case c;
        af_case_generate(&c, &rng, (size_t)1 << 20, 4e5);
        c.dropout_p = 0.25;
        c.dropout_seed = (uint64_t)(1000 + i);
        af_case_repair(&c, (size_t)1 << 20);
        run r;
        run_make(&r, &c, (uint64_t)0x6b656570u + (uint64_t)i); /* judged against the Philox reference */
        const af_case_tensors *t = af_inputs_get(r.in);
        /* the mask the worker drew: every other element kept, unlike Philox's */
        size_t n = c.batch * c.q_heads * c.q_len * c.kv_len;
        uint8_t *keep = af_malloc(n);
        assert_non_null(keep);
        for (size_t e = 0; e < n; e++) keep[e] = (uint8_t)((e + (size_t)i) % 2);
        af_case_tensors kt = *t;
        kt.dropout_keep = keep;
        af_oracle *ko = af_oracle_create(NULL);
        af_error err = {0};
        expect_ok(af_oracle_prepare(ko, &kt, &err), &err);
        r.bo[0].dropout_keep = keep;
        r.spec.ref = af_oracle_ref(ko);
        char path[PATH_MAX] = "";
        expect_ok(af_bundle_write(crashes, &r.spec, path, sizeof path, &err), &err);

        af_bundle *b = NULL;
        expect_ok(af_bundle_read(path, &b, &err), &err);
        uint8_t *back = NULL;
        expect_ok(af_bundle_load_keep(b, r.names[0], &back, &err), &err);
        assert_non_null(back);
        assert_memory_equal(back, keep, n);
        uint8_t *none = NULL;
        expect_ok(af_bundle_load_keep(b, r.names[1], &none, &err), &err);
        assert_null(none); /* a backend that drew no mask has no file */
        /* the reference again, from the bundle alone */
        af_inputs *in = af_inputs_create();
        assert_non_null(in);
        expect_ok(af_bundle_load_inputs(b, in, &err), &err);
        af_case_tensors bt = *af_inputs_get(in);
        bt.dropout_keep = back;
        af_oracle *again = af_oracle_create(NULL);
        expect_ok(af_oracle_prepare(again, &bt, &err), &err);
        double *stored = NULL;
        expect_ok(af_bundle_load_output(b, "ref", &stored, &err), &err);
        size_t nout = c.batch * c.q_heads * c.q_len * c.v_head_dim;
        const double *philox = af_oracle_ref(r.o), *recomputed = af_oracle_ref(again);
        for (size_t e = 0; e < nout; e++) assert_true(same_double(stored[e], recomputed[e]));
        differ += memcmp(stored, philox, nout * sizeof *stored) != 0;
        af_free(stored);
        af_oracle_destroy(again);
        af_inputs_destroy(in);
        af_free(back);
        af_bundle_free(b);
        af_oracle_destroy(ko);
        af_free(keep);
        run_free(&r);
    }
    assert_true(differ > 0); /* the file matters: Philox's mask gives another reference */
}

/* A backward case: dO and the reference gradients stored canonical, each backend's
 * gradients with their verdicts and metrics, the finding's tensor; everything reads back
 * (values bit for bit, dO into the case's layout), and the recorded max_abs is what the
 * arrays give (also left under bundle-from-c for the Python loader's test). */
static void test_bundle_backward(void **state) {
    (void)state;
    char crashes[PATH_MAX];
    const char *bin = getenv("AF_BINARY_DIR");
    path_in(crashes, bin ? bin : g_dir, bin ? "bundle-from-c" : "crashes");
    af_rng rng;
    af_rng_init(&rng, 4242, 1);
    for (int i = 0; i < 6; i++) {
        af_case c;
        af_gen_opts go = {(size_t)1 << 20, 4e5, 1.0, 0.0, 0.0};
        af_case_generate_opts(&c, &rng, &go);
        if (i % 2) { /* an additive mask: dmask asked too; and a boolean one: every file a
                      * bundle can hold (an H100 campaign's bundle of this form once overflowed
                      * the writer's list of names) */
            c.amask.present = true, c.amask.dims = AF_MDIM_Q | AF_MDIM_K, c.amask.pattern = AF_MASK_RANDOM;
            c.amask.density = 50;
            c.bmask.present = true, c.bmask.dims = AF_MDIM_K, c.bmask.pattern = AF_MASK_KEY_COLS;
            c.bmask.density = 30;
            c.bwd.grads = AF_GRAD_ALL;
        }
        c.bwd.dout.perm = 1, c.bwd.dout.pad = 2; /* dO not contiguous */
        af_case_repair(&c, (size_t)1 << 20);
        assert_true(c.bwd.grads != 0);
        af_error err = {0};
        af_inputs *in = af_inputs_create();
        expect_ok(af_inputs_generate(in, &c, &err), &err);
        const af_case_tensors *t = af_inputs_get(in);
        af_backend *be[2];
        af_tensor out[2];
        af_grads gr[2];
        static const char *const names[2] = {"ref", "explicit"};
        for (int k = 0; k < 2; k++) {
            expect_ok(af_backend_open(names[k], &be[k], &err), &err);
            af_backend_out_shape(be[k], &c, &out[k]);
            out[k].data = af_malloc(af_tensor_span(&out[k]));
            af_backend_grads_shape(be[k], &c, &gr[k]);
            for (int g = 0; g < AF_GRAD_COUNT; g++) {
                af_tensor *x = af_grads_at(&gr[k], g);
                if (x->ndim) x->data = af_malloc(af_tensor_span(x));
            }
            expect_ok(af_backend_run_backward(be[k], t, &out[k], &gr[k], &err), &err);
        }
        af_bundle_output bo;
        memset(&bo, 0, sizeof bo);
        bo.backend = "explicit";
        bo.version = "1";
        bo.out = &out[1];
        bo.grads = &gr[1];
        if (i % 2) bo.stderr_tail = "a worker's stderr tail\n";
        size_t no = af_tensor_numel(&out[0]);
        for (size_t e = 0; e < no; e++) { /* the output's max_abs by hand */
            double x = ((const float *)out[1].data)[e], y = ((const double *)out[0].data)[e];
            if (isfinite(x) && isfinite(y) && fabs(x - y) > bo.result.m.max_abs) bo.result.m.max_abs = fabs(x - y);
        }
        af_bundle_spec spec;
        memset(&spec, 0, sizeof spec);
        double mx[AF_GRAD_COUNT] = {0};
        for (int g = 0; g < AF_GRAD_COUNT; g++) {
            const af_tensor *rg = af_grads_get(&gr[0], g), *eg = af_grads_get(&gr[1], g);
            if (!rg->data) continue;
            spec.ref_grads[g] = rg->data;
            size_t n = af_tensor_numel(rg);
            for (size_t e = 0; e < n; e++) { /* max_abs by hand */
                double x = ((const float *)eg->data)[e], y = ((const double *)rg->data)[e];
                if (isfinite(x) && isfinite(y) && fabs(x - y) > mx[g]) mx[g] = fabs(x - y);
            }
            bo.grad_results[g].kind = g == 0 ? AF_KIND_DIVERGE : AF_KIND_OK;
            bo.grad_results[g].m.max_abs = mx[g];
            bo.grad_results[g].m.worst[2] = 1;
            /* each gradient's own tolerance, unlike the output's and each other's */
            bo.grad_results[g].tol = (af_tolerance){.atol = 0.25 * (g + 1), .rtol = 1e-3 * (g + 1), .fudge = 2.0,
                                                    .honest = g == 0};
        }
        uint8_t enc[AF_CASE_ENCODED_MAX];
        spec.c = &c;
        spec.input_len = af_case_encode(&c, enc, sizeof enc);
        spec.input = enc;
        spec.tensors = t;
        spec.ref = out[0].data;
        spec.kind = AF_KIND_DIVERGE;
        spec.who = "explicit";
        spec.tensor = "dq";
        spec.signature = 0xbac4000000000000ull + (unsigned)i;
        spec.outputs = &bo;
        spec.n_outputs = 1;
        char path[PATH_MAX];
        expect_ok(af_bundle_write(crashes, &spec, path, sizeof path, &err), &err);

        af_bundle *b = NULL;
        expect_ok(af_bundle_read(path, &b, &err), &err);
        assert_string_equal(af_bundle_tensor(b), "dq");
        const af_bundle_record *rec = af_bundle_record_at(b, 0);
        size_t files = 6; /* case.json, input.bin, q, k, v, ref */
        files += 2 + (c.amask.present ? 1u : 0u) + (c.bmask.present ? 1u : 0u); /* out.explicit, do, masks */
        files += bo.stderr_tail ? 1u : 0u;                                       /* stderr.txt */
        for (int g = 0; g < AF_GRAD_COUNT; g++) {
            bool asked = (c.bwd.grads & (1u << g)) != 0;
            assert_int_equal(rec->has_grad[g], asked);
            assert_int_equal(rec->has_grad_output[g], asked);
            if (!asked) continue;
            files += 2; /* ref_<g>, <g>.explicit */
            assert_int_equal(rec->grad_kind[g], g == 0 ? AF_KIND_DIVERGE : AF_KIND_OK);
            assert_true(same_double(rec->grad_m[g].max_abs, mx[g]));
            assert_int_equal(rec->grad_m[g].worst[2], 1);
            assert_true(rec->has_grad_tol[g]);
            assert_true(same_double(rec->grad_tol[g].atol, 0.25 * (g + 1)));
            assert_true(same_double(rec->grad_tol[g].rtol, 1e-3 * (g + 1)));
            assert_true(same_double(rec->grad_tol[g].fudge, 2.0));
            assert_int_equal(rec->grad_tol[g].honest, g == 0);
            double *x = NULL;
            for (int k = 0; k < 2; k++) {
                expect_ok(af_bundle_load_grad(b, k ? "explicit" : "ref", g, &x, &err), &err);
                assert_non_null(x);
                const af_tensor *want = af_grads_get(&gr[k], g);
                for (size_t e = 0; e < af_tensor_numel(want); e++) {
                    double w = k ? (double)((const float *)want->data)[e] : ((const double *)want->data)[e];
                    assert_true(same_double(x[e], w));
                }
                af_free(x);
            }
        }
        assert_int_equal(count_entries(path, NULL), files);
        double *none = (double *)1;
        expect_ok(af_bundle_load_grad(b, "no_such_backend", 0, &none, &err), &err);
        assert_null(none);
        af_inputs *back = af_inputs_create();
        expect_ok(af_bundle_load_inputs(b, back, &err), &err);
        assert_true(views_equal(&t->dov, &af_inputs_get(back)->dov));
        af_inputs_destroy(back);
        af_bundle_free(b);

        /* a ref_<g> over its case's shape is refused, naming the file, before it is read */
        char bad[PATH_MAX], file[64];
        int g0 = __builtin_ctz(c.bwd.grads);
        snprintf(file, sizeof file, "ref_%s.npy.zst", af_grad_names[g0]);
        path_in(bad, path, file);
        af_array big = {.dtype = AF_F64, .ndim = 4, .shape = {8, 8, 8, 64}};
        big.data = af_calloc(af_array_numel(&big), sizeof(double));
        expect_ok(af_npy_write_zst(bad, &big, &err), &err);
        af_array_free(&big);
        expect_ok(af_bundle_read(path, &b, &err), &err);
        assert_int_equal(af_bundle_load_grad(b, "ref", g0, &none, &err), AF_ERR_FORMAT);
        assert_non_null(strstr(err.msg, file));
        af_bundle_free(b);
        /* restore it for the Python test */
        af_array good = {.dtype = AF_F64, .ndim = 4};
        af_case_grad_shape(&c, g0, good.shape);
        good.data = (void *)(uintptr_t)spec.ref_grads[g0];
        expect_ok(af_npy_write_zst(bad, &good, &err), &err);

        for (int k = 0; k < 2; k++) {
            af_free(out[k].data);
            for (int g = 0; g < AF_GRAD_COUNT; g++) af_free(af_grads_at(&gr[k], g)->data);
            af_backend_close(be[k]);
        }
        af_inputs_destroy(in);
    }
}

static void small_case(af_case *c) {
    af_case_default(c);
    c->batch = 2;
    c->q_heads = 2;
    c->kv_heads = 1;
    c->q_len = 3;
    c->kv_len = 4;
    c->head_dim = 5;
    c->v_head_dim = 3;
    c->amask.present = true;
    c->amask.dims = AF_MDIM_Q | AF_MDIM_K;
    c->amask.dtype = AF_F32;
    for (int t = 0; t < 3; t++) c->t[t].seed = 100u + (uint32_t)t;
    af_error err = {0};
    expect_ok(af_case_validate(c, 0, &err), &err);
}

static void test_bundle_exists(void **state) {
    (void)state;
    af_case c;
    small_case(&c);
    run r;
    run_make(&r, &c, 0);
    char crashes[PATH_MAX], path[PATH_MAX];
    path_in(crashes, g_dir, "crashes");
    af_error err = {0};
    expect_ok(af_bundle_write(crashes, &r.spec, path, sizeof path, &err), &err);
    expect_error(af_bundle_write(crashes, &r.spec, NULL, 0, &err), &err, AF_ERR_EXISTS, path);
    assert_int_equal(count_entries(crashes, NULL), 1);
    check_bundle(&r, path);

    /* a directory already at the final name, even empty, is never replaced */
    r.spec.signature ^= 1;
    char name[64], final[PATH_MAX];
    af_bundle_name(r.spec.kind, r.spec.signature, name, sizeof name);
    path_in(final, crashes, name);
    assert_int_equal(mkdir(final, 0755), 0);
    expect_error(af_bundle_write(crashes, &r.spec, NULL, 0, &err), &err, AF_ERR_EXISTS, final);
    assert_int_equal(count_entries(final, NULL), 0);
    assert_int_equal(count_entries(crashes, NULL), 2);
    assert_int_equal(count_entries(crashes, ".tmp-"), 0);

    /* invalid extra JSON writes nothing */
    r.spec.signature ^= 2;
    r.spec.extra_json = "{not json";
    expect_error(af_bundle_write(crashes, &r.spec, NULL, 0, &err), &err, AF_ERR_INVALID, "extra");
    assert_int_equal(count_entries(crashes, NULL), 2);
    run_free(&r);
}

/* case.json "minimized" as written; the bundle at dir says it. */
static int minimized_at(const char *dir) {
    af_error err = {0};
    af_bundle *b = NULL;
    expect_ok(af_bundle_read(dir, &b, &err), &err);
    int m = af_bundle_minimized(b);
    af_bundle_free(b);
    return m;
}

/* A bundle stored as found ("minimized": false) is replaced in one step by the minimized
 * one of the same name, and kept in old_dir; a minimized one, or one that does not say,
 * never is. af_bundle_retire moves only bundles stored as found. */
static void test_bundle_write_over(void **state) {
    (void)state;
    af_case c;
    small_case(&c);
    run r;
    run_make(&r, &c, 0);
    char crashes[PATH_MAX], old[PATH_MAX], path[PATH_MAX], kept[PATH_MAX], name[64];
    path_in(crashes, g_dir, "crashes");
    path_in(old, crashes, ".raw");
    af_error err = {0};
    /* not said: never replaced, and case.json has no "minimized" */
    expect_ok(af_bundle_write(crashes, &r.spec, path, sizeof path, &err), &err);
    assert_int_equal(minimized_at(path), 0);
    r.spec.minimized = 1;
    expect_error(af_bundle_write_over(crashes, &r.spec, old, NULL, 0, &err), &err, AF_ERR_EXISTS, path);

    /* as found, then minimized under the same name: replaced, the old one kept */
    r.spec.signature ^= 1;
    r.spec.minimized = -1;
    r.spec.who = "as found";
    expect_ok(af_bundle_write(crashes, &r.spec, path, sizeof path, &err), &err);
    assert_int_equal(minimized_at(path), -1);
    r.spec.minimized = 1;
    r.spec.who = "explicit,fused";
    expect_error(af_bundle_write(crashes, &r.spec, NULL, 0, &err), &err, AF_ERR_EXISTS, path); /* not over */
    expect_ok(af_bundle_write_over(crashes, &r.spec, old, NULL, 0, &err), &err);
    assert_int_equal(minimized_at(path), 1);
    check_bundle(&r, path);
    af_bundle_name(r.spec.kind, r.spec.signature, name, sizeof name);
    path_in(kept, old, name);
    assert_int_equal(minimized_at(kept), -1);
    af_bundle *b = NULL;
    expect_ok(af_bundle_read(kept, &b, &err), &err);
    assert_string_equal(af_bundle_who(b), "as found");
    af_bundle_free(b);
    /* minimized now: not replaced again */
    expect_error(af_bundle_write_over(crashes, &r.spec, old, NULL, 0, &err), &err, AF_ERR_EXISTS, path);
    assert_int_equal(count_entries(crashes, ".tmp-"), 0);
    assert_int_equal(count_entries(crashes, NULL), 3); /* two bundles and .raw */

    /* retire: a bundle as found moves, a minimized one stays */
    r.spec.signature ^= 2;
    r.spec.minimized = -1;
    expect_ok(af_bundle_write(crashes, &r.spec, path, sizeof path, &err), &err);
    af_bundle_name(r.spec.kind, r.spec.signature, name, sizeof name);
    assert_true(af_bundle_retire(crashes, name, old));
    struct stat st;
    assert_int_not_equal(stat(path, &st), 0);
    path_in(kept, old, name);
    assert_int_equal(minimized_at(kept), -1);
    af_bundle_name(r.spec.kind, r.spec.signature ^ 2, name, sizeof name); /* the minimized one */
    assert_false(af_bundle_retire(crashes, name, old));
    assert_false(af_bundle_retire(crashes, "no-such-bundle", old));
    assert_int_equal(count_entries(old, NULL), 2);

    /* "minimized" must be a bool */
    path_in(path, crashes, name);
    path_in(kept, path, "case.json");
    char *text = NULL;
    size_t len = 0;
    FILE *f = fopen(kept, "rb");
    assert_non_null(f);
    text = malloc(1 << 20);
    len = fread(text, 1, (1 << 20) - 1, f);
    fclose(f);
    text[len] = 0;
    char *at = strstr(text, "\"minimized\":");
    assert_non_null(at);
    at = strstr(at, "true");
    assert_non_null(at);
    memcpy(at, "1   ", 4);
    write_bytes(kept, text, len);
    free(text);
    expect_error(af_bundle_read(path, &b, &err), &err, AF_ERR_FORMAT, "minimized");
    run_free(&r);
}

/* Doubles of the case come back bit for bit: cJSON alone prints these three with 15
 * digits, which read back one ulp away. */
static void test_bundle_exact_numbers(void **state) {
    (void)state;
    af_case c;
    small_case(&c);
    c.scale_set = true;
    c.scale = 0.022979362286534105;
    c.softcap = 66.175866279568083;
    c.dropout_p = 0.10000000000000001;
    c.dropout_seed = (1ull << 60) + 3;
    af_error err = {0};
    expect_ok(af_case_validate(&c, 0, &err), &err);
    run r;
    run_make(&r, &c, 0);
    char crashes[PATH_MAX], path[PATH_MAX];
    path_in(crashes, g_dir, "crashes");
    expect_ok(af_bundle_write(crashes, &r.spec, path, sizeof path, &err), &err);
    check_bundle(&r, path); /* af_case_equal, metrics, arrays */
    run_free(&r);
}

static void test_bundle_io_errors(void **state) {
    (void)state;
    af_case c;
    small_case(&c);
    run r;
    run_make(&r, &c, 0);
    af_error err = {0};
    char file[PATH_MAX], crashes[PATH_MAX], path[PATH_MAX];

    /* crashes_dir is a regular file, or lies under one */
    path_in(file, g_dir, "plain");
    write_bytes(file, "x", 1);
    expect_error(af_bundle_write(file, &r.spec, NULL, 0, &err), &err, AF_ERR_IO, file);
    path_in(crashes, g_dir, "plain/crashes");
    expect_error(af_bundle_write(crashes, &r.spec, NULL, 0, &err), &err, AF_ERR_IO, crashes);

    /* mkdir -p */
    path_in(crashes, g_dir, "a/b/c");
    expect_ok(af_bundle_write(crashes, &r.spec, path, sizeof path, &err), &err);
    check_bundle(&r, path);

    /* the disk fills up half way: AF_ERR_IO naming a file, the temporary directory gone */
    path_in(crashes, g_dir, "full");
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 200; /* input.bin fits, the arrays do not */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    af_status st = af_bundle_write(crashes, &r.spec, path, sizeof path, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    expect_error(st, &err, AF_ERR_IO, crashes);
    expect_error(st, &err, AF_ERR_IO, ".npy.zst");
    assert_int_equal(count_entries(crashes, NULL), 0);
    run_free(&r);
}

static void write_text(const char *dir, const char *name, const char *text) {
    char path[PATH_MAX];
    path_in(path, dir, name);
    write_bytes(path, text, strlen(text));
}

static void expect_bundle_error(const char *dir, af_status code, const char *needle) {
    af_error err = {0};
    af_bundle *b = (af_bundle *)1;
    af_status st = af_bundle_read(dir, &b, &err);
    assert_null(b);
    expect_error(st, &err, code, needle);
}

static void test_bundle_corrupt_json(void **state) {
    (void)state;
    af_case c;
    small_case(&c);
    run r;
    run_make(&r, &c, 0);
    char crashes[PATH_MAX], dir[PATH_MAX], path[PATH_MAX];
    path_in(crashes, g_dir, "crashes");
    af_error err = {0};
    expect_ok(af_bundle_write(crashes, &r.spec, dir, sizeof dir, &err), &err);
    path_in(path, dir, "case.json");
    size_t len;
    char *text = (char *)read_bytes(path, &len);
    size_t complete = (size_t)(strrchr(text, '}') - text) + 1;

    /* every truncation: an error naming case.json, unless only white space went */
    for (size_t k = 0; k < len; k++) {
        write_bytes(path, text, k);
        af_bundle *b = NULL;
        af_status st = af_bundle_read(dir, &b, &err);
        if (k >= complete) {
            expect_ok(st, &err);
            af_bundle_free(b);
        } else {
            expect_error(st, &err, AF_ERR_FORMAT, "case.json");
            assert_null(b);
        }
    }
    write_bytes(path, text, len);
    char *trailing = malloc(len + 8);
    memcpy(trailing, text, len);
    memcpy(trailing + len, "{}", 3);
    write_bytes(path, trailing, len + 2);
    expect_bundle_error(dir, AF_ERR_FORMAT, "case.json");
    free(trailing);
    free(text);

    /* documents that are JSON but not a bundle */
    static const struct {
        const char *json, *needle;
    } docs[] = {
        {"", "case.json"},
        {"{\"case\": }", "case.json"},
        {"[]", "case.json"},
        {"null", "case.json"},
        {"{}", "case"},
        {"{\"case\": 5}", "case"},
        {"{\"case\": null}", "case"},
        {"{\"case\": {\"q_heads\": 6, \"kv_heads\": 4}}", "q_heads"},
        {"{\"case\": {\"batch\": 0}}", "batch"},
        {"{\"case\": {\"batch\": \"two\"}}", "batch"},
        {"{\"case\": {\"dtype\": \"f8\"}}", "dtype"},
        {"{\"case\": {\"q\": {\"layout\": \"qkv_bs3hd\"}, \"q_len\": 2, \"kv_len\": 3}}", "packed"},
        {"{\"case\": {}, \"kind\": 3}", "kind"},
        {"{\"case\": {}, \"kind\": \"weird\"}", "kind"},
        {"{\"case\": {}, \"format\": \"other\"}", "format"},
        {"{\"case\": {}, \"version\": 99}", "version"},
        {"{\"case\": {}, \"version\": \"1\"}", "version"},
        {"{\"case\": {}, \"signature\": \"xyz\"}", "signature"},
        {"{\"case\": {}, \"signature\": \"0123456789abcdef0\"}", "signature"},
        {"{\"case\": {}, \"who\": 1}", "who"},
        {"{\"case\": {}, \"relation\": []}", "relation"},
        {"{\"case\": {}, \"tolerance\": []}", "tolerance"},
        {"{\"case\": {}, \"tolerance\": {\"atol\": \"big\"}}", "tolerance.atol"},
        {"{\"case\": {}, \"tolerance\": {\"honest\": 1}}", "tolerance.honest"},
        {"{\"case\": {}, \"backends\": {}}", "backends"},
        {"{\"case\": {}, \"backends\": [1]}", "backends[0]"},
        {"{\"case\": {}, \"backends\": [{\"version\": \"1\"}]}", "backends[0].name"},
        {"{\"case\": {}, \"backends\": [{\"name\": 7}]}", "backends[0].name"},
        {"{\"case\": {}, \"backends\": [{\"name\": \"a\"}, {\"name\": \"b\", \"verdict\": \"bad\"}]}",
         "backends[1].verdict"},
        {"{\"case\": {}, \"backends\": [{\"name\": \"a\", \"metrics\": {\"max_abs\": \"abc\"}}]}",
         "backends[0].metrics.max_abs"},
        {"{\"case\": {}, \"backends\": [{\"name\": \"a\", \"metrics\": {\"n_nan\": -1}}]}", "n_nan"},
        {"{\"case\": {}, \"backends\": [{\"name\": \"a\", \"metrics\": {\"worst_index\": [1, 2]}}]}",
         "worst_index"},
        {"{\"case\": {}, \"backends\": [{\"name\": \"a\", \"metrics\": []}]}", "metrics"},
        {"{\"case\": {}, \"backends\": [{\"name\": \"a\", \"output\": \"../../etc/passwd\"}]}", "output"},
        {"{\"case\": {}, \"backends\": [{\"name\": \"a\", \"output\": 5}]}", "output"},
        {"{\"case\": {}, \"files\": \"q.npy.zst\"}", "files"},
        {"{\"case\": {}, \"files\": [\"../x\"]}", "files"},
        {"{\"case\": {}, \"files\": [\"nothere.npy.zst\"]}", "nothere.npy.zst"},
    };
    char dir2[PATH_MAX];
    path_in(dir2, g_dir, "foreign");
    assert_int_equal(mkdir(dir2, 0755), 0);
    for (size_t k = 0; k < sizeof docs / sizeof docs[0]; k++) {
        write_text(dir2, "case.json", docs[k].json);
        af_bundle *b = (af_bundle *)1;
        af_status st = af_bundle_read(dir2, &b, &err);
        assert_null(b);
        if (st == AF_OK || !strstr(err.msg, "case.json") || !strstr(err.msg, docs[k].needle) ||
            st != AF_ERR_FORMAT) {
            print_error("doc %zu (%s): %s: %s\n", k, docs[k].json, af_status_str(st), err.msg);
            fail();
        }
    }
    /* no case.json at all */
    path_in(path, dir2, "case.json");
    unlink(path);
    expect_bundle_error(dir2, AF_ERR_IO, path);

    /* the minimum another tool may write */
    write_text(dir2, "case.json", "{\"case\": {\"q_len\": 2}}");
    af_bundle *b = NULL;
    expect_ok(af_bundle_read(dir2, &b, &err), &err);
    assert_int_equal(af_bundle_kind(b), AF_KIND_OK);
    assert_true(af_bundle_signature(b) == 0);
    assert_string_equal(af_bundle_who(b), "");
    assert_null(af_bundle_relation(b));
    assert_int_equal(af_bundle_record_count(b), 0);
    assert_false(af_bundle_has_tolerance(b, NULL));
    assert_int_equal(af_bundle_case(b)->q_len, 2);
    assert_int_equal(af_bundle_case(b)->kv_len, 2);
    af_bundle_free(b);

    /* non-finite numbers as strings, in any spelling JSON writers use */
    write_text(dir2, "case.json",
               "{\"case\": {}, \"signature\": \"0xABC\", \"backends\": [{\"name\": \"x\", \"metrics\": {\"max_abs\": "
               "\"Infinity\", \"max_rel\": \"-inf\", \"rel_fro\": \"NaN\", \"worst_ratio\": 2.5}}]}");
    expect_ok(af_bundle_read(dir2, &b, &err), &err);
    assert_true(af_bundle_signature(b) == 0xabc);
    const af_bundle_record *rec = af_bundle_record_at(b, 0);
    assert_true(isinf(rec->m.max_abs) && rec->m.max_abs > 0);
    assert_true(isinf(rec->m.max_rel) && rec->m.max_rel < 0);
    assert_true(isnan(rec->m.rel_fro));
    assert_true(rec->m.worst_ratio == 2.5);
    assert_false(rec->has_output);
    af_bundle_free(b);
    run_free(&r);
}

static void test_bundle_wrong_shape(void **state) {
    (void)state;
    af_case c;
    small_case(&c);
    run r;
    run_make(&r, &c, 0);
    char crashes[PATH_MAX], dir[PATH_MAX], path[PATH_MAX];
    path_in(crashes, g_dir, "crashes");
    af_error err = {0};
    expect_ok(af_bundle_write(crashes, &r.spec, dir, sizeof dir, &err), &err);
    af_bundle *b = NULL;
    expect_ok(af_bundle_read(dir, &b, &err), &err);
    af_inputs *in = af_inputs_create();

    float zeros[2 * 2 * 3 * 6] = {0};
    af_array bad = {.dtype = AF_F32, .ndim = 4, .shape = {2, 2, 3, 6}, .data = zeros};
    static const char *const files[] = {"q.npy.zst", "k.npy.zst", "v.npy.zst", "mask.npy.zst"};
    for (int k = 0; k < 4; k++) {
        path_in(path, dir, files[k]);
        size_t len;
        uint8_t *keep = read_bytes(path, &len);
        expect_ok(af_npy_write_zst(path, &bad, &err), &err);
        af_status st = af_bundle_load_inputs(b, in, &err);
        expect_error(st, &err, AF_ERR_FORMAT, path);
        expect_error(st, &err, AF_ERR_FORMAT, "does not match the case");
        write_bytes(path, keep, len);
        free(keep);
    }
    expect_ok(af_bundle_load_inputs(b, in, &err), &err);

    /* ref, an output and expected */
    double *x = NULL;
    path_in(path, dir, "ref.npy.zst");
    expect_ok(af_npy_write_zst(path, &bad, &err), &err);
    expect_error(af_bundle_load_output(b, "ref", &x, &err), &err, AF_ERR_FORMAT, "ref.npy.zst: shape [2, 2, 3, 6]");
    assert_null(x);
    path_in(path, dir, "out.fused.npy.zst");
    expect_ok(af_npy_write_zst(path, &bad, &err), &err);
    expect_error(af_bundle_load_output(b, "fused", &x, &err), &err, AF_ERR_FORMAT, "out.fused.npy.zst");
    path_in(path, dir, "expected.npy.zst");
    expect_ok(af_npy_write_zst(path, &bad, &err), &err);
    expect_error(af_bundle_load_expected(b, &x, &err), &err, AF_ERR_FORMAT, "expected.npy.zst");
    assert_null(x);
    /* an output nobody wrote */
    expect_error(af_bundle_load_output(b, "nosuch", &x, &err), &err, AF_ERR_IO, "out.nosuch.npy.zst");
    /* a corrupt array is a format error of that file */
    path_in(path, dir, "v.npy.zst");
    write_bytes(path, "garbage", 7);
    expect_error(af_bundle_load_inputs(b, in, &err), &err, AF_ERR_FORMAT, path);
    af_inputs_destroy(in);
    af_bundle_free(b);
    run_free(&r);
}

/* --- hostile sizes ------------------------------------------------------------------ */

/* A zstd frame built by hand (RFC 8878): the bytes head as one raw block, then RLE blocks
 * of 128 KiB (4 bytes each: the most a block can expand) up to total bytes of content.
 * The frame header declares `declared` bytes of content, or nothing when declared is
 * UINT64_MAX; the window is 128 KiB, so an honest decoder needs no more. */
static uint8_t *zstd_bomb(const uint8_t *head, size_t head_len, uint64_t total, uint64_t declared, size_t *out_n) {
    const uint64_t block = 128u << 10;
    uint64_t rest = total - head_len, nblocks = (rest + block - 1) / block;
    size_t cap = 4 + 2 + 8 + 3 + head_len + (size_t)nblocks * 4;
    uint8_t *z = malloc(cap), *p = z;
    assert_non_null(z);
    memcpy(p, "\x28\xb5\x2f\xfd", 4);
    p += 4;
    *p++ = declared == UINT64_MAX ? 0x00 : 0xc0; /* FCS field: none, or 8 bytes; not single segment */
    *p++ = (17 - 10) << 3;                       /* window 2^17 */
    if (declared != UINT64_MAX)
        for (int i = 0; i < 8; i++) *p++ = (uint8_t)(declared >> (8 * i));
    uint32_t bh = (uint32_t)head_len << 3 | (nblocks == 0); /* raw block */
    for (int i = 0; i < 3; i++) *p++ = (uint8_t)(bh >> (8 * i));
    memcpy(p, head, head_len);
    p += head_len;
    for (uint64_t k = 0; k < nblocks; k++) {
        uint64_t size = rest > block ? block : rest;
        rest -= size;
        bh = (uint32_t)size << 3 | 1u << 1 | (k + 1 == nblocks); /* RLE block */
        for (int i = 0; i < 3; i++) *p++ = (uint8_t)(bh >> (8 * i));
        *p++ = 0x3f;
    }
    *out_n = (size_t)(p - z);
    return z;
}

/* What a bounded read did, measured in a child process: its status and message, the
 * seconds it took and how far its peak resident memory rose over what it had at the fork
 * (getrusage: a forked child's peak starts at its size then). */
typedef struct bounded {
    af_status st;
    char msg[sizeof(((af_error *)0)->msg)];
    double seconds;
    long rss_rise_kib;
} bounded;

typedef af_status (*bounded_fn)(const char *arg, af_error *err);

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bounded run_bounded(bounded_fn fn, const char *arg) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        bounded r;
        memset(&r, 0, sizeof r);
        struct rusage before, after;
        getrusage(RUSAGE_SELF, &before);
        double t0 = now_seconds();
        af_error err = {0};
        r.st = fn(arg, &err);
        r.seconds = now_seconds() - t0;
        getrusage(RUSAGE_SELF, &after);
        r.rss_rise_kib = after.ru_maxrss - before.ru_maxrss;
        snprintf(r.msg, sizeof r.msg, "%s", err.msg);
        ssize_t w = write(fds[1], &r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fds[1]);
    bounded r;
    memset(&r, 0, sizeof r);
    size_t got = 0;
    while (got < sizeof r) {
        ssize_t n = read(fds[0], (char *)&r + got, sizeof r - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fds[0]);
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    assert_int_equal(got, sizeof r);
    return r;
}

/* Refused as a format error naming path and needle, in under 5 s (decompressing 64 GiB
 * takes minutes) and with under 64 MiB more memory (it would take 64 GiB). */
static void expect_bounded_refusal(const bounded *r, const char *path, const char *needle) {
    af_error e;
    e.code = r->st;
    snprintf(e.msg, sizeof e.msg, "%s", r->msg);
    expect_error(r->st, &e, AF_ERR_FORMAT, path);
    if (needle) expect_error(r->st, &e, AF_ERR_FORMAT, needle);
    if (getenv("AF_TEST_VERBOSE"))
        fprintf(stderr, "    %.3f s, +%ld KiB: %s\n", r->seconds, r->rss_rise_kib, r->msg);
    if (r->seconds >= 5.0 || r->rss_rise_kib >= 64 * 1024) {
        print_error("%s: refused after %.2f s with a peak %ld KiB above the start\n", path, r->seconds,
                    r->rss_rise_kib);
        fail();
    }
}

static af_status read_npy_any(const char *path, af_error *err) {
    af_array a;
    af_status st = af_npy_read_zst(path, &a, err);
    af_array_free(&a);
    return st;
}

static af_status read_npy_60(const char *path, af_error *err) {
    af_array a;
    af_status st = af_npy_read_zst_max(path, 60, &a, err);
    af_array_free(&a);
    return st;
}

static void test_npy_bombs(void **state) {
    (void)state;
    char path[PATH_MAX];
    path_in(path, g_dir, "bomb.npy.zst");
    const uint64_t gib64 = 64ull << 30;
    size_t hn, zn;
    const float f2[2] = {1, 2};
    uint8_t *head = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", f2, sizeof f2, &hn);
    /* declares 64 GiB and holds them */
    uint8_t *z = zstd_bomb(head, hn, gib64, gib64, &zn);
    assert_true(zn < (3u << 20)); /* a 2 MiB file */
    write_bytes(path, z, zn);
    free(z);
    bounded r = run_bounded(read_npy_any, path);
    expect_bounded_refusal(&r, path, "declares 68719476736 bytes");
    /* declares nothing and produces 64 GiB behind a header of 2 floats */
    z = zstd_bomb(head, hn, gib64, UINT64_MAX, &zn);
    write_bytes(path, z, zn);
    free(z);
    r = run_bounded(read_npy_any, path);
    expect_bounded_refusal(&r, path, "decompresses to more than");
    /* declares what the header needs (2 floats) and produces 64 GiB */
    z = zstd_bomb(head, hn, gib64, hn, &zn);
    write_bytes(path, z, zn);
    free(z);
    r = run_bounded(read_npy_any, path);
    expect_bounded_refusal(&r, path, NULL);
    if (!strstr(r.msg, "more than") && !strstr(r.msg, "corrupt")) {
        print_error("a frame producing more than it declares: %s\n", r.msg);
        fail();
    }
    free(head);
    /* a header declaring 16 GiB of floats: over any array's limit, refused before its data */
    head = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 1024, 1024, 1024), }", NULL, 0, &hn);
    z = zstd_bomb(head, hn, gib64, UINT64_MAX, &zn);
    write_bytes(path, z, zn);
    r = run_bounded(read_npy_any, path);
    expect_bounded_refusal(&r, path, "too large");
    free(z);
    free(head);
    /* a header declaring a shape over what the caller allows (60 elements) */
    head = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1024, 1024), }", NULL, 0, &hn);
    z = zstd_bomb(head, hn, hn + (4u << 20), UINT64_MAX, &zn);
    write_bytes(path, z, zn);
    r = run_bounded(read_npy_60, path);
    expect_bounded_refusal(&r, path, "shape [1024, 1024] does not match");
    expect_bounded_refusal(&r, path, "1048576 elements, at most 60");
    free(z);
    free(head);
    /* a file larger than 60 elements can make it is refused by its size, unread */
    head = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", f2, sizeof f2, &hn);
    z = zstd_bomb(head, hn, gib64, UINT64_MAX, &zn);
    write_bytes(path, z, zn);
    r = run_bounded(read_npy_60, path);
    expect_bounded_refusal(&r, path, "more than the");
    free(z);
    /* the same holds for a plain .npy: a sparse 64 GiB file is refused by its size */
    path_in(path, g_dir, "sparse.npy");
    write_bytes(path, head, hn);
    assert_int_equal(truncate(path, (off_t)gib64), 0);
    r = run_bounded(read_npy_any, path);
    expect_bounded_refusal(&r, path, "more than the");
    free(head);
}

/* The bundle under test in test_bundle_bombs: its directory, for the child. */
static af_bundle *g_bomb_bundle;

static af_status load_inputs_of_bomb(const char *unused, af_error *err) {
    (void)unused;
    af_inputs *in = af_inputs_create();
    af_status st = af_bundle_load_inputs(g_bomb_bundle, in, err);
    af_inputs_destroy(in);
    return st;
}

static af_status load_ref_of_bomb(const char *unused, af_error *err) {
    (void)unused;
    double *x = NULL;
    af_status st = af_bundle_load_output(g_bomb_bundle, "ref", &x, err);
    af_free(x);
    return st;
}

/* Arrays of a bundle are bounded by the case: q of the small case holds 60 floats. */
static void test_bundle_bombs(void **state) {
    (void)state;
    af_case c;
    small_case(&c);
    run rr;
    run_make(&rr, &c, 0);
    char crashes[PATH_MAX], dir[PATH_MAX], path[PATH_MAX];
    path_in(crashes, g_dir, "crashes");
    af_error err = {0};
    expect_ok(af_bundle_write(crashes, &rr.spec, dir, sizeof dir, &err), &err);
    expect_ok(af_bundle_read(dir, &g_bomb_bundle, &err), &err);
    path_in(path, dir, "q.npy.zst");
    size_t keep_n;
    uint8_t *keep = read_bytes(path, &keep_n);
    const uint64_t gib2 = 2ull << 30; /* 64 KiB of RLE blocks: small enough for q's size bound */
    float q[60] = {0};
    size_t hn, zn;
    uint8_t *head = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 3, 5), }", q, sizeof q, &hn);
    /* the case's shape, declaring 2 GiB */
    uint8_t *z = zstd_bomb(head, hn, gib2, gib2, &zn);
    write_bytes(path, z, zn);
    free(z);
    bounded r = run_bounded(load_inputs_of_bomb, NULL);
    expect_bounded_refusal(&r, path, "declares");
    /* the case's shape, declaring its size, producing 2 GiB */
    z = zstd_bomb(head, hn, gib2, hn, &zn);
    write_bytes(path, z, zn);
    free(z);
    r = run_bounded(load_inputs_of_bomb, NULL);
    expect_bounded_refusal(&r, path, NULL);
    /* the case's shape, declaring nothing, producing 2 GiB */
    z = zstd_bomb(head, hn, gib2, UINT64_MAX, &zn);
    write_bytes(path, z, zn);
    free(z);
    r = run_bounded(load_inputs_of_bomb, NULL);
    expect_bounded_refusal(&r, path, "decompresses to more than");
    free(head);
    /* a header declaring a shape bigger than the case (2 GiB of floats) */
    head = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 16384, 8192), }", NULL, 0, &hn);
    z = zstd_bomb(head, hn, gib2, UINT64_MAX, &zn);
    write_bytes(path, z, zn);
    free(z);
    r = run_bounded(load_inputs_of_bomb, NULL);
    expect_bounded_refusal(&r, path, "shape [2, 2, 16384, 8192] does not match the case [2, 2, 3, 5]");
    free(head);
    write_bytes(path, keep, keep_n);
    free(keep);
    /* ref holds [2, 2, 3, 3] doubles; a ref claiming the case's q shape is refused as such */
    path_in(path, dir, "ref.npy.zst");
    head = npy_bytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2, 3, 5), }", NULL, 0, &hn);
    z = zstd_bomb(head, hn, gib2, UINT64_MAX, &zn);
    write_bytes(path, z, zn);
    free(z);
    free(head);
    r = run_bounded(load_ref_of_bomb, NULL);
    expect_bounded_refusal(&r, path, "does not match the case [2, 2, 3, 3]");
    af_bundle_free(g_bomb_bundle);
    g_bomb_bundle = NULL;
    run_free(&rr);
}

static af_status read_bundle_at(const char *dir, af_error *err) {
    af_bundle *b = NULL;
    af_status st = af_bundle_read(dir, &b, err);
    af_bundle_free(b);
    return st;
}

/* case.json is read only when it is a regular file of at most 1 MiB. */
static void test_bundle_json_size(void **state) {
    (void)state;
    char dir[PATH_MAX], path[PATH_MAX];
    path_in(dir, g_dir, "big");
    assert_int_equal(mkdir(dir, 0755), 0);
    path_in(path, dir, "case.json");
    /* valid JSON of 2 MiB (spaces after a minimal case) */
    const char *text = "{\"case\": {\"batch\": 1}}";
    size_t n = (2u << 20);
    char *big = malloc(n);
    assert_non_null(big);
    memset(big, ' ', n);
    memcpy(big, text, strlen(text));
    write_bytes(path, big, n);
    free(big);
    bounded r = run_bounded(read_bundle_at, dir);
    expect_bounded_refusal(&r, path, "more than the 1048576 allowed");
    /* a sparse 64 GiB case.json */
    assert_int_equal(truncate(path, (off_t)(64ull << 30)), 0);
    r = run_bounded(read_bundle_at, dir);
    expect_bounded_refusal(&r, path, "68719476736 bytes");
    /* the same minimal case, small: read (the size limit is what refused it) */
    write_bytes(path, text, strlen(text));
    r = run_bounded(read_bundle_at, dir);
    if (r.st != AF_OK) {
        print_error("%s\n", r.msg);
        fail();
    }
    /* a case is bounded by the budget: 8 x 16 x 65536 x 256 floats for each of q, k, v */
    const char *huge = "{\"case\": {\"batch\": 8, \"q_heads\": 16, \"kv_heads\": 16, \"q_len\": 65536, "
                       "\"kv_len\": 65536, \"head_dim\": 256, \"v_head_dim\": 256}}";
    write_bytes(path, huge, strlen(huge));
    af_bundle *b = NULL;
    af_error err = {0};
    expect_ok(af_bundle_read(dir, &b, &err), &err);
    expect_error(af_bundle_check_budget(b, 0, &err), &err, AF_ERR_INVALID, path);
    expect_error(af_bundle_check_budget(b, 0, &err), &err, AF_ERR_INVALID, "over the budget of 67108864");
    /* q, k, v and out: 4 x 2^33 bytes of float32 = 2^35 */
    expect_error(af_bundle_check_budget(b, ((size_t)1 << 35) - 1, &err), &err, AF_ERR_INVALID, "over the budget");
    expect_ok(af_bundle_check_budget(b, (size_t)1 << 35, &err), &err);
    af_bundle_free(b);
    /* text files beside the arrays (stderr.txt): absent, small, or refused unread */
    const char *tiny = "{\"case\": {\"batch\": 1}}";
    write_bytes(path, tiny, strlen(tiny));
    expect_ok(af_bundle_read(dir, &b, &err), &err);
    char *txt = (char *)1, tpath[PATH_MAX];
    size_t tlen = 7;
    expect_ok(af_bundle_load_text(b, "stderr.txt", &txt, &tlen, &err), &err);
    assert_null(txt);
    assert_int_equal(tlen, 0);
    path_in(tpath, dir, "stderr.txt");
    write_bytes(tpath, "Traceback (most recent call last):\nMemoryError\n", 48);
    expect_ok(af_bundle_load_text(b, "stderr.txt", &txt, &tlen, &err), &err);
    assert_int_equal(tlen, 48);
    assert_string_equal(txt, "Traceback (most recent call last):\nMemoryError\n");
    af_free(txt);
    assert_int_equal(truncate(tpath, (off_t)(64ull << 30)), 0);
    expect_error(af_bundle_load_text(b, "stderr.txt", &txt, &tlen, &err), &err, AF_ERR_FORMAT, tpath);
    expect_error(af_bundle_load_text(b, "stderr.txt", &txt, &tlen, &err), &err, AF_ERR_FORMAT, "more than the 65536");
    assert_null(txt);
    expect_error(af_bundle_load_text(b, "../case.json", &txt, &tlen, &err), &err, AF_ERR_INVALID, "not a file name");
    unlink(tpath);
    af_bundle_free(b);
    /* a FIFO would block a reader forever: refused at once */
    unlink(path);
    assert_int_equal(mkfifo(path, 0644), 0);
    r = run_bounded(read_bundle_at, dir);
    expect_bounded_refusal(&r, path, "not a regular file");
}

/* A writer killed mid-write leaves its temporary directory; only its own are removed. */
static void test_bundle_remove_partial(void **state) {
    (void)state;
    char crashes[PATH_MAX], path[PATH_MAX];
    path_in(crashes, g_dir, "crashes");
    assert_int_equal(mkdir(crashes, 0755), 0);
    static const char *const dead[] = {".tmp-diverge-00000000000000ab-4242-0",
                                       ".tmp-nan_mismatch-4242-00000000-4242-17"};
    static const char *const kept[] = {".tmp-diverge-00000000000000ab-42421-0",
                                       ".tmp-diverge-4242-00000000000000ab-7-0", "diverge-4242-0",
                                       ".tmp-diverge-00000000000000ab-4242-", "crash-0000000000004242"};
    for (size_t i = 0; i < 2; i++) {
        path_in(path, crashes, dead[i]);
        assert_int_equal(mkdir(path, 0755), 0);
        char f[PATH_MAX];
        path_in(f, path, "q.npy.zst");
        write_bytes(f, "partial", 7);
    }
    for (size_t i = 0; i < 5; i++) {
        path_in(path, crashes, kept[i]);
        assert_int_equal(mkdir(path, 0755), 0);
    }
    assert_int_equal(af_bundle_remove_partial(crashes, 4242), 2);
    struct stat st;
    for (size_t i = 0; i < 2; i++) {
        path_in(path, crashes, dead[i]);
        assert_int_not_equal(stat(path, &st), 0);
    }
    for (size_t i = 0; i < 5; i++) {
        path_in(path, crashes, kept[i]);
        assert_int_equal(stat(path, &st), 0);
    }
    assert_int_equal(af_bundle_remove_partial(crashes, 4242), 0);
    path_in(path, g_dir, "no_such_dir");
    assert_int_equal(af_bundle_remove_partial(path, 4242), 0);
}

/* A bundle as another tool writes it with numpy: case.json with the case only, arrays
 * with .npy headers made by hand, an expected output. */
static void test_bundle_foreign(void **state) {
    (void)state;
    char dir[PATH_MAX], path[PATH_MAX];
    path_in(dir, g_dir, "numpy-bundle");
    assert_int_equal(mkdir(dir, 0755), 0);
    write_text(dir, "case.json",
               "{\"case\": {\"batch\": 1, \"q_heads\": 2, \"q_len\": 3, \"kv_len\": 4, \"head_dim\": 2, "
               "\"dtype\": \"f16\", \"additive_mask\": {\"full_dims\": \"k\"}}}\n");
    af_error err = {0};
    af_bundle *b = NULL;
    expect_ok(af_bundle_read(dir, &b, &err), &err);
    const af_case *c = af_bundle_case(b);
    assert_int_equal(c->dtype, AF_F16);
    assert_int_equal(c->kv_heads, 2);

    /* nothing but case.json: the inputs are the case's own */
    af_inputs *got = af_inputs_create(), *gen = af_inputs_create();
    expect_ok(af_bundle_load_inputs(b, got, &err), &err);
    expect_ok(af_inputs_generate(gen, c, &err), &err);
    const af_case_tensors *tg = af_inputs_get(got), *tw = af_inputs_get(gen);
    assert_true(views_equal(&tg->qv, &tw->qv) && views_equal(&tg->kv, &tw->kv) && views_equal(&tg->vv, &tw->vv) &&
                views_equal(&tg->am, &tw->am));
    double *x = (double *)1;
    expect_ok(af_bundle_load_expected(b, &x, &err), &err);
    assert_null(x);

    /* k given (in float32, not exact in f16: rounded once on the way in); q, v drawn */
    float k[1 * 2 * 4 * 2];
    for (int i = 0; i < 16; i++) k[i] = 0.1f * (float)(i + 1);
    path_in(path, dir, "k.npy.zst");
    write_npy_zst(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 4, 2), }", k, sizeof k);
    /* the mask as a 1-D [Sk] array: broadcast like numpy */
    const double m[4] = {0.0, -INFINITY, 0.5, -1e4};
    path_in(path, dir, "mask.npy.zst");
    write_npy_zst(path, "{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }", m, sizeof m);
    expect_ok(af_bundle_load_inputs(b, got, &err), &err);
    tg = af_inputs_get(got);
    assert_true(views_equal(&tg->qv, &tw->qv) && views_equal(&tg->vv, &tw->vv));
    for (size_t h = 0; h < 2; h++)
        for (size_t j = 0; j < 4; j++)
            for (size_t d = 0; d < 2; d++) {
                double want = (double)af_f16_to_f32(af_f16_from_f64((double)k[(h * 4 + j) * 2 + d]));
                assert_true(af_view_get(&tg->kv, 0, h, j, d) == want);
            }
    for (size_t h = 0; h < 2; h++)
        for (size_t i = 0; i < 3; i++)
            for (size_t j = 0; j < 4; j++) assert_true(same_double(af_view_get(&tg->am, 0, h, i, j), m[j]));

    /* expected, float64 and float32 */
    double e[1 * 2 * 3 * 2];
    for (int i = 0; i < 12; i++) e[i] = 1.0 / (double)(i + 3);
    path_in(path, dir, "expected.npy.zst");
    write_npy_zst(path, "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2, 3, 2), }", e, sizeof e);
    expect_ok(af_bundle_load_expected(b, &x, &err), &err);
    assert_memory_equal(x, e, sizeof e);
    af_free(x);
    float e32[12];
    for (int i = 0; i < 12; i++) e32[i] = (float)e[i];
    write_npy_zst(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3, 2), }", e32, sizeof e32);
    expect_ok(af_bundle_load_expected(b, &x, &err), &err);
    for (int i = 0; i < 12; i++) assert_true(x[i] == (double)e32[i]);
    af_free(x);

    /* a mask of the wrong kind or shape */
    const uint8_t mb[4] = {1, 0, 1, 1};
    path_in(path, dir, "mask.npy.zst");
    write_npy_zst(path, "{'descr': '|b1', 'fortran_order': False, 'shape': (4,), }", mb, sizeof mb);
    expect_error(af_bundle_load_inputs(b, got, &err), &err, AF_ERR_FORMAT, "mask.npy.zst");
    write_npy_zst(path, "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }", e, sizeof e);
    expect_error(af_bundle_load_inputs(b, got, &err), &err, AF_ERR_FORMAT, "mask.npy.zst: shape [3, 4]");
    af_inputs_destroy(gen);
    af_inputs_destroy(got);
    af_bundle_free(b);

    /* all inputs given with a broadcast (stride-0) K: rows that differ cannot be stored */
    write_text(dir, "case.json",
               "{\"case\": {\"batch\": 2, \"q_len\": 1, \"kv_len\": 2, \"head_dim\": 1, "
               "\"k\": {\"broadcast\": \"batch\"}}}\n");
    expect_ok(af_bundle_read(dir, &b, &err), &err);
    path_in(path, dir, "mask.npy.zst");
    unlink(path);
    float q2[2] = {1, 2}, k4[4] = {1, 2, 1, 2}, kbad[4] = {1, 2, 3, 4};
    path_in(path, dir, "q.npy.zst");
    write_npy_zst(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1, 1, 1), }", q2, sizeof q2);
    path_in(path, dir, "v.npy.zst");
    write_npy_zst(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1, 2, 1), }", k4, sizeof k4);
    path_in(path, dir, "k.npy.zst");
    write_npy_zst(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1, 2, 1), }", k4, sizeof k4);
    got = af_inputs_create();
    expect_ok(af_bundle_load_inputs(b, got, &err), &err);
    assert_true(af_view_get(&af_inputs_get(got)->kv, 1, 0, 1, 0) == 2.0);
    write_npy_zst(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1, 2, 1), }", kbad, sizeof kbad);
    expect_error(af_bundle_load_inputs(b, got, &err), &err, AF_ERR_FORMAT, "broadcast");
    af_inputs_destroy(got);
    af_bundle_free(b);
}

/* --- heatmaps ------------------------------------------------------------------------------ */

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void test_heatmap(void **state) {
    (void)state;
    static const struct {
        size_t sq, dv, block;
    } sizes[] = {{5, 3, 8}, {64, 64, 8}, {100, 4, 5}, {1000, 64, 1}, {3, 600, 1}, {1, 1, 8}};
    char path[PATH_MAX];
    path_in(path, g_dir, "h.png");
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k].sq * sizes[k].dv;
        double *out = malloc(n * sizeof *out), *ref = malloc(n * sizeof *ref);
        for (size_t e = 0; e < n; e++) {
            ref[e] = sin((double)e);
            out[e] = ref[e] + 1e-3 * (double)(e % 7);
        }
        af_error err = {0};
        expect_ok(af_heatmap_write_png(path, out, ref, sizes[k].sq, sizes[k].dv, &err), &err);
        size_t len;
        uint8_t *png = read_bytes(path, &len);
        assert_true(len > 33);
        assert_memory_equal(png, "\x89PNG\r\n\x1a\n", 8);
        assert_memory_equal(png + 12, "IHDR", 4);
        assert_int_equal(be32(png + 16), sizes[k].dv * sizes[k].block);
        assert_int_equal(be32(png + 20), sizes[k].sq * sizes[k].block);
        free(png);
        free(out);
        free(ref);
    }

    /* the colours, read back with libpng: 2 x 3 elements of 8 x 8 pixels */
    double ref[6] = {1, 2, 3, NAN, INFINITY, 0};
    double out[6] = {1, 2.5, 3.25, NAN, 5, NAN};
    af_error err = {0};
    expect_ok(af_heatmap_write_png(path, out, ref, 2, 3, &err), &err);
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    assert_true(png_image_begin_read_from_file(&img, path));
    img.format = PNG_FORMAT_RGB;
    assert_int_equal(img.width, 24);
    assert_int_equal(img.height, 16);
    uint8_t *px = malloc(PNG_IMAGE_SIZE(img));
    assert_true(png_image_finish_read(&img, NULL, px, 0, NULL));
#define PX(i, d, ch) px[(((i) * 8 + 4) * 24 + (d) * 8 + 4) * 3 + (ch)]
    assert_true(PX(0, 0, 0) == 0 && PX(0, 0, 1) == 0 && PX(0, 0, 2) == 0); /* no error: black */
    assert_true(PX(0, 1, 0) == 255 && PX(0, 1, 1) == 255);                 /* the largest: white */
    assert_true(PX(0, 2, 0) > 0 && PX(0, 2, 0) < 255 && PX(0, 2, 0) == PX(0, 2, 1));
    assert_true(PX(1, 0, 0) == 0 && PX(1, 0, 1) == 0);                     /* NaN on both sides */
    assert_true(PX(1, 1, 0) == 255 && PX(1, 1, 1) == 0 && PX(1, 1, 2) == 255); /* Inf vs finite: magenta */
    assert_true(PX(1, 2, 0) == 255 && PX(1, 2, 1) == 0 && PX(1, 2, 2) == 255); /* NaN vs finite */
#undef PX
    free(px);
    assert_int_equal(count_containing(g_dir, ".tmp."), 0);

    path_in(path, g_dir, "no/such/h.png");
    expect_error(af_heatmap_write_png(path, out, ref, 2, 3, &err), &err, AF_ERR_IO, path);
    expect_error(af_heatmap_write_png(path, out, ref, 0, 3, &err), &err, AF_ERR_INVALID, path);
}

/* --- allocation failures ------------------------------------------------------------------- */

static long g_alloc_left;
static void *failing_alloc(void *opaque, size_t size) {
    (void)opaque;
    if (g_alloc_left-- <= 0) return NULL;
    return malloc(size);
}
static void failing_free(void *opaque, void *p) {
    (void)opaque;
    free(p);
}

/* Every allocation that fails is AF_ERR_NOMEM (or, inside libpng and zstd, reported as
 * their error), never a crash or a leak (ASan), and leaves no temporary files. */
static void test_alloc_failures(void **state) {
    (void)state;
    af_case c;
    small_case(&c);
    run r;
    run_make(&r, &c, 0);
    char crashes[PATH_MAX], path[PATH_MAX], npy[PATH_MAX];
    path_in(crashes, g_dir, "crashes");
    path_in(npy, g_dir, "a.npy.zst");
    double d[12] = {1, 2, 3};
    af_array arr = {.dtype = AF_F64, .ndim = 2, .shape = {3, 4}, .data = d};
    af_allocator fa = {failing_alloc, failing_free, NULL};
    bool done_write = false, done_read = false, done_npy = false;
    for (long budget = 0; budget < 4000 && !(done_write && done_read && done_npy); budget++) {
        af_error err = {0};
        af_mem_set_allocator(&fa);
        g_alloc_left = budget;
        af_status w = done_write ? AF_OK : af_bundle_write(crashes, &r.spec, path, sizeof path, &err);
        g_alloc_left = budget;
        af_status nw = done_npy ? AF_OK : af_npy_write_zst(npy, &arr, &err);
        af_array got = {0};
        g_alloc_left = budget;
        af_status nr = done_npy ? AF_OK : af_npy_read_zst(npy, &got, &err);
        af_bundle *b = NULL;
        af_status rd = AF_ERR_NOMEM;
        if (done_write && !done_read) {
            g_alloc_left = budget;
            rd = af_bundle_read(path, &b, &err);
            if (rd == AF_OK) {
                double *ref = NULL;
                rd = af_bundle_load_output(b, "ref", &ref, &err);
                af_free(ref);
            }
        }
        af_mem_set_allocator(NULL);
        assert_true(w == AF_OK || w == AF_ERR_NOMEM || w == AF_ERR_IO);
        assert_true(nw == AF_OK || nw == AF_ERR_NOMEM || nw == AF_ERR_IO);
        assert_true(nr == AF_OK || nr == AF_ERR_NOMEM || nr == AF_ERR_FORMAT || nr == AF_ERR_IO);
        assert_true(rd == AF_OK || rd == AF_ERR_NOMEM);
        assert_int_equal(count_entries(crashes, ".tmp-"), 0);
        if (!done_write && w == AF_OK) done_write = true;
        if (!done_npy && nw == AF_OK && nr == AF_OK) {
            assert_memory_equal(got.data, d, sizeof d);
            done_npy = true;
        }
        af_array_free(&got);
        if (b && rd == AF_OK) done_read = true;
        af_bundle_free(b);
    }
    assert_true(done_write && done_read && done_npy);
    check_bundle(&r, path);
    run_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bundle_name),
        cmocka_unit_test_setup_teardown(test_npy_round_trip, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_npy_written_bytes, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_npy_handwritten, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_npy_bad, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_npy_truncated, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_npy_corrupt, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_npy_write_errors, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_bundle_round_trip, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_bundle_backward, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_bundle_keep_mask, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_bundle_exists, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_bundle_write_over, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_bundle_exact_numbers, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_bundle_io_errors, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_bundle_corrupt_json, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_bundle_wrong_shape, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_bundle_foreign, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_npy_bombs, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_bundle_bombs, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_bundle_json_size, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_bundle_remove_partial, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_heatmap, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_alloc_failures, setup_dir, teardown_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
