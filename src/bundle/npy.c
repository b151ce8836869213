/* npy.c - NumPy .npy arrays compressed as one zstd frame (the arrays of a bundle).
 *
 * On disk: zstd( "\x93NUMPY" major minor hlen header data ), where header is a Python
 * dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with
 * spaces and a final '\n' so that the data starts at a multiple of 64 bytes (format 1.0:
 * hlen is 2 bytes; 2.0 and 3.0, which we also read, use 4).
 *
 * Reading trusts nothing in the file: every size comes from the bytes and is checked
 * before it is used, so a corrupt or hostile file is AF_ERR_FORMAT, never a crash or an
 * absurd allocation. A zstd file is read in two passes: first only the .npy header is
 * decompressed (streaming, into a small buffer), and its shape is checked against what the
 * caller allows; then the data is decompressed in one shot into a buffer of exactly the
 * size the header needs, so a frame that declares more is refused before decompressing and
 * one that produces more stops as soon as it overflows. A 128 KiB file that would inflate to
 * 64 GiB costs a few milliseconds and a few hundred KiB. */
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_customMem: zstd allocates through af_malloc too */
#include <zstd.h>
#include <zstd_errors.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attnfuzz/bundle.h"
#include "bundle_internal.h"
#include "attnfuzz/mem.h"
#include "fileio.h"

/* .npy data is little-endian; we copy it to and from memory as is. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c stores arrays in host byte order and assumes a little-endian host"
#endif

/* Largest array we read at all; a caller states a tighter bound, the most its case can
 * give the file (af_npy_read_zst_max). The header of a .npy we accept (a short dict) is
 * far below 64 KiB; numpy pads it to a multiple of 64 bytes. */
#define AF_NPY_MAX_DATA ((size_t)4 << 30)
#define AF_NPY_MAX_HEADER ((size_t)64 << 10)

static const char af_npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

size_t af_array_numel(const af_array *a) {
    size_t n = 1;
    for (int d = 0; d < a->ndim && d < AF_MAX_DIMS; d++) n *= a->shape[d];
    return n;
}

void af_array_free(af_array *a) {
    if (!a) return;
    af_free(a->data);
    memset(a, 0, sizeof *a);
}

/* --- zstd through the allocation hook ----------------------------------------------- */

static void *af_npy_zalloc(void *opaque, size_t size) {
    (void)opaque;
    return af_malloc(size ? size : 1);
}
static void af_npy_zfree(void *opaque, void *addr) {
    (void)opaque;
    af_free(addr);
}
static const ZSTD_customMem af_npy_zmem = {af_npy_zalloc, af_npy_zfree, NULL};

/* --- the header ------------------------------------------------------------------- */

static const char *af_npy_descr(af_dtype dt) {
    switch (dt) {
    case AF_F32: return "<f4";
    case AF_F64: return "<f8";
    case AF_F16: return "<f2";
    case AF_BOOL: return "|b1";
    case AF_I32: return "<i4";
    case AF_E4M3:
    case AF_E5M2: return "|u1"; /* the stored bits; the format is the case's (case.json) */
    case AF_BF16:
    case AF_DTYPE_COUNT: break;
    }
    return NULL;
}

/* Writes magic, version 1.0, length and the padded dict into hdr; returns its length
 * (a multiple of 64), or 0 if cap is too small. */
static size_t af_npy_header(const af_array *a, char *hdr, size_t cap) {
    char dict[256];
    size_t n = 0;
    int w = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", af_npy_descr(a->dtype));
    if (w < 0) return 0;
    n = (size_t)w;
    for (int d = 0; d < a->ndim; d++) {
        /* a 1-tuple needs its trailing comma: (5,) */
        w = snprintf(dict + n, sizeof dict - n, "%s%zu%s", d ? ", " : "", a->shape[d], a->ndim == 1 ? "," : "");
        if (w < 0 || (size_t)w >= sizeof dict - n) return 0;
        n += (size_t)w;
    }
    w = snprintf(dict + n, sizeof dict - n, "), }");
    if (w < 0 || (size_t)w >= sizeof dict - n) return 0;
    n += (size_t)w;
    size_t total = (10 + n + 1 + 63) / 64 * 64; /* magic..hlen, dict, '\n', padded */
    if (total > cap || total - 10 > 0xffff) return 0;
    size_t hlen = total - 10;
    memcpy(hdr, af_npy_magic, 6);
    hdr[6] = 1;
    hdr[7] = 0;
    hdr[8] = (char)(hlen & 0xff);
    hdr[9] = (char)(hlen >> 8);
    memcpy(hdr + 10, dict, n);
    memset(hdr + 10 + n, ' ', total - 10 - n - 1);
    hdr[total - 1] = '\n';
    return total;
}

