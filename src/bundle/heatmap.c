/* heatmap.c - |out - ref| of one (batch, head) as a PNG, for `attnfuzz show`.
 *
 * Rows are query positions, columns value dims; each element is a square block of
 * max(1, min(8, 512 / max(Sq, Dv))) pixels, so small cases are readable and large ones
 * stay one pixel per element. Grey encodes the error from black (0) to white (the largest
 * finite error); magenta marks a class mismatch (NaN or Inf on one side and not the same
 * on the other). The pattern tells bug classes apart: a layout mix-up paints blocks or
 * stripes, a wrong scale paints everything, a mask bug paints rows.
 *
 * The grey scale is linear when errors are spread out, and sqrt when a few large errors
 * dominate (mean below max/8), which would otherwise leave everything else black; the
 * PNG's tEXt "Comment" records which, and the maximum. */
#include <png.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "attnfuzz/bundle.h"
#include "attnfuzz/mem.h"

typedef struct af_heatmap {
    const double *out, *ref;
    size_t sq, dv, block;
    double max;     /* largest finite |out - ref| */
    bool sqrt_scale;
    char msg[200];  /* libpng's error message */
} af_heatmap;

/* 0 finite, 1 NaN, 2 +Inf, 3 -Inf */
static int af_heatmap_class(double x) {
    if (isnan(x)) return 1;
    if (isinf(x)) return x > 0 ? 2 : 3;
    return 0;
}

static void af_heatmap_scan(af_heatmap *h) {
    double mx = 0.0, sum = 0.0;
    size_t n = 0;
    for (size_t e = 0; e < h->sq * h->dv; e++) {
        if (af_heatmap_class(h->out[e]) != 0 || af_heatmap_class(h->ref[e]) != 0) continue;
        double d = fabs(h->out[e] - h->ref[e]);
        if (!isfinite(d)) continue; /* 1e308 - (-1e308): drawn white, not a scale */
        if (d > mx) mx = d;
        sum += d;
        n++;
    }
    h->max = mx;
    h->sqrt_scale = n > 0 && mx > 0.0 && sum / (double)n < mx / 8.0;
}

/* The RGB of one element. */
static void af_heatmap_pixel(const af_heatmap *h, size_t e, png_byte rgb[3]) {
    int co = af_heatmap_class(h->out[e]), cr = af_heatmap_class(h->ref[e]);
    if (co != cr) {
        rgb[0] = 255;
        rgb[1] = 0;
        rgb[2] = 255;
        return;
    }
    double t = 0.0; /* the same NaN or Inf on both sides is no error */
    if (co == 0 && h->max > 0.0) {
        t = fabs(h->out[e] - h->ref[e]) / h->max;
        if (!(t <= 1.0)) t = 1.0;
        if (h->sqrt_scale) t = sqrt(t);
    }
    png_byte g = (png_byte)lrint(t * 255.0);
    rgb[0] = rgb[1] = rgb[2] = g;
}

static void af_heatmap_rows(png_structp png, const af_heatmap *h, png_bytep row) {
    for (size_t i = 0; i < h->sq; i++) {
        for (size_t d = 0; d < h->dv; d++) {
            png_byte rgb[3];
            af_heatmap_pixel(h, i * h->dv + d, rgb);
            for (size_t k = 0; k < h->block; k++) memcpy(row + (d * h->block + k) * 3, rgb, 3);
        }
        for (size_t k = 0; k < h->block; k++) png_write_row(png, row);
    }
}

