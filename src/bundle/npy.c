/* npy.c - NumPy .npy arrays compressed as one zstd frame (the arrays of a bundle).
 *
 * On disk: zstd( "\x93NUMPY" major minor hlen header data ), where header is a Python
 * dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with
 * spaces and a final '\n' so that the data starts at a multiple of 64 bytes (format 1.0:
 * hlen is 2 bytes; 2.0 and 3.0, which we also read, use 4).
 *
 * Reading trusts nothing in the file: every size comes from the bytes and is checked
 * before it is used, so a corrupt or hostile file is AF_ERR_FORMAT, never a crash or an
 * absurd allocation. */
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
#include "fileio.h"
#include "attnfuzz/mem.h"

/* .npy data is little-endian; we copy it to and from memory as is. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c stores arrays in host byte order and assumes a little-endian host"
#endif

/* Largest array we read: a bundle of a 64 MiB case never comes near; a corrupt shape
 * or frame header claiming more is refused before anything is allocated. */
#define AF_NPY_MAX_DATA ((size_t)4 << 30)
#define AF_NPY_MAX_HEADER ((size_t)1 << 20)
#define AF_NPY_MAX_RAW (AF_NPY_MAX_DATA + AF_NPY_MAX_HEADER + 12)
/* The compressed file is at most a little larger than its content. */
#define AF_NPY_MAX_FILE (AF_NPY_MAX_RAW + (AF_NPY_MAX_RAW >> 7) + ((size_t)1 << 20))
/* A zstd block holds at most 128 KiB and needs at least 4 bytes (3 of header, 1 of RLE
 * content), so a frame of n bytes cannot decompress to more than (n / 4 + 1) * 128 KiB. */
#define AF_NPY_ZSTD_RATIO_BLOCK ((size_t)128 << 10)

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

/* Parses the uncompressed .npy bytes raw[0..n) into a; on success the data is moved to
 * the front of raw and a takes ownership of raw. */
static af_status af_npy_parse(const char *path, uint8_t *raw, size_t n, af_array *a, af_error *err) {
    AF_RETURN_ERROR_IF(n < 10, err, AF_ERR_FORMAT, "%s: truncated .npy header (%zu bytes)", path, n);
    AF_RETURN_ERROR_IF(memcmp(raw, af_npy_magic, 6) != 0, err, AF_ERR_FORMAT, "%s: not a .npy array (bad magic)",
                       path);
    uint8_t major = raw[6], minor = raw[7];
    AF_RETURN_ERROR_IF(major < 1 || major > 3 || minor != 0, err, AF_ERR_FORMAT,
                       "%s: unsupported .npy version %u.%u", path, major, minor);
    size_t off, hlen;
    if (major == 1) {
        hlen = (size_t)raw[8] | (size_t)raw[9] << 8;
        off = 10;
    } else {
        AF_RETURN_ERROR_IF(n < 12, err, AF_ERR_FORMAT, "%s: truncated .npy header (%zu bytes)", path, n);
        hlen = (size_t)raw[8] | (size_t)raw[9] << 8 | (size_t)raw[10] << 16 | (size_t)raw[11] << 24;
        off = 12;
    }
    AF_RETURN_ERROR_IF(hlen > AF_NPY_MAX_HEADER || hlen > n - off, err, AF_ERR_FORMAT,
                       "%s: truncated .npy header (%zu bytes announced, %zu present)", path, hlen, n - off);
    af_array got;
    memset(&got, 0, sizeof got);
    char why[160];
    const char *bad = af_npy_dict((const char *)raw + off, hlen, &got, why, sizeof why);
    AF_RETURN_ERROR_IF(bad, err, AF_ERR_FORMAT, "%s: %s", path, bad);
    off += hlen;
    size_t esize = af_dtype_size(got.dtype), nbytes = esize;
    for (int d = 0; d < got.ndim; d++)
        AF_RETURN_ERROR_IF(!af_size_mul(nbytes, got.shape[d], &nbytes) || nbytes > AF_NPY_MAX_DATA, err,
                           AF_ERR_FORMAT, "%s: shape is too large (over %zu bytes of data)", path, AF_NPY_MAX_DATA);
    AF_RETURN_ERROR_IF(nbytes != n - off, err, AF_ERR_FORMAT,
                       "%s: shape needs %zu bytes of data but the file holds %zu", path, nbytes, n - off);
    memmove(raw, raw + off, nbytes);
    if (got.dtype == AF_BOOL)
        for (size_t i = 0; i < nbytes; i++) raw[i] = raw[i] != 0; /* '|u1' may hold any byte */
    got.data = nbytes ? raw : NULL;
    if (!nbytes) af_free(raw);
    *a = got;
    return AF_OK;
}

/* --- files -------------------------------------------------------------------------- */

