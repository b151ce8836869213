/* test_campaign.c - a campaign against a deliberately wrong, test-only backend: its
 * bundles must hold tensors that reproduce the recorded metrics exactly, in C and in
 * Python; a second campaign in the same directory stores nothing twice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/bundle.h"
#include "attnfuzz/campaign.h"
#include "attnfuzz/mem.h"
#include "backends/ref.h"

/* The reference, then every output scaled by 1.001 (rounded to f32): a scale bug. */
typedef struct {
    af_scratch ws;
    double *buf;
    size_t cap;
} af_wrong;

static af_status wrong_create(const char *args, void **state, af_error *err) {
    (void)args;
    (void)err;
    *state = calloc(1, sizeof(af_wrong));
    return AF_OK;
}
static void wrong_destroy(void *state) {
    af_wrong *w = state;
    af_scratch_release(&w->ws);
    free(w->buf);
    free(w);
}
static af_status wrong_run(void *state, const af_case_tensors *in, af_tensor *out, af_error *err) {
    af_wrong *w = state;
    size_t n = af_tensor_numel(out);
    if (n > w->cap) {
        free(w->buf);
        w->buf = malloc(n * sizeof *w->buf);
        w->cap = n;
    }
    af_ref_opts opts = {0};
    af_status st = af_ref_attention(in, &in->qv, &in->kv, &in->vv, &opts, w->buf, NULL, &w->ws, err);
    float *o = out->data;
    for (size_t e = 0; e < n; e++) o[e] = (float)(w->buf[e] * 1.001);
    return st;
}
static const af_backend_vtable wrong_vt = {
    .name = "test:scaled_by_1.001",
    .version = "0",
    .summary = "test only: the reference times 1.001",
    .caps = AF_CAP_ALL,
    .layouts = AF_LAYOUTS_ALL,
    .out_dtype = AF_F32,
    .create = wrong_create,
    .destroy = wrong_destroy,
    .run = wrong_run,
};

static char tmpdir[256];

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/af_test_campaign_XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    af_error err;
    return af_backend_register(&wrong_vt, &err) == AF_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static af_status run_campaign(const char *crashes, uint64_t seed, uint64_t runs, af_campaign_stats *st) {
    af_campaign_opts o;
    af_campaign_opts_default(&o);
    memset(&o.exec, 0, sizeof o.exec);
    af_oracle_opts_default(&o.exec.oracle);
    o.exec.backends[0] = wrong_vt.name;
    o.exec.n_backends = 1;
    o.crashes_dir = crashes;
    o.seed = seed;
    o.runs = runs;
    o.quiet = true;
    af_error err;
    af_status s = af_campaign_run(&o, st, &err);
    if (s != AF_OK) fprintf(stderr, "campaign: %s\n", err.msg);
    return s;
}

/* Bundles in path; half-written ones (".tmp*") go to *tmp_leftovers. Other hidden
 * entries are not bundles (.minimized: the shared record of minimized signatures; .raw:
 * bundles as found that a minimized one replaced). */
static size_t count_dirs(const char *path, int *tmp_leftovers) {
    DIR *d = opendir(path);
    if (!d) return 0;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, ".tmp", 4) == 0) (*tmp_leftovers)++;
        else if (e->d_name[0] != '.') n++;
    }
    closedir(d);
    return n;
}

