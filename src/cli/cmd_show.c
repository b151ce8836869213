/* cmd_show.c - `attnfuzz show BUNDLE`: what a person needs to file the bug. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz/bundle.h"
#include "attnfuzz/mem.h"
#include "cli.h"

static void af_show_usage(FILE *f) {
    fprintf(f, "usage: attnfuzz show [--heatmap FILE.png] [--budget MIB] BUNDLE\n"
               "\n"
               "Prints the case (shapes, layouts, dtype, masks, scale, dropout), each backend's\n"
               "metrics and its worst element; for a backward case also each gradient's.\n"
               "--heatmap draws |out - ref| over (query position, value dim) for the worst\n"
               "(batch, head) of the worst backend: blocks point at a layout bug, an even wash at\n"
               "a scale bug; for a backward case each gradient recorded also gets one, FILE-dq.png\n"
               "(rows: its sequence positions, columns: its last dim). Arrays are read only for a\n"
               "case within --budget MiB of tensors (default 64), as for replay.\n");
}

static void af_show_tensor(const char *name, const af_tensor_spec *t) {
    printf("  %s: layout %s", name, af_layout_names[t->layout]);
    if (t->perm) printf(", memory order #%u", t->perm);
    if (t->pad) printf(", rows padded by %u", t->pad);
    if (t->bcast != AF_BCAST_NONE) printf(", stride 0 over %s", af_bcast_names[t->bcast]);
    printf("; values %s, magnitude 1e%g", af_dist_names[t->dist], t->mag_q4 / 4.0);
    if (t->special != AF_SPECIAL_NONE) printf(", planted %s", af_special_names[t->special]);
    printf(", seed %u\n", t->seed);
}

/* FILE.png -> FILE-<name>.png */
static void af_show_sibling(const char *path, const char *name, char *buf, size_t len) {
    size_t n = strlen(path);
    if (n >= 4 && strcmp(path + n - 4, ".png") == 0) n -= 4;
    snprintf(buf, len, "%.*s-%s.png", (int)n, path, name);
}

/* The heatmap of gradient g of backend record r (its worst (batch, head)). */
static int af_show_grad_heatmap(const af_bundle *b, const af_bundle_record *r, int g, const char *heatmap) {
    const af_case *c = af_bundle_case(b);
    af_error err = {0};
    double *got = NULL, *ref = NULL;
    int rc = 0;
    if (af_bundle_load_grad(b, r->backend, g, &got, &err) != AF_OK || af_bundle_load_grad(b, "ref", g, &ref, &err) != AF_OK) {
        fprintf(stderr, "attnfuzz show: %s\n", err.msg);
        rc = 2;
    } else if (got && ref) {
        size_t ne[4];
        af_case_grad_shape(c, g, ne);
        size_t bh = r->grad_m[g].worst[0] * ne[1] + r->grad_m[g].worst[1];
        if (bh >= ne[0] * ne[1]) bh = 0;
        char path[4096];
        af_show_sibling(heatmap, af_grad_names[g], path, sizeof path);
        if (af_heatmap_write_png(path, got + bh * ne[2] * ne[3], ref + bh * ne[2] * ne[3], ne[2], ne[3], &err) != AF_OK) {
            fprintf(stderr, "attnfuzz show: %s\n", err.msg);
            rc = 2;
        } else {
            printf("heatmap  %s: |%s of %s - ref| for batch %zu head %zu\n", path, af_grad_names[g], r->backend,
                   bh / ne[1], bh % ne[1]);
        }
    }
    af_free(got);
    af_free(ref);
    return rc;
}

/* The checks beyond one output: a guard_write finding's bands, a nondeterministic finding's
 * two runs (how many elements of each recorded output and gradient differ bitwise). */