/* A tiny reader for the header's Python literal: strings, True/False, tuples of ints. */
typedef struct af_npy_lex {
    const char *p, *end;
} af_npy_lex;

static void af_npy_ws(af_npy_lex *lx) {
    while (lx->p < lx->end && (*lx->p == ' ' || *lx->p == '\t' || *lx->p == '\n' || *lx->p == '\r')) lx->p++;
}

static bool af_npy_eat(af_npy_lex *lx, char ch) {
    af_npy_ws(lx);
    if (lx->p < lx->end && *lx->p == ch) {
        lx->p++;
        return true;
    }
    return false;
}

/* A quoted string without escapes into buf; false when malformed or too long. */
static bool af_npy_string(af_npy_lex *lx, char *buf, size_t cap) {
    af_npy_ws(lx);
    if (lx->p >= lx->end || (*lx->p != '\'' && *lx->p != '"')) return false;
    char q = *lx->p++;
    size_t n = 0;
    while (lx->p < lx->end && *lx->p != q) {
        if (*lx->p == '\\' || n + 1 >= cap) return false;
        buf[n++] = *lx->p++;
    }
    if (lx->p >= lx->end) return false;
    lx->p++;
    buf[n] = 0;
    return true;
}

static bool af_npy_word(af_npy_lex *lx, const char *w) {
    af_npy_ws(lx);
    size_t n = strlen(w);
    if ((size_t)(lx->end - lx->p) < n || memcmp(lx->p, w, n) != 0) return false;
    lx->p += n;
    return true;
}

/* (d0, d1, ...) with an optional trailing comma; "(5)" is accepted as (5,). Returns
 * NULL on success or the problem. */
static const char *af_npy_shape(af_npy_lex *lx, af_array *a) {
    if (!af_npy_eat(lx, '(')) return "shape is not a tuple";
    a->ndim = 0;
    for (;;) {
        if (af_npy_eat(lx, ')')) return NULL;
        af_npy_ws(lx);
        if (lx->p >= lx->end || *lx->p < '0' || *lx->p > '9') return "shape holds something other than integers";
        size_t v = 0;
        while (lx->p < lx->end && *lx->p >= '0' && *lx->p <= '9') {
            size_t digit = (size_t)(*lx->p - '0');
            if (v > (SIZE_MAX - digit) / 10) return "a dimension of shape overflows";
            v = v * 10 + digit;
            lx->p++;
        }
        if (lx->p < lx->end && *lx->p == 'L') lx->p++; /* Python 2 longs */
        if (a->ndim >= AF_MAX_DIMS) return "shape has more than 5 dimensions";
        a->shape[a->ndim++] = v;
        if (af_npy_eat(lx, ',')) continue;
        if (af_npy_eat(lx, ')')) return NULL;
        return "shape is not a well-formed tuple";
    }
}