static void test_wrong_backend_bundles_reproduce_metrics(void **state) {
    (void)state;
    char crashes[512];
    snprintf(crashes, sizeof crashes, "%s/crashes", tmpdir);
    af_campaign_stats st;
    assert_int_equal(run_campaign(crashes, 7, 300, &st), AF_OK);
    assert_int_equal(st.execs, 300);
    assert_true(st.n_sigs >= 1);      /* a 0.1% scale error shows on most f32 cases */
    assert_int_equal(st.write_errors, 0);
    int leftovers = 0;
    assert_int_equal(count_dirs(crashes, &leftovers), st.n_sigs);
    assert_int_equal(leftovers, 0);

    for (size_t i = 0; i < st.n_sigs; i++) {
        const af_signature_entry *e = &st.sigs[i];
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", crashes, strrchr(e->bundle, '/') ? strrchr(e->bundle, '/') + 1 : e->bundle);
        af_bundle *b;
        af_error err;
        assert_int_equal(af_bundle_read(dir, &b, &err), AF_OK);
        assert_int_equal(af_bundle_signature(b), e->signature);
        assert_int_equal(af_bundle_kind(b), e->kind);
        const af_bundle_record *rec = NULL;
        for (size_t k = 0; k < af_bundle_record_count(b); k++)
            if (!strcmp(af_bundle_record_at(b, k)->backend, wrong_vt.name)) rec = af_bundle_record_at(b, k);
        assert_non_null(rec);
        double *out = NULL, *ref = NULL;
        assert_int_equal(af_bundle_load_output(b, wrong_vt.name, &out, &err), AF_OK);
        assert_int_equal(af_bundle_load_output(b, "ref", &ref, &err), AF_OK);
        const af_case *c = af_bundle_case(b);
        size_t n = (size_t)c->batch * c->q_heads * c->q_len * c->v_head_dim;
        double max_abs = 0.0, num = 0.0, den = 0.0;
        for (size_t k = 0; k < n; k++) {
            if (!isfinite(out[k]) || !isfinite(ref[k])) continue;
            double d = fabs(out[k] - ref[k]);
            if (d > max_abs) max_abs = d;
            num += d * d;
            den += ref[k] * ref[k];
        }
        /* independent recomputation from the stored arrays: exactly the recorded numbers */
        assert_true(max_abs == rec->m.max_abs);
        double fro = den > 0 ? sqrt(num / den) : sqrt(num);
        assert_true(fabs(fro - rec->m.rel_fro) <= 1e-12 * fro);
        /* and the output really is the reference times 1.001 in f32 */
        for (size_t k = 0; k < n; k++)
            if (isfinite(ref[k])) assert_true(out[k] == (double)(float)(ref[k] * 1.001));
        /* the stored inputs reproduce the reference */
        af_inputs *in = af_inputs_create();
        assert_int_equal(af_bundle_load_inputs(b, in, &err), AF_OK);
        af_scratch ws = {0};
        double *again = malloc(n * sizeof *again);
        af_ref_opts opts = {0};
        const af_case_tensors *t = af_inputs_get(in);
        assert_int_equal(af_ref_attention(t, &t->qv, &t->kv, &t->vv, &opts, again, NULL, &ws, &err), AF_OK);
        for (size_t k = 0; k < n; k++) assert_true(memcmp(&again[k], &ref[k], sizeof(double)) == 0 || (isnan(again[k]) && isnan(ref[k])));
        free(again);
        af_scratch_release(&ws);
        af_inputs_destroy(in);
        af_free(out);
        af_free(ref);
        af_bundle_free(b);

        /* the Python loader computes the same metrics from the same files */
        const char *src = getenv("AF_SOURCE_DIR");
        if (i == 0 && src && access("/usr/bin/python3", X_OK) == 0 &&
            system("/usr/bin/python3 -c 'import numpy, zstandard' 2>/dev/null") == 0) {
            char cmd[2048];
            snprintf(cmd, sizeof cmd, "AF_BUNDLE_FROM_C=%s /usr/bin/python3 %s/scripts/test_attnfuzz_bundle.py", dir, src);
            assert_int_equal(system(cmd), 0);
        }
    }

    /* the same campaign again: every signature is already stored, nothing is written */
    af_campaign_stats again;
    assert_int_equal(run_campaign(crashes, 7, 300, &again), AF_OK);
    assert_int_equal(again.n_sigs, st.n_sigs);
    for (size_t i = 0; i < again.n_sigs; i++) assert_true(again.sigs[i].stored_elsewhere);
    leftovers = 0;
    assert_int_equal(count_dirs(crashes, &leftovers), st.n_sigs);
    assert_int_equal(leftovers, 0);
    af_campaign_stats_free(&again);
    af_campaign_stats_free(&st);
}

static void test_clean_backends_find_nothing(void **state) {
    (void)state;
    char crashes[512];
    snprintf(crashes, sizeof crashes, "%s/clean", tmpdir);
    af_campaign_opts o;
    af_campaign_opts_default(&o); /* explicit,fused and every relation */
    o.exec.sample_relations = true;
    o.crashes_dir = crashes;
    o.runs = 400;
    o.quiet = true;
    af_campaign_stats st;
    af_error err;
    assert_int_equal(af_campaign_run(&o, &st, &err), AF_OK);
    assert_int_equal(st.execs, 400);
    if (st.n_sigs) fprintf(stderr, "unexpected finding: %s %s -> %s\n", af_kind_names[st.sigs[0].kind], st.sigs[0].who, st.sigs[0].bundle);
    assert_int_equal(st.n_sigs, 0);
    af_campaign_stats_free(&st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wrong_backend_bundles_reproduce_metrics),
        cmocka_unit_test(test_clean_backends_find_nothing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
