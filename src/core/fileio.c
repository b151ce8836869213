/* fileio.c - whole-file writes and bounded whole-file reads (see fileio.h). */
#include "fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attnfuzz/mem.h"

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

af_status af_file_mkdirs(const char *dir, af_error *err) {
    char buf[PATH_MAX];
    size_t n = strlen(dir);
    AF_RETURN_ERROR_IF(n == 0, err, AF_ERR_IO, "cannot create a directory with an empty name");
    AF_RETURN_ERROR_IF(n >= sizeof buf, err, AF_ERR_IO, "%s: path is too long", dir);
    memcpy(buf, dir, n + 1);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != 0) continue;
        char save = *p;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return af_error_set(err, AF_ERR_IO, "%s: cannot create directory %s: %s", dir, buf, strerror(errno));
        *p = save;
        if (!save) break;
    }
    struct stat st;
    AF_RETURN_ERROR_IF(stat(dir, &st) != 0, err, AF_ERR_IO, "%s: cannot create directory: %s", dir, strerror(errno));
    AF_RETURN_ERROR_IF(!S_ISDIR(st.st_mode), err, AF_ERR_IO, "%s: cannot create directory: %s", dir,
                       strerror(ENOTDIR));
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

af_status af_file_read(const char *path, size_t cap, char **out, size_t *len, af_error *err) {
    *out = NULL;
    *len = 0;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    AF_RETURN_ERROR_IF(fd < 0, err, AF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return af_error_set(err, AF_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return af_error_set(err, AF_ERR_FORMAT, "%s: not a regular file", path);
    }
    if (st.st_size < 0 || (unsigned long long)st.st_size > cap) {
        close(fd);
        return af_error_set(err, AF_ERR_FORMAT, "%s: file is %lld bytes, more than the %zu allowed", path,
                            (long long)st.st_size, cap);
    }
    /* the size may change while we read: read one byte past it to see the end, and never
     * more than cap + 1 (which proves the file too large) */
    size_t size = (size_t)st.st_size + 1, n = 0;
    char *buf = af_malloc(size + 1);
    af_status status = AF_OK;
    while (buf) {
        if (n == size) {
            if (n > cap) {
                status = af_error_set(err, AF_ERR_FORMAT, "%s: file grew to more than the %zu bytes allowed", path,
                                      cap);
                break;
            }
            size_t grown = size > cap / 2 ? cap + 1 : size * 2;
            char *nb = af_malloc(grown + 1);
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
    buf[n] = 0;
    *out = buf;
    *len = n;
    return AF_OK;
}

void af_file_remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    rmdir(dir);
}
