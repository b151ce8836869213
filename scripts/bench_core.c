/* bench_core.c - the core's speed, in one run on one core (scripts/bench_core.sh):
 *   OpenBLAS sgemm and dgemm GFLOP/s at n = 1024 (the yardsticks),
 *   fused (f32) and ref GFLOP/s on B=1, H=8, S=1024, D=64,
 *   cases/s through decode + generate + ref + explicit + fused + compare, on the default
 *   distribution and on 1x1x1x1 cases.
 * Each figure is the best of several repetitions (the machine is shared and noisy). */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/mem.h"
#include "attnfuzz/oracle.h"
#include "attnfuzz/rng.h"
#include "attnfuzz/tensor.h"

static double af_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double bench_gemm(int dbl, int reps) {
    const int n = 1024;
    const size_t nn = 1024u * 1024u;
    double best = 0.0;
    void *a = malloc(nn * 8), *b = malloc(nn * 8), *c = malloc(nn * 8);
    for (size_t i = 0; i < nn; i++) {
        if (dbl) {
            ((double *)a)[i] = 1.0 / (double)(i % 7 + 1);
            ((double *)b)[i] = 1.0 / (double)(i % 5 + 1);
        } else {
            ((float *)a)[i] = 1.0f / (float)(i % 7 + 1);
            ((float *)b)[i] = 1.0f / (float)(i % 5 + 1);
        }
    }
    for (int r = 0; r < reps; r++) {
        double t0 = af_now();
        if (dbl) {
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a, n, b, n, 0.0, c, n);
        } else {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        }
        double g = 2.0 * n * n * (double)n / (af_now() - t0) / 1e9;
        if (g > best) best = g;
    }
    free(a);
    free(b);
    free(c);
    return best;
}

/* GFLOP/s of one backend on the benchmark shape (4 B H S^2 D flops). */
static double bench_attention(const char *name, int reps) {
    af_case c;
    af_case_default(&c);
    c.batch = 1;
    c.q_heads = c.kv_heads = 8;
    c.q_len = c.kv_len = 1024;
    c.head_dim = c.v_head_dim = 64;
    for (int t = 0; t < AF_QKV_COUNT; t++) c.t[t].seed = 11u + (uint32_t)t;
    af_error err;
    af_inputs *in = af_inputs_create();
    if (af_inputs_generate(in, &c, &err) != AF_OK) return -1;
    af_backend *be;
    if (af_backend_open(name, &be, &err) != AF_OK) return -1;
    af_tensor out;
    af_backend_out_shape(be, &c, &out);
    out.data = af_malloc(af_tensor_span(&out));
    double best = 0.0;
    for (int r = 0; r < reps; r++) {
        double t0 = af_now();
        if (af_backend_run(be, af_inputs_get(in), &out, &err) != AF_OK) return -1;
        double g = af_case_flops(&c) / (af_now() - t0) / 1e9;
        if (g > best) best = g;
    }
    af_free(out.data);
    af_backend_close(be);
    af_inputs_destroy(in);
    return best;
}