/* Parses the header dict into a (dtype, ndim, shape); NULL or the problem. */
static const char *af_npy_dict(const char *text, size_t len, af_array *a, char *why, size_t why_len) {
    af_npy_lex lx = {text, text + len};
    bool have_descr = false, have_fortran = false, have_shape = false;
    if (!af_npy_eat(&lx, '{')) return "header is not a dict";
    for (;;) {
        if (af_npy_eat(&lx, '}')) break;
        char key[32], val[32];
        if (!af_npy_string(&lx, key, sizeof key)) return "header dict has a malformed key";
        if (!af_npy_eat(&lx, ':')) return "header dict lacks a ':' after a key";
        if (strcmp(key, "descr") == 0 && !have_descr) {
            if (!af_npy_string(&lx, val, sizeof val)) return "descr is not a simple string (structured dtype?)";
            if (strcmp(val, "<f4") == 0) {
                a->dtype = AF_F32;
            } else if (strcmp(val, "<f8") == 0) {
                a->dtype = AF_F64;
            } else if (strcmp(val, "<f2") == 0) {
                a->dtype = AF_F16;
            } else if (strcmp(val, "|b1") == 0 || strcmp(val, "|u1") == 0) {
                a->dtype = AF_BOOL;
                a->u8 = val[1] == 'u';
            } else {
                snprintf(why, why_len, "unsupported descr '%s' (accepted: <f4 <f8 <f2 |b1 |u1)", val);
                return why;
            }
            have_descr = true;
        } else if (strcmp(key, "fortran_order") == 0 && !have_fortran) {
            if (af_npy_word(&lx, "True")) return "fortran_order True is not supported (C order only)";
            if (!af_npy_word(&lx, "False")) return "fortran_order is not True or False";
            have_fortran = true;
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            const char *bad = af_npy_shape(&lx, a);
            if (bad) return bad;
            have_shape = true;
        } else {
            snprintf(why, why_len, "header dict has an unexpected or repeated key '%s'", key);
            return why;
        }
        if (af_npy_eat(&lx, ',')) continue;
        if (af_npy_eat(&lx, '}')) break;
        return "header dict lacks a ',' or '}' after a value";
    }
    if (!have_descr || !have_fortran || !have_shape) return "header dict lacks descr, fortran_order or shape";
    /* numpy pads with spaces and ends with '\n'; some writers pad with NUL */
    while (lx.p < lx.end && (*lx.p == ' ' || *lx.p == '\n' || *lx.p == '\r' || *lx.p == '\t' || *lx.p == 0))
        lx.p++;
    if (lx.p != lx.end) return "header has text after the dict";
    return NULL;
}

static void af_npy_shape_str(char *buf, size_t len, const size_t *shape, int ndim);

/* Parses the .npy header at the start of raw[0..n): on success *hdr holds dtype, ndim and
 * shape (no data), *off the offset of the data and *nbytes its length. The shape must hold
 * at most max_numel elements and AF_NPY_MAX_DATA bytes. AF_ERR_FORMAT naming path when n
 * bytes do not hold the whole header, and then *need says how many would (when that is
 * more than n, reading on may help). */
static af_status af_npy_parse_header(const char *path, const uint8_t *raw, size_t n, const af_npy_bound *bound,
                                     af_array *hdr, size_t *off, size_t *nbytes, size_t *need, af_error *err) {
    *need = 12; /* enough for the preamble of any version */
    AF_RETURN_ERROR_IF(n < 10, err, AF_ERR_FORMAT, "%s: truncated .npy header (%zu bytes)", path, n);
    AF_RETURN_ERROR_IF(memcmp(raw, af_npy_magic, 6) != 0, err, AF_ERR_FORMAT, "%s: not a .npy array (bad magic)",
                       path);
    uint8_t major = raw[6], minor = raw[7];
    AF_RETURN_ERROR_IF(major < 1 || major > 3 || minor != 0, err, AF_ERR_FORMAT,
                       "%s: unsupported .npy version %u.%u", path, major, minor);
    size_t hlen;
    if (major == 1) {
        hlen = (size_t)raw[8] | (size_t)raw[9] << 8;
        *off = 10;
    } else {
        AF_RETURN_ERROR_IF(n < 12, err, AF_ERR_FORMAT, "%s: truncated .npy header (%zu bytes)", path, n);
        hlen = (size_t)raw[8] | (size_t)raw[9] << 8 | (size_t)raw[10] << 16 | (size_t)raw[11] << 24;
        *off = 12;
    }
    AF_RETURN_ERROR_IF(hlen > AF_NPY_MAX_HEADER, err, AF_ERR_FORMAT,
                       "%s: .npy header of %zu bytes, more than the %zu allowed", path, hlen,
                       (size_t)AF_NPY_MAX_HEADER);
    *need = *off + hlen;
    AF_RETURN_ERROR_IF(hlen > n - *off, err, AF_ERR_FORMAT,
                       "%s: truncated .npy header (%zu bytes announced, %zu present)", path, hlen, n - *off);
    af_array got;
    memset(&got, 0, sizeof got);
    char why[160];
    const char *bad = af_npy_dict((const char *)raw + *off, hlen, &got, why, sizeof why);
    AF_RETURN_ERROR_IF(bad, err, AF_ERR_FORMAT, "%s: %s", path, bad);
    *off += hlen;
    size_t numel = 1;
    bool over = false;
    for (int d = 0; d < got.ndim; d++) over |= !af_size_mul(numel, got.shape[d], &numel);
    if (over || numel > bound->max_numel) {
        char shape[160];
        af_npy_shape_str(shape, sizeof shape, got.shape, got.ndim);
        return af_error_set(err, AF_ERR_FORMAT, "%s: shape %s does not match %s (%s%zu elements, at most %zu)", path,
                            shape, bound->what ? bound->what : "what may be stored here", over ? "over " : "",
                            over ? SIZE_MAX : numel, bound->max_numel);
    }
    AF_RETURN_ERROR_IF(!af_size_mul(numel, af_dtype_size(got.dtype), nbytes) || *nbytes > AF_NPY_MAX_DATA, err,
                       AF_ERR_FORMAT, "%s: shape is too large (over %zu bytes of data)", path,
                       (size_t)AF_NPY_MAX_DATA);
    *hdr = got;
    return AF_OK;
}