static int af_show_checks(const af_bundle *b) {
    const af_guard_writes *gw = af_bundle_guard_writes(b);
    for (size_t i = 0; i < gw->n; i++)
        printf("guard    %s: %llu element%s changed in the margin %s, the first at element %llu of it\n", gw->w[i].buffer,
               (unsigned long long)gw->w[i].count, gw->w[i].count == 1 ? "" : "s", af_margin_names[gw->w[i].margin],
               (unsigned long long)gw->w[i].offset);
    if (af_bundle_kind(b) != AF_KIND_NONDETERMINISTIC) return 0;
    const af_case *c = af_bundle_case(b);
    for (size_t i = 0; i < af_bundle_record_count(b); i++) {
        const char *name = af_bundle_record_at(b, i)->backend;
        for (int g = -1; g < AF_GRAD_COUNT; g++) {
            af_error err = {0};
            double *one = NULL, *two = NULL;
            af_status st = g < 0 ? af_bundle_load_output(b, name, &one, &err) : af_bundle_load_grad(b, name, g, &one, &err);
            if (st == AF_OK && one) st = af_bundle_load_run2(b, name, g, &two, &err);
            if (st != AF_OK) {
                fprintf(stderr, "attnfuzz show: %s\n", err.msg);
                af_free(one);
                return 2;
            }
            if (one && two) {
                size_t ne[4] = {c->batch, c->q_heads, c->q_len, c->v_head_dim};
                if (g >= 0) af_case_grad_shape(c, g, ne);
                af_tensor t1, t2;
                af_tensor_contiguous(&t1, AF_F64, 4, ne);
                t2 = t1;
                t1.data = one;
                t2.data = two;
                af_result r;
                if (af_oracle_compare_bitwise(&t1, &t2, NULL, AF_KIND_NONDETERMINISTIC, &r, &err) == AF_OK)
                    printf("run2     %s %s: %zu of %zu elements differ between the two runs (largest %.3g)\n", name,
                           g < 0 ? "out" : af_grad_names[g], r.m.n_diverge, af_tensor_numel(&t1), r.m.max_abs);
            }
            af_free(one);
            af_free(two);
        }
    }
    return 0;
}

static void af_show_mask(const char *name, const af_case *c, const af_mask_spec *m, bool additive) {
    if (!m->present) return;
    size_t full[4] = {c->batch, c->q_heads, c->q_len, c->kv_len};
    printf("  %s: shape [", name);
    for (int d = m->rank2 ? 2 : 0; d < 4; d++) printf("%s%zu", d > (m->rank2 ? 2 : 0) ? "," : "", (m->dims & (1u << d)) ? full[d] : (size_t)1);
    printf("]%s, %s", m->expanded ? " expanded (stride 0)" : "", af_mask_pattern_names[m->pattern]);
    if (additive) printf(", dtype %s, masked = %s", af_dtype_names[m->dtype], af_mask_fill_names[m->fill]);
    printf("\n");
}

