/* pool.c - the feedback pool (see pool.h). */
#include "pool.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attnfuzz/bundle.h"
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

/* A bundle of another tool (attnfuzz capture writes only case.json and arrays): its case,
 * through the byte codec so that the decoder's repairs and the --budget apply to it as to
 * an input.bin. A directory without a readable case.json is skipped silently, one whose
 * case.json does not read with a warning. */
static void af_pool_load_case_json(af_pool *p, const char *bundle_dir, size_t budget, af_rng *r) {
    char path[4096 + 16];
    int w = snprintf(path, sizeof path, "%s/case.json", bundle_dir);
    if (w < 0 || (size_t)w >= sizeof path || access(path, R_OK) != 0) return;
    af_bundle *b = NULL;
    af_error berr;
    if (af_bundle_read(bundle_dir, &b, &berr) != AF_OK) {
        fprintf(stderr, "attnfuzz: --corpus: skipped %s\n", berr.msg);
        return;
    }
    uint8_t bytes[AF_CASE_ENCODED_MAX];
    size_t n = af_case_encode(af_bundle_case(b), bytes, sizeof bytes);
    af_bundle_free(b);
    if (n == 0) {
        fprintf(stderr, "attnfuzz: --corpus: skipped %s: the case does not encode\n", path);
        return;
    }
    af_case c;
    af_case_decode(&c, bytes, n, budget);
    af_pool_add(p, &c, r);
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
        size_t len = strlen(e->d_name);
        if (!S_ISDIR(sb.st_mode) && len > 5 && !strcmp(e->d_name + len - 5, ".json")) continue; /* an index */
        if (S_ISDIR(sb.st_mode)) snprintf(path, sizeof path, "%s/%s/input.bin", dir, e->d_name);
        if (S_ISDIR(sb.st_mode) && access(path, R_OK) != 0) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            af_pool_load_case_json(p, path, budget, r);
            continue;
        }
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