/* "[2, 3, 4]" for messages. */
static void af_npy_shape_str(char *buf, size_t len, const size_t *shape, int ndim) {
    size_t n = 0;
    int w = snprintf(buf, len, "[");
    n = w > 0 ? (size_t)w : 0;
    for (int d = 0; d < ndim && n < len; d++) {
        w = snprintf(buf + n, len - n, "%s%zu", d ? ", " : "", shape[d]);
        if (w > 0) n += (size_t)w;
    }
    if (n < len) snprintf(buf + n, len - n, "]");
}

/* Moves the data of raw (at off, nbytes long) to its front and hands raw to a. */
static void af_npy_take(uint8_t *raw, size_t off, size_t nbytes, const af_array *hdr, af_array *a) {
    *a = *hdr;
    memmove(raw, raw + off, nbytes);
    if (a->dtype == AF_BOOL && !a->u8)
        for (size_t i = 0; i < nbytes; i++) raw[i] = raw[i] != 0; /* numpy writes '|b1' as 0/1, another tool may not */
    a->data = nbytes ? raw : NULL;
    if (!nbytes) af_free(raw);
}

/* --- zstd ----------------------------------------------------------------------------- */

/* Decompresses the front of src until out holds want bytes (or the input ends): the .npy
 * header, read before anything is allocated for the data. Streaming through a small
 * buffer, whatever the frame goes on to produce. */
static af_status af_npy_unzstd_head(const char *path, ZSTD_DCtx *dctx, ZSTD_inBuffer *in, uint8_t *out, size_t want,
                                    size_t *got, af_error *err) {
    ZSTD_outBuffer ob = {out, want, *got};
    while (ob.pos < want) {
        size_t before = ob.pos, r = ZSTD_decompressStream(dctx, &ob, in);
        if (ZSTD_isError(r))
            return af_error_set(err, AF_ERR_FORMAT, "%s: corrupt zstd data (%s)", path, ZSTD_getErrorName(r));
        if (r == 0 && in->pos == in->size) break; /* every frame complete */
        /* all input taken and nothing more came out: the input is truncated */
        if (in->pos == in->size && ob.pos == before) break;
    }
    *got = ob.pos;
    return AF_OK;
}

/* Reads a zstd-compressed .npy: the header first, then the data straight into a buffer of
 * exactly the size the header needs; a frame that declares or produces more is refused. */
