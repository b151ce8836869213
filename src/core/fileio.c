/* fileio.c - whole-file writes (see fileio.h). */
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Writes, syncs and closes fd; on failure *what names the step and *e is its errno. */
static void af_file_fill(int fd, const void *data, size_t n, const char **what, int *e) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = write(fd, (const char *)data + done, n - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            *e = r < 0 ? errno : ENOSPC;
            *what = "cannot write";
            break;
        }
        done += (size_t)r;
    }
    if (!*what && fsync(fd) != 0) {
        *e = errno;
        *what = "cannot sync";
    }
    if (close(fd) != 0 && !*what) {
        *e = errno;
        *what = "cannot close";
    }
}

af_status af_file_write(const char *path, const void *data, size_t n, bool exclusive, af_error *err) {
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (exclusive ? O_EXCL : O_TRUNC), 0644);
    AF_RETURN_ERROR_IF(fd < 0, err, AF_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    const char *what = NULL;
    int e = 0;
    af_file_fill(fd, data, n, &what, &e);
    if (what) {
        unlink(path);
        return af_error_set(err, AF_ERR_IO, "%s: %s: %s", path, what, strerror(e));
    }
    return AF_OK;
}

af_status af_file_write_atomic(const char *path, const void *data, size_t n, af_error *err) {
    char tmp[PATH_MAX];
    int w = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    AF_RETURN_ERROR_IF(w < 0 || (size_t)w >= sizeof tmp, err, AF_ERR_IO, "%s: path is too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    AF_RETURN_ERROR_IF(fd < 0, err, AF_ERR_IO, "%s: cannot create the temporary file: %s", path, strerror(errno));
    const char *what = NULL;
    int e = 0;
    af_file_fill(fd, data, n, &what, &e);
    if (!what && rename(tmp, path) != 0) {
        e = errno;
        what = "cannot rename the temporary file into place";
    }
    if (what) {
        unlink(tmp);
        return af_error_set(err, AF_ERR_IO, "%s: %s: %s", path, what, strerror(e));
    }
    return AF_OK;
}
