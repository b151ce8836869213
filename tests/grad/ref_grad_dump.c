/* ref_grad_dump.c - the float64 reference gradients of generated backward cases, for the
 * cross-check against python/attnfuzz/reference.py (tests/ref_grad_cross.py).
 *
 *   ref_grad_dump N SEED OUT
 *
 * draws N cases from the generator with every case asking for gradients (small shapes:
 * at most 2e5 flops, 4 MiB of tensors), and writes for each one JSON line
 *   {"case": {...}, "arrays": [[name, [shape]], ...]}
 * followed by the arrays, little-endian float64 in C order, in the listed order: q, k, v,
 * do (canonical), mask (the additive mask at its 4-D broadcast shape, when the case has
 * one), bool_mask (4-D, 0 or 1), then per gradient asked dq, dk, dv, dmask, and for each
 * its row scales gs_<name> (af_ref_grad_opts.gscale). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/case.h"
#include "attnfuzz/rng.h"
#include "attnfuzz/tensor.h"
#include "backends/ref.h"

/* The elements (a, b, i, d) < ne of a canonical view as float64 (a view whose dims are 1
 * in ne is read at index 0 there: a mask's broadcast dims). */
static void put_array(FILE *f, const af_view *v, const size_t ne[4]) {
    for (size_t a = 0; a < ne[0]; a++)
        for (size_t b = 0; b < ne[1]; b++)
            for (size_t i = 0; i < ne[2]; i++)
                for (size_t d = 0; d < ne[3]; d++) {
                    double x = af_view_get(v, a, b, i, d);
                    fwrite(&x, sizeof x, 1, f);
                }
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: ref_grad_dump N SEED OUT\n");
        return 2;
    }
    size_t n = (size_t)strtoull(argv[1], NULL, 10);
    af_rng r;
    af_rng_init(&r, strtoull(argv[2], NULL, 10), 0x67726164u);
    FILE *f = fopen(argv[3], "wb");
    if (!f) {
        perror(argv[3]);
        return 2;
    }
    af_inputs *in = af_inputs_create();
    af_scratch ws = {0};
    for (size_t t = 0; t < n; t++) {
        af_case c;
        af_gen_opts go = {(size_t)4 << 20, 2e5, 1.0, 0.0, 0.0};
        af_case_generate_opts(&c, &r, &go);
        af_error err = {0};
        if (af_inputs_generate(in, &c, &err) != AF_OK) {
            fprintf(stderr, "inputs: %s\n", err.msg);
            return 1;
        }
        const af_case_tensors *tt = af_inputs_get(in);
        double *g[AF_GRAD_COUNT] = {0};
        af_ref_grad_opts o = {0};
        size_t gne[AF_GRAD_COUNT][4];
        for (int k = 0; k < AF_GRAD_COUNT; k++) {
            if (!(c.bwd.grads & (1u << k))) continue;
            af_case_grad_shape(&c, k, gne[k]);
            g[k] = malloc(gne[k][0] * gne[k][1] * gne[k][2] * gne[k][3] * sizeof(double));
            o.gscale[k] = malloc(af_ref_grad_rows(&c, k) * sizeof(double));
        }
        if (af_ref_backward(tt, &o, g, &ws, &err) != AF_OK) {
            fprintf(stderr, "backward: %s\n", err.msg);
            return 1;
        }
        char *cj = af_case_to_json(&c);
        for (char *p = cj; *p; p++)
            if (*p == '\n' || *p == '\t') *p = ' ';
        size_t ne_q[4] = {c.batch, c.q_heads, c.q_len, c.head_dim}, ne_k[4] = {c.batch, c.kv_heads, c.kv_len, c.head_dim};
        size_t ne_v[4] = {c.batch, c.kv_heads, c.kv_len, c.v_head_dim}, ne_o[4] = {c.batch, c.q_heads, c.q_len, c.v_head_dim};
        size_t ne_m[4], ne_b[4];
        af_case_grad_shape(&c, 3, ne_m);
        size_t full[4] = {c.batch, c.q_heads, c.q_len, c.kv_len};
        for (int d = 0; d < 4; d++) ne_b[d] = (c.bmask.dims & (1u << d)) ? full[d] : 1;
        fprintf(f, "{\"case\": %s, \"arrays\": [[\"q\", [%zu, %zu, %zu, %zu]], [\"k\", [%zu, %zu, %zu, %zu]], "
                   "[\"v\", [%zu, %zu, %zu, %zu]], [\"do\", [%zu, %zu, %zu, %zu]]",
                cj, ne_q[0], ne_q[1], ne_q[2], ne_q[3], ne_k[0], ne_k[1], ne_k[2], ne_k[3], ne_v[0], ne_v[1], ne_v[2],
                ne_v[3], ne_o[0], ne_o[1], ne_o[2], ne_o[3]);
        free(cj);
        if (c.amask.present) fprintf(f, ", [\"mask\", [%zu, %zu, %zu, %zu]]", ne_m[0], ne_m[1], ne_m[2], ne_m[3]);
        if (c.bmask.present) fprintf(f, ", [\"bool_mask\", [%zu, %zu, %zu, %zu]]", ne_b[0], ne_b[1], ne_b[2], ne_b[3]);
        for (int k = 0; k < AF_GRAD_COUNT; k++)
            if (g[k])
                fprintf(f, ", [\"%s\", [%zu, %zu, %zu, %zu]], [\"gs_%s\", [%zu, %zu, %zu]]", af_grad_names[k], gne[k][0],
                        gne[k][1], gne[k][2], gne[k][3], af_grad_names[k], gne[k][0], gne[k][1], gne[k][2]);
        fprintf(f, "]}\n");
        put_array(f, &tt->qv, ne_q);
        put_array(f, &tt->kv, ne_k);
        put_array(f, &tt->vv, ne_v);
        put_array(f, &tt->dov, ne_o);
        if (c.amask.present) put_array(f, &tt->am, ne_m);
        if (c.bmask.present) put_array(f, &tt->bm, ne_b);
        for (int k = 0; k < AF_GRAD_COUNT; k++) {
            if (!g[k]) continue;
            fwrite(g[k], sizeof(double), gne[k][0] * gne[k][1] * gne[k][2] * gne[k][3], f);
            fwrite(o.gscale[k], sizeof(double), af_ref_grad_rows(&c, k), f);
            free(g[k]);
            free(o.gscale[k]);
        }
    }
    af_scratch_release(&ws);
    af_inputs_destroy(in);
    return fclose(f) == 0 ? 0 : 1;
}