/* Reads the whole file (at most cap bytes) into an af_malloc'ed buffer. */
static af_status af_npy_slurp(const char *path, size_t cap, uint8_t **out, size_t *len, af_error *err) {
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    AF_RETURN_ERROR_IF(fd < 0, err, AF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    size_t size = 1 << 16;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 0) {
        if ((unsigned long long)st.st_size > cap) {
            close(fd);
            return af_error_set(err, AF_ERR_FORMAT, "%s: file is too large (%lld bytes)", path, (long long)st.st_size);
        }
        size = (size_t)st.st_size + 1; /* +1: reaching EOF needs one read past the size */
    }
    uint8_t *buf = af_malloc(size);
    size_t n = 0;
    af_status status = AF_OK;
    while (buf) {
        if (n == size) {
            if (n > cap) {
                status = af_error_set(err, AF_ERR_FORMAT, "%s: file is too large (over %zu bytes)", path, cap);
                break;
            }
            size_t grown = size > cap / 2 ? cap + 1 : size * 2;
            uint8_t *nb = af_malloc(grown);
            if (nb) memcpy(nb, buf, n);
            af_free(buf);
            buf = nb;
            size = grown;
            if (!buf) break;
        }
        ssize_t r = read(fd, buf + n, size - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            status = af_error_set(err, AF_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
            break;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    if (status == AF_OK && !buf) status = af_error_set(err, AF_ERR_NOMEM, "%s: out of memory reading the file", path);
    if (status != AF_OK) {
        af_free(buf);
        return status;
    }
    *out = buf;
    *len = n;
    return AF_OK;
}

/* Decompresses src (one zstd frame, or several concatenated) into a new buffer. */
static af_status af_npy_unzstd(const char *path, const uint8_t *src, size_t n, uint8_t **out, size_t *out_len,
                               af_error *err) {
    *out = NULL;
    *out_len = 0;
    unsigned long long fcs = ZSTD_getFrameContentSize(src, n);
    if (fcs == ZSTD_CONTENTSIZE_ERROR) {
        bool magic = n >= 4 && src[0] == 0x28 && src[1] == 0xb5 && src[2] == 0x2f && src[3] == 0xfd;
        return af_error_set(err, AF_ERR_FORMAT, "%s: %s", path,
                            magic ? "truncated or corrupt zstd frame header" : "not zstd-compressed (bad magic)");
    }
    ZSTD_DCtx *dctx = ZSTD_createDCtx_advanced(af_npy_zmem);
    AF_RETURN_ERROR_IF(!dctx, err, AF_ERR_NOMEM, "%s: out of memory for the zstd decoder", path);
    af_status status = AF_OK;
    uint8_t *buf = NULL;
    size_t len = 0;
    if (fcs != ZSTD_CONTENTSIZE_UNKNOWN) {
        /* the size in the frame header is a claim: check it against what n bytes can hold */
        size_t bound = (n / 4 + 1) * AF_NPY_ZSTD_RATIO_BLOCK;
        if (fcs > AF_NPY_MAX_RAW || fcs > bound) {
            status = af_error_set(err, AF_ERR_FORMAT, "%s: zstd frame claims %llu bytes, more than %zu bytes can hold",
                                  path, fcs, n);
        } else if (fcs == 0) {
            status = af_error_set(err, AF_ERR_FORMAT, "%s: empty zstd frame", path);
        } else if (!(buf = af_malloc((size_t)fcs))) {
            status = af_error_set(err, AF_ERR_NOMEM, "%s: out of memory (%llu bytes)", path, fcs);
        } else {
            size_t r = ZSTD_decompressDCtx(dctx, buf, (size_t)fcs, src, n);
            if (ZSTD_isError(r)) {
                status = af_error_set(err, AF_ERR_FORMAT, "%s: corrupt or truncated zstd data (%s)", path,
                                      ZSTD_getErrorName(r));
            } else if (r != fcs) {
                status = af_error_set(err, AF_ERR_FORMAT, "%s: zstd frame holds %zu bytes, its header says %llu",
                                      path, r, fcs);
            }
            len = (size_t)fcs;
        }
    } else {
        /* no size in the header (a streaming writer): grow the output as it comes */
        size_t cap = n < (AF_NPY_MAX_RAW >> 3) ? n * 4 + 4096 : AF_NPY_MAX_RAW;
        buf = af_malloc(cap);
        ZSTD_inBuffer in = {src, n, 0};
        while (buf) {
            ZSTD_outBuffer ob = {buf, cap, len};
            size_t r = ZSTD_decompressStream(dctx, &ob, &in);
            len = ob.pos;
            if (ZSTD_isError(r)) {
                status = af_error_set(err, AF_ERR_FORMAT, "%s: corrupt zstd data (%s)", path, ZSTD_getErrorName(r));
                break;
            }
            if (r == 0 && in.pos == in.size) break; /* every frame complete */
            if (len == cap) {
                if (cap >= AF_NPY_MAX_RAW) {
                    status = af_error_set(err, AF_ERR_FORMAT, "%s: decompresses to more than %zu bytes", path,
                                          AF_NPY_MAX_RAW);
                    break;
                }
                size_t grown = cap > AF_NPY_MAX_RAW / 2 ? AF_NPY_MAX_RAW : cap * 2;
                uint8_t *nb = af_malloc(grown);
                if (nb) memcpy(nb, buf, len);
                af_free(buf);
                buf = nb;
                cap = grown;
            } else if (in.pos == in.size) {
                status = af_error_set(err, AF_ERR_FORMAT, "%s: truncated zstd frame", path);
                break;
            }
        }
        if (!buf && status == AF_OK) status = af_error_set(err, AF_ERR_NOMEM, "%s: out of memory decompressing", path);
    }
    ZSTD_freeDCtx(dctx);
    if (status != AF_OK) {
        af_free(buf);
        return status;
    }
    *out = buf;
    *out_len = len;
    return AF_OK;
}

static bool af_npy_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

af_status af_npy_read_zst(const char *path, af_array *a, af_error *err) {
    memset(a, 0, sizeof *a);
    uint8_t *file = NULL, *raw = NULL;
    size_t file_len = 0, raw_len = 0;
    AF_TRY(af_npy_slurp(path, AF_NPY_MAX_FILE, &file, &file_len, err));
    if (af_npy_ends_with(path, ".npy")) {
        raw = file;
        raw_len = file_len;
    } else {
        af_status st = af_npy_unzstd(path, file, file_len, &raw, &raw_len, err);
        af_free(file);
        AF_TRY(st);
    }
    af_status st = af_npy_parse(path, raw, raw_len, a, err);
    if (st != AF_OK) af_free(raw);
    return st;
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
