/* fileio.h - whole files (library-internal): writes that report failure and leave nothing
 * half-written, and reads that never take more than a stated size. Messages name the path
 * and the problem. */
#ifndef ATTNFUZZ_FILEIO_H
#define ATTNFUZZ_FILEIO_H

#include <stdbool.h>
#include <stddef.h>

#include "attnfuzz/status.h"

/* Creates path (failing if it exists when exclusive), writes n bytes, fsyncs, closes.
 * AF_ERR_IO on any failure (a full disk too), the partial file removed. */
af_status af_file_write(const char *path, const void *data, size_t n, bool exclusive, af_error *err);
/* Writes "<path>.tmp.<pid>" the same way, then renames it onto path: readers see the
 * old file or the whole new one. */
af_status af_file_write_atomic(const char *path, const void *data, size_t n, af_error *err);

/* mkdir -p: creates dir and every missing parent (mode 0755). AF_ERR_IO naming the part
 * that could not be made, or dir when it exists but is not a directory. */
af_status af_file_mkdirs(const char *dir, af_error *err);

/* Removes dir and the plain files in it (a directory this process filled: a bundle in
 * progress, a campaign's job stats). Best effort: what cannot be removed stays. */
void af_file_remove_dir(const char *dir);

/* Reads a whole regular file of at most cap bytes into an af_malloc'ed buffer with a NUL
 * after the last byte (*out, *len; the caller af_frees *out). What it reads comes from
 * outside (a bundle, a corpus, a worker), so it is bounded before anything is allocated:
 * a file over cap bytes is AF_ERR_FORMAT ("<path>: file is N bytes, more than the M
 * allowed") decided from its size, without reading it; a FIFO, device or directory is
 * AF_ERR_FORMAT too (it could block or never end). AF_ERR_IO when it cannot be opened or
 * read, AF_ERR_NOMEM when the buffer cannot be had. */
af_status af_file_read(const char *path, size_t cap, char **out, size_t *len, af_error *err);

#endif
