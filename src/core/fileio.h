/* fileio.h - writing whole files so that a failure is reported and nothing half-written
 * stays (library-internal). Messages name the path and the problem. */
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

#endif