int af_cmd_show(int argc, char **argv) {
    const char *heatmap = NULL;
    static const struct option longopts[] = {
        {"heatmap", required_argument, 0, 'm'}, {"budget", required_argument, 0, 'b'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    size_t budget = 0;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (opt == 'm') {
            heatmap = optarg;
        } else if (opt == 'b') {
            char *end;
            double mib = strtod(optarg, &end);
            if (*end || !(mib > 0) || mib > 1 << 20) {
                fprintf(stderr, "attnfuzz show: --budget wants MiB of tensors per case, got \"%s\"\n", optarg);
                return 2;
            }
            budget = (size_t)(mib * 1048576.0);
        } else if (opt == 'h') {
            af_show_usage(stdout);
            return 0;
        } else {
            af_show_usage(stderr);
            return 2;
        }
    }
    if (optind != argc - 1) {
        af_show_usage(stderr);
        return 2;
    }
    af_error err = {0};
    af_bundle *b;
    if (af_bundle_read(argv[optind], &b, &err) != AF_OK) {
        fprintf(stderr, "attnfuzz show: %s\n", err.msg);
        return 2;
    }
    const af_case *c = af_bundle_case(b);
    char feat[512];
    af_case_features_str(c, feat, sizeof feat);
    printf("bundle   %s\n", af_bundle_dir(b));
    bool on_grad = strcmp(af_bundle_tensor(b), "out") != 0;
    printf("finding  %s%s%s by %s%s%s, signature %016llx\n", af_kind_names[af_bundle_kind(b)], on_grad ? " in " : "",
           on_grad ? af_bundle_tensor(b) : "", af_bundle_who(b),
           af_bundle_relation(b) ? " under relation " : "", af_bundle_relation(b) ? af_bundle_relation(b) : "",
           (unsigned long long)af_bundle_signature(b));
    printf("features %s\n", feat);
    if (af_show_checks(b) != 0) {
        af_bundle_free(b);
        return 2;
    }
    printf("shape    Q [%u,%u,%u,%u]  K [%u,%u,%u,%u]  V [%u,%u,%u,%u]  out [%u,%u,%u,%u]\n", c->batch, c->q_heads,
           c->q_len, c->head_dim, c->batch, c->kv_heads, c->kv_len, c->head_dim, c->batch, c->kv_heads, c->kv_len,
           c->v_head_dim, c->batch, c->q_heads, c->q_len, c->v_head_dim);
    printf("dtype    %s%s\n", af_dtype_names[c->dtype],
           c->dtype == AF_F32 ? (c->allow_tf32 ? " (TF32 allowed)" : " (TF32 not allowed)") : "");
    printf("scale    %.9g%s, placed at %s", af_case_scale(c), c->scale_set ? "" : " (default 1/sqrt(D))",
           af_placement_names[c->placement]);
    if (c->softcap > 0) printf(", softcap %g", c->softcap);
    printf("\n");
    printf("masks   ");
    if (c->causal) printf(" causal");
    if (c->causal || af_case_has_window(c))
        printf(" diagonal %s (offset %d for batch 0)", af_diag_names[c->diag], af_case_diag_offset(c, 0));
    if (af_case_has_window(c)) printf(" window (%d, %d)", c->window_left, c->window_right);
    if (c->key_padding) {
        printf(" key_padding [");
        for (uint32_t i = 0; i < c->batch; i++) printf("%s%u", i ? "," : "", c->kv_valid[i]);
        printf("]");
    }
    if (!c->causal && !af_case_has_window(c) && !c->key_padding && !c->amask.present && !c->bmask.present) printf(" none");
    printf("\n");
    af_show_mask("additive mask", c, &c->amask, true);
    af_show_mask("boolean mask", c, &c->bmask, false);
    if (c->dropout_p > 0) printf("dropout  p = %g, seed %llu\n", c->dropout_p, (unsigned long long)c->dropout_seed);
    printf("inputs\n");
    for (int t = 0; t < AF_QKV_COUNT; t++) af_show_tensor(af_tensor_names[t], &c->t[t]);
    if (c->bwd.grads) {
        printf("backward");
        for (int g = 0; g < AF_GRAD_COUNT; g++)
            if (c->bwd.grads & (1u << g)) printf(" %s", af_grad_names[g]);
        printf(" of sum(out * dO)\n");
        af_show_tensor("do", &c->bwd.dout);
    }
    af_tolerance tol;
    if (af_bundle_has_tolerance(b, &tol))
        printf("tolerance atol %.3g + rtol %.3g |ref| (fudge %g%s)\n", tol.atol, tol.rtol, tol.fudge,
               tol.honest ? ", from the honest run" : ", floor");
    size_t worst_i = SIZE_MAX;
    double worst = -1;
    int lse_rc = 0;
    printf("backends\n");
    for (size_t i = 0; i < af_bundle_record_count(b); i++) {
        const af_bundle_record *r = af_bundle_record_at(b, i);
        printf("  %-28s %-15s max_abs %.3g  max_rel %.3g  rel_fro %.3g  worst %.3g x tol at [b=%zu,h=%zu,i=%zu,d=%zu]: "
               "got %.9g want %.9g\n",
               r->backend, af_kind_names[r->kind], r->m.max_abs, r->m.max_rel, r->m.rel_fro, r->m.worst_ratio,
               r->m.worst[0], r->m.worst[1], r->m.worst[2], r->m.worst[3], r->m.worst_out, r->m.worst_ref);
        double ratio = isnan(r->m.worst_ratio) ? HUGE_VAL : r->m.worst_ratio;
        for (int g = 0; g < AF_GRAD_COUNT; g++) {
            if (!r->has_grad[g]) continue;
            const af_metrics *m = &r->grad_m[g];
            printf("    %-26s %-15s max_abs %.3g  max_rel %.3g  rel_fro %.3g  worst %.3g x tol at [%zu,%zu,%zu,%zu]: "
                   "got %.9g want %.9g\n",
                   af_grad_names[g], af_kind_names[r->grad_kind[g]], m->max_abs, m->max_rel, m->rel_fro, m->worst_ratio,
                   m->worst[0], m->worst[1], m->worst[2], m->worst[3], m->worst_out, m->worst_ref);
            double gr = isnan(m->worst_ratio) ? HUGE_VAL : m->worst_ratio;
            if (r->has_grad_output[g] && gr > ratio) ratio = gr;
        }
        if (r->has_lse) { /* its softmax statistics (worst row [b, h, i]) */
            const af_metrics *m = &r->lse_m;
            printf("    %-26s %-15s max_abs %.3g  worst %.3g x tol at [%zu,%zu,%zu]: got %.9g want %.9g\n", "lse",
                   af_kind_names[r->lse_kind], m->max_abs, m->worst_ratio, m->worst[0], m->worst[1], m->worst[2],
                   m->worst_out, m->worst_ref);
            /* the files load as the case's [B, Hq, Sq] (a hostile bundle's are named) */
            double *got = NULL, *ref = NULL;
            if (af_bundle_load_lse(b, r->backend, &got, &err) != AF_OK || af_bundle_load_lse(b, "ref", &ref, &err) != AF_OK) {
                fprintf(stderr, "attnfuzz show: %s\n", err.msg);
                lse_rc = 2;
            }
            af_free(got);
            af_free(ref);
        }
        if ((r->has_output || on_grad) && ratio > worst) {
            worst = ratio;
            worst_i = i;
        }
    }
    printf("replay   attnfuzz replay %s\n", af_bundle_dir(b));
    int rc = lse_rc;
    char *text = NULL;
    size_t tlen = 0;
    if (af_bundle_load_text(b, "stderr.txt", &text, &tlen, &err) != AF_OK) {
        fprintf(stderr, "attnfuzz show: %s\n", err.msg);
        rc = 2;
    } else if (text) {
        printf("stderr   the worker's last %zu bytes (stderr.txt):\n", tlen);
        for (char *line = text, *nl; *line; line = nl ? nl + 1 : line + strlen(line)) {
            nl = strchr(line, '\n');
            printf("  | %.*s\n", (int)(nl ? (size_t)(nl - line) : strlen(line)), line);
            if (!nl) break;
        }
    }
    af_free(text);
    if (heatmap) {
        double *out = NULL, *ref = NULL;
        if (worst_i == SIZE_MAX) {
            fprintf(stderr, "attnfuzz show: %s: no backend output to draw\n", af_bundle_dir(b));
            rc = 2;
        } else if (af_bundle_check_budget(b, budget, &err) != AF_OK ||
                   af_bundle_load_output(b, af_bundle_record_at(b, worst_i)->backend, &out, &err) != AF_OK ||
                   af_bundle_load_output(b, "ref", &ref, &err) != AF_OK) {
            fprintf(stderr, "attnfuzz show: %s\n", err.msg);
            rc = 2;
        } else if (!af_bundle_record_at(b, worst_i)->has_output) {
            printf("heatmap  (%s recorded no output)\n", af_bundle_record_at(b, worst_i)->backend);
        } else {
            const af_bundle_record *r = af_bundle_record_at(b, worst_i);
            size_t bh = r->m.worst[0] * c->q_heads + r->m.worst[1];
            if (bh >= (size_t)c->batch * c->q_heads) bh = 0;
            size_t off = bh * c->q_len * c->v_head_dim;
            if (af_heatmap_write_png(heatmap, out + off, ref + off, c->q_len, c->v_head_dim, &err) != AF_OK) {
                fprintf(stderr, "attnfuzz show: %s\n", err.msg);
                rc = 2;
            } else {
                printf("heatmap  %s: |%s - ref| for batch %zu head %zu\n", heatmap, r->backend, bh / c->q_heads,
                       bh % c->q_heads);
            }
        }
        af_free(out);
        af_free(ref);
        for (int g = 0; worst_i != SIZE_MAX && rc == 0 && g < AF_GRAD_COUNT; g++)
            if (af_bundle_record_at(b, worst_i)->has_grad_output[g])
                rc = af_show_grad_heatmap(b, af_bundle_record_at(b, worst_i), g, heatmap);
    }
    af_bundle_free(b);
    return rc;
}