static af_status af_npy_read_zstd(const char *path, const uint8_t *src, size_t n, const af_npy_bound *bound,
                                  size_t raw_cap, af_array *a, af_error *err) {
    unsigned long long fcs = ZSTD_getFrameContentSize(src, n);
    if (fcs == ZSTD_CONTENTSIZE_ERROR) {
        bool magic = n >= 4 && src[0] == 0x28 && src[1] == 0xb5 && src[2] == 0x2f && src[3] == 0xfd;
        return af_error_set(err, AF_ERR_FORMAT, "%s: %s", path,
                            magic ? "truncated or corrupt zstd frame header" : "not zstd-compressed (bad magic)");
    }
    /* what the frame headers declare (all frames together), a claim checked before use */
    unsigned long long declared = ZSTD_findDecompressedSize(src, n);
    AF_RETURN_ERROR_IF(declared == ZSTD_CONTENTSIZE_ERROR, err, AF_ERR_FORMAT, "%s: truncated or corrupt zstd frame",
                       path);
    if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared > raw_cap) {
        if (bound->max_numel == SIZE_MAX)
            return af_error_set(err, AF_ERR_FORMAT,
                                "%s: zstd frame declares %llu bytes, more than the %zu any array may take", path,
                                declared, raw_cap);
        return af_error_set(err, AF_ERR_FORMAT,
                            "%s: zstd frame declares %llu bytes, more than the %zu that %zu elements need", path,
                            declared, raw_cap, bound->max_numel);
    }
    AF_RETURN_ERROR_IF(declared == 0, err, AF_ERR_FORMAT, "%s: empty zstd frame", path);
    ZSTD_DCtx *dctx = ZSTD_createDCtx_advanced(af_npy_zmem);
    AF_RETURN_ERROR_IF(!dctx, err, AF_ERR_NOMEM, "%s: out of memory for the zstd decoder", path);
    /* a frame's window is allocated, not touched, before it is used; 2^27 is zstd's own
     * default cap, stated here so that it stays one */
    ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax, 27);
    uint8_t *head = af_malloc(AF_NPY_MAX_HEADER + 12);
    af_status st = head ? AF_OK : af_error_set(err, AF_ERR_NOMEM, "%s: out of memory", path);
    af_array hdr;
    size_t off = 0, nbytes = 0, got = 0, need = 12;
    ZSTD_inBuffer in = {src, n, 0};
    while (st == AF_OK) {
        st = af_npy_unzstd_head(path, dctx, &in, head, need, &got, err);
        if (st != AF_OK) break;
        size_t more = 0;
        af_error herr;
        st = af_npy_parse_header(path, head, got, bound, &hdr, &off, &nbytes, &more, &herr);
        if (st == AF_OK) break;
        if (more > got && got == need) { /* the header is longer than what we have: read on */
            need = more;
            st = AF_OK;
            continue;
        }
        if (err) *err = herr;
    }
    af_free(head);
    uint8_t *raw = NULL;
    size_t total = off + nbytes;
    if (st == AF_OK && declared != ZSTD_CONTENTSIZE_UNKNOWN && declared < total)
        st = af_error_set(err, AF_ERR_FORMAT, "%s: shape needs %zu bytes of data but the file holds %llu", path,
                          nbytes, declared > off ? declared - off : 0);
    if (st == AF_OK && declared != ZSTD_CONTENTSIZE_UNKNOWN && declared > total)
        st = af_error_set(err, AF_ERR_FORMAT,
                          "%s: zstd frame declares %llu bytes, more than the %zu its .npy header and data need", path,
                          declared, total);
    if (st == AF_OK && !(raw = af_malloc(total)))
        st = af_error_set(err, AF_ERR_NOMEM, "%s: out of memory (%zu bytes)", path, total);
    if (st == AF_OK) {
        /* one shot into exactly total bytes: a frame that produces more stops at once */
        ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
        size_t r = ZSTD_decompressDCtx(dctx, raw, total, src, n);
        if (ZSTD_isError(r) && ZSTD_getErrorCode(r) == ZSTD_error_dstSize_tooSmall) {
            st = af_error_set(err, AF_ERR_FORMAT, "%s: decompresses to more than the %zu bytes its .npy header needs",
                              path, total);
        } else if (ZSTD_isError(r)) {
            st = af_error_set(err, AF_ERR_FORMAT, "%s: corrupt or truncated zstd data (%s)", path,
                              ZSTD_getErrorName(r));
        } else if (r != total) {
            st = af_error_set(err, AF_ERR_FORMAT, "%s: shape needs %zu bytes of data but the file holds %zu", path,
                              nbytes, r > off ? r - off : 0);
        }
    }
    ZSTD_freeDCtx(dctx);
    if (st != AF_OK) {
        af_free(raw);
        return st;
    }
    af_npy_take(raw, off, nbytes, &hdr, a);
    return AF_OK;
}

static bool af_npy_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

