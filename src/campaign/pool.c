/* pool.c - the feedback pool (see pool.h). */
#include "pool.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attnfuzz/mem.h"
#include "fileio.h"

bool af_pool_note(af_pool *p, uint64_t key) {
    key |= 1; /* 0 marks an empty slot */
    size_t cap = sizeof p->seen / sizeof p->seen[0];
    if (p->nseen * 4 >= cap * 3) return false;
    size_t i = (size_t)(key * 0x9e3779b97f4a7c15ull >> 52) % cap;
    while (p->seen[i]) {
        if (p->seen[i] == key) return false;
        i = (i + 1) % cap;
    }
    p->seen[i] = key;
    p->nseen++;
    return true;
}

void af_pool_add(af_pool *p, const af_case *c, af_rng *r) {
    if (p->n < AF_POOL_MAX) {
        p->cases[p->n++] = *c;
    } else {
        p->cases[af_rng_below(r, AF_POOL_MAX)] = *c;
    }
}

af_status af_pool_load_corpus(af_pool *p, const char *dir, size_t budget, af_rng *r, af_error *err) {
    DIR *d = opendir(dir);
    AF_RETURN_ERROR_IF(!d, err, AF_ERR_IO, "--corpus %s: %s", dir, strerror(errno));
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (stat(path, &sb) != 0) continue;
        if (S_ISDIR(sb.st_mode)) snprintf(path, sizeof path, "%s/%s/input.bin", dir, e->d_name);
        if (S_ISDIR(sb.st_mode) && access(path, R_OK) != 0) continue;
        char *buf = NULL;
        size_t n = 0;
        af_error ferr;
        if (af_file_read(path, AF_CASE_INPUT_MAX, &buf, &n, &ferr) != AF_OK) {
            fprintf(stderr, "attnfuzz: --corpus: skipped %s\n", ferr.msg);
            continue;
        }
        af_case c;
        af_case_decode(&c, (const uint8_t *)buf, n, budget);
        af_free(buf);
        af_pool_add(p, &c, r);
    }
    closedir(d);
    return AF_OK;
}