/* Cases per second through the whole pipeline, from bytes. tiny: 1x1x1x1 cases. */
static double bench_pipeline(int tiny, double seconds, double *mean_flops) {
    af_error err;
    af_backend *ex, *fu;
    af_backend_open("explicit", &ex, &err);
    af_backend_open("fused", &fu, &err);
    af_inputs *in = af_inputs_create();
    af_oracle *o = af_oracle_create(NULL);
    af_rng rng;
    af_rng_init(&rng, 42, 0);
    /* the inputs are drawn up front: decoding is part of the pipeline, drawing is not */
    enum { POOL = 4096 };
    static uint8_t bytes[POOL][AF_CASE_ENCODED_MAX];
    static size_t lens[POOL];
    for (int i = 0; i < POOL; i++) {
        af_case c;
        if (tiny) {
            af_case_default(&c);
            for (int t = 0; t < AF_QKV_COUNT; t++) c.t[t].seed = af_rng_u32(&rng);
            c.dtype = (af_dtype)(i % 3);
        } else {
            af_case_generate(&c, &rng, 0, 2e7);
        }
        lens[i] = af_case_encode(&c, bytes[i], sizeof bytes[i]);
    }
    float *buf[2] = {NULL, NULL};
    size_t cap = 0;
    size_t n = 0;
    double flops = 0.0;
    double t0 = af_now(), t1 = t0;
    while ((t1 = af_now()) - t0 < seconds) {
        for (int k = 0; k < 64; k++, n++) {
            af_case c;
            af_case_decode(&c, bytes[n % POOL], lens[n % POOL], 0);
            flops += af_case_flops(&c);
            if (af_inputs_generate(in, &c, &err) != AF_OK) return -1;
            const af_case_tensors *t = af_inputs_get(in);
            if (af_oracle_prepare(o, t, &err) != AF_OK) return -1;
            size_t need = (size_t)c.batch * c.q_heads * c.q_len * c.v_head_dim * sizeof(float);
            if (need > cap) { /* grows a few times, then never again */
                for (int b = 0; b < 2; b++) {
                    af_free(buf[b]);
                    buf[b] = af_malloc(need);
                }
                cap = need;
            }
            af_backend *bs[2] = {ex, fu};
            for (int b = 0; b < 2; b++) {
                af_tensor out;
                af_backend_out_shape(bs[b], &c, &out);
                out.data = buf[b];
                af_result res;
                if (af_backend_run(bs[b], t, &out, &err) != AF_OK) return -1;
                if (af_oracle_compare(o, &out, &res, &err) != AF_OK) return -1;
                if (res.kind != AF_KIND_OK) fprintf(stderr, "bench: unexpected finding %s\n", af_kind_names[res.kind]);
            }
        }
    }
    *mean_flops = flops / (double)n;
    af_free(buf[0]);
    af_free(buf[1]);
    af_oracle_destroy(o);
    af_inputs_destroy(in);
    af_backend_close(ex);
    af_backend_close(fu);
    return (double)n / (t1 - t0);
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 5.0;
    af_blas_single_thread();
    double sg = bench_gemm(0, 5), dg = bench_gemm(1, 5);
    double fu = bench_attention("fused", 5), rf = bench_attention("ref", 3), ex = bench_attention("explicit", 3);
    double mf_tiny, mf_dflt;
    double tiny = bench_pipeline(1, seconds, &mf_tiny);
    double dflt = bench_pipeline(0, seconds, &mf_dflt);
    printf("attnfuzz core benchmark (one thread; OpenBLAS kernels: %s)\n\n", openblas_get_corename());
    printf("%-52s %12s %12s %8s\n", "measure", "value", "target", "met");
    printf("%-52s %9.1f GF %12s %8s\n", "OpenBLAS sgemm n=1024", sg, "", "");
    printf("%-52s %9.1f GF %12s %8s\n", "OpenBLAS dgemm n=1024", dg, "", "");
    printf("%-52s %9.1f GF %9.1f GF %8s\n", "fused f32, B=1 H=8 S=1024 D=64 (>= 40% sgemm)", fu, 0.4 * sg,
           fu >= 0.4 * sg ? "yes" : "NO");
    printf("%-52s %9.1f GF %9.1f GF %8s\n", "ref f64, same shape (>= 50% dgemm)", rf, 0.5 * dg, rf >= 0.5 * dg ? "yes" : "NO");
    printf("%-52s %9.1f GF %12s %8s\n", "explicit f32, same shape", ex, "", "");
    printf("%-52s %10.0f/s %10.0f/s %8s\n", "pipeline, 1x1x1x1 cases", tiny, 100000.0, tiny >= 100000.0 ? "yes" : "NO");
    printf("%-52s %10.0f/s %12s %8s\n", "pipeline, default distribution", dflt, "", "");
    printf("\nfused / sgemm = %.0f%%, ref / dgemm = %.0f%%; default distribution: %.3g flops per case on average\n",
           100.0 * fu / sg, 100.0 * rf / dg, mf_dflt);
    printf("pipeline = decode + generate + ref + explicit + fused + compare (no relations)\n");
    return 0;
}