af_status af_npy_read_bounded(const char *path, const af_npy_bound *bound, af_array *a, af_error *err) {
    memset(a, 0, sizeof *a);
    size_t max_numel = bound->max_numel;
    /* the most the file can hold: the largest header, the data of max_numel float64s, and
     * for zstd what compressing that can add */
    size_t max_data = max_numel > AF_NPY_MAX_DATA / 8 ? AF_NPY_MAX_DATA : max_numel * 8;
    size_t raw_cap = AF_NPY_MAX_HEADER + 12 + max_data;
    bool plain = af_npy_ends_with(path, ".npy");
    size_t file_cap = plain ? raw_cap : ZSTD_compressBound(raw_cap) + ((size_t)64 << 10);
    char *file = NULL;
    size_t file_len = 0;
    AF_TRY(af_file_read(path, file_cap, &file, &file_len, err));
    const uint8_t *src = (const uint8_t *)file;
    af_status st;
    if (plain) {
        af_array hdr;
        size_t off = 0, nbytes = 0, need = 0;
        st = af_npy_parse_header(path, src, file_len, bound, &hdr, &off, &nbytes, &need, err);
        if (st == AF_OK && nbytes != file_len - off)
            st = af_error_set(err, AF_ERR_FORMAT, "%s: shape needs %zu bytes of data but the file holds %zu", path,
                              nbytes, file_len - off);
        if (st == AF_OK) {
            af_npy_take((uint8_t *)file, off, nbytes, &hdr, a);
            return AF_OK;
        }
    } else {
        st = af_npy_read_zstd(path, src, file_len, bound, raw_cap, a, err);
    }
    af_free(file);
    return st;
}

af_status af_npy_read_zst_max(const char *path, size_t max_numel, af_array *a, af_error *err) {
    af_npy_bound bound = {max_numel, NULL};
    return af_npy_read_bounded(path, &bound, a, err);
}

af_status af_npy_read_zst(const char *path, af_array *a, af_error *err) {
    return af_npy_read_zst_max(path, SIZE_MAX, a, err);
}

af_status af_npy_write_zst(const char *path, const af_array *a, af_error *err) {
    AF_RETURN_ERROR_IF(!af_npy_descr(a->dtype), err, AF_ERR_INVALID, "%s: cannot store dtype %s in .npy", path,
                       (unsigned)a->dtype < AF_DTYPE_COUNT ? af_dtype_names[a->dtype] : "?");
    AF_RETURN_ERROR_IF(a->ndim < 0 || a->ndim > AF_MAX_DIMS, err, AF_ERR_INVALID, "%s: ndim %d out of 0..%d", path,
                       a->ndim, AF_MAX_DIMS);
    size_t nbytes = af_dtype_size(a->dtype);
    for (int d = 0; d < a->ndim; d++)
        AF_RETURN_ERROR_IF(!af_size_mul(nbytes, a->shape[d], &nbytes) || nbytes > AF_NPY_MAX_DATA, err,
                           AF_ERR_INVALID, "%s: array too large", path);
    AF_RETURN_ERROR_IF(nbytes && !a->data, err, AF_ERR_INVALID, "%s: array has no data", path);
    char hdr[320];
    size_t hlen = af_npy_header(a, hdr, sizeof hdr);
    AF_ASSERT(hlen > 0); /* 5 dims of 20 digits fit */
    size_t raw_len = hlen + nbytes;
    uint8_t *raw = af_malloc(raw_len);
    size_t bound = ZSTD_compressBound(raw_len);
    uint8_t *dst = af_malloc(bound);
    ZSTD_CCtx *cctx = ZSTD_createCCtx_advanced(af_npy_zmem);
    af_status st = AF_OK;
    if (!raw || !dst || !cctx) {
        st = af_error_set(err, AF_ERR_NOMEM, "%s: out of memory compressing %zu bytes", path, raw_len);
    } else {
        memcpy(raw, hdr, hlen);
        if (nbytes) memcpy(raw + hlen, a->data, nbytes);
        size_t zn = ZSTD_compressCCtx(cctx, dst, bound, raw, raw_len, 3);
        if (ZSTD_isError(zn)) {
            st = af_error_set(err, ZSTD_getErrorCode(zn) == ZSTD_error_memory_allocation ? AF_ERR_NOMEM : AF_ERR_IO,
                              "%s: zstd compression failed: %s", path, ZSTD_getErrorName(zn));
        } else {
            st = af_file_write_atomic(path, dst, zn, err);
        }
    }
    ZSTD_freeCCtx(cctx);
    af_free(dst);
    af_free(raw);
    return st;
}