static void af_heatmap_error_fn(png_structp png, png_const_charp msg) {
    af_heatmap *h = png_get_error_ptr(png);
    snprintf(h->msg, sizeof h->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void af_heatmap_warning_fn(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

static png_voidp af_heatmap_malloc(png_structp png, png_alloc_size_t size) {
    (void)png;
    return af_malloc(size ? size : 1);
}

static void af_heatmap_free(png_structp png, png_voidp p) {
    (void)png;
    af_free(p);
}

/* Encodes the image into f; false with h->msg set on failure. Kept apart so that nothing
 * it changes after setjmp is read after a longjmp. */
static bool af_heatmap_encode(FILE *f, af_heatmap *h, png_bytep row) {
    png_structp png = png_create_write_struct_2(PNG_LIBPNG_VER_STRING, h, af_heatmap_error_fn, af_heatmap_warning_fn,
                                                NULL, af_heatmap_malloc, af_heatmap_free);
    if (!png) {
        snprintf(h->msg, sizeof h->msg, "out of memory");
        return false;
    }
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        snprintf(h->msg, sizeof h->msg, "out of memory");
        return false;
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        return false;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)(h->dv * h->block), (png_uint_32)(h->sq * h->block), 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    char comment[128];
    snprintf(comment, sizeof comment, "|out - ref|: black 0, white %.17g, %s scale; magenta NaN/Inf mismatch", h->max,
             h->sqrt_scale ? "sqrt" : "linear");
    png_text text[2];
    memset(text, 0, sizeof text);
    text[0].compression = PNG_TEXT_COMPRESSION_NONE;
    text[0].key = "Software";
    text[0].text = "attnfuzz";
    text[1].compression = PNG_TEXT_COMPRESSION_NONE;
    text[1].key = "Comment";
    text[1].text = comment;
    png_set_text(png, info, text, 2);
    png_write_info(png, info);
    af_heatmap_rows(png, h, row);
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    return true;
}

af_status af_heatmap_write_png(const char *path, const double *out, const double *ref, size_t Sq, size_t Dv,
                               af_error *err) {
    AF_RETURN_ERROR_IF(!out || !ref || Sq == 0 || Dv == 0, err, AF_ERR_INVALID, "%s: nothing to draw", path);
    /* PNG dimensions are 31-bit; a case is far below that */
    AF_RETURN_ERROR_IF(Sq > (1u << 24) || Dv > (1u << 24), err, AF_ERR_INVALID, "%s: %zu x %zu is too large to draw",
                       path, Sq, Dv);
    af_heatmap h;
    memset(&h, 0, sizeof h);
    h.out = out;
    h.ref = ref;
    h.sq = Sq;
    h.dv = Dv;
    size_t big = Sq > Dv ? Sq : Dv;
    h.block = 512 / big;
    if (h.block > 8) h.block = 8;
    if (h.block < 1) h.block = 1;
    af_heatmap_scan(&h);

    char tmp[PATH_MAX];
    int w = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    AF_RETURN_ERROR_IF(w < 0 || (size_t)w >= sizeof tmp, err, AF_ERR_IO, "%s: path is too long", path);
    png_bytep row = af_malloc(Dv * h.block * 3);
    AF_RETURN_ERROR_IF(!row, err, AF_ERR_NOMEM, "%s: out of memory", path);
    FILE *f = fopen(tmp, "wbe");
    if (!f) {
        int e = errno;
        af_free(row);
        return af_error_set(err, AF_ERR_IO, "%s: cannot create the temporary file: %s", path, strerror(e));
    }
    errno = 0;
    bool ok = af_heatmap_encode(f, &h, row);
    af_free(row);
    const char *what = NULL;
    int e = 0;
    if (!ok) {
        what = h.msg;
        e = errno;
    } else if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        what = "cannot write";
        e = errno;
    }
    if (fclose(f) != 0 && !what) {
        what = "cannot close";
        e = errno;
    }
    if (!what && rename(tmp, path) != 0) {
        what = "cannot rename the temporary file into place";
        e = errno;
    }
    if (what) {
        unlink(tmp);
        if (e) return af_error_set(err, AF_ERR_IO, "%s: %s: %s", path, what, strerror(e));
        return af_error_set(err, AF_ERR_IO, "%s: %s", path, what);
    }
    return AF_OK;
}
