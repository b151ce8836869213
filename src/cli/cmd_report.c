/* cmd_report.c - `attnfuzz report DIR... [-o OUT]`: every bundle under the DIRs on one
 * page. OUT/index.html (heatmaps inline) and OUT/report.md (for pasting into an issue):
 * a table grouped by target and kind, then one section per finding with its minimized
 * shapes and features, heatmap (img/NAME.png, heatmap.c), worst elements, tolerance,
 * replay command and, for a real target (`worker:...`, `target:STACK/VARIANT`), a link
 * to a standalone repro/NAME.py written by `python -m attnfuzz.repro` with the project's
 * Python. Without Python the report says so and renders the rest.
 *
 * For a bug tracker: a finding that is a known real bug links the entry's public issues
 * (`pytorch PR #N`, `owner/repo#N`: GitHub links) and its standalone repro, copied to
 * known/REPRO.py so OUT travels as one folder; each finding of a real target that is a
 * known real bug or matches no entry gets the upstream page `attnfuzz triage --out` writes
 * (upstream/NAME.md: environment, expected against actual, verdict, repro, what to search).
 * A "Real bugs" section lists each such entry once, with its findings and their pages. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "attnfuzz/backend.h"
#include "attnfuzz/bundle.h"
#include "attnfuzz/known.h"
#include "attnfuzz/mem.h"
#include "attnfuzz/merge.h"
#include "attnfuzz/oracle.h"
#include "cli.h"
#include "core/proc.h"

#define AF_REPORT_MAX 4096 /* bundles per report */
#define AF_REPORT_WORST 5  /* worst elements listed per finding */

typedef struct af_report_elem {
    size_t idx[4];
    double out, ref, score;
} af_report_elem;

typedef struct af_report_item {
    char name[128];   /* bundle directory name: <kind>-<signature> */
    char dir[4096];
    af_bundle *b;
    char backend[256]; /* the failing backend whose output is drawn, "" if none */
    bool real;         /* worker: or target: */
    char png[160];     /* img/NAME.png, "" when not drawn */
    char note[512];    /* why a picture or repro is missing */
    char repro[160];   /* repro/NAME.py, "" when not written */
    af_report_elem worst[AF_REPORT_WORST];
    size_t n_worst;
    double max_abs;
    long long count;   /* from --stats, -1 when unknown */
    time_t written;    /* bundle directory mtime: when it was stored */
    int dup;           /* other copies of the same bundle name under the DIRs */
    char known[600];   /* the known bug it is: "ID (class): title; repro ...", "" if none */
    char known_id[128];    /* the matching entry's id, "" if none */
    bool known_real;       /* ... and its class is real_bug */
    char known_title[512];
    char known_issue[512]; /* its public issues in words ("pytorch PR #123 (open): ..."), "" if none */
    char known_repro[512]; /* its repro, copied: known/BASENAME, "" when none or not copied */
    char page[200];        /* upstream/NAME.md, written by attnfuzz triage --out; "" if none */
    af_tolerance tol;      /* the failing tensor's tolerance: the output's, or the gradient's */
    int tol_src;           /* 0 none recorded, 1 the output's, 2 the finding's gradient's */
} af_report_item;

static void af_report_usage(FILE *f) {
    fprintf(f, "usage: attnfuzz report [-o OUT] [--stats FILE]... [--no-repro] [--no-pages] [--known FILE]... [--no-known] "
               "DIR...\n"
               "\n"
               "Writes OUT/index.html and OUT/report.md (default OUT: report) over every bundle\n"
               "found under the DIRs (a crashes directory, a corpus, a bundle): a table grouped\n"
               "by target and kind, and per finding its minimized shapes and features, heatmap\n"
               "of |out - ref|, worst elements, tolerance, replay command and, for worker: and\n"
               "target: backends, a standalone repro script (OUT/repro/NAME.py, written by\n"
               "python -m attnfuzz.repro with the project's Python: .venv/bin/python, else\n"
               "$ATTNFUZZ_PYTHON, else python3).\n"
               "\n"
               "  --stats FILE   a campaign's --stats JSON: how often each signature recurred\n"
               "                 (default: DIR/stats.json of each DIR that has one, e.g. what\n"
               "                 attnfuzz merge wrote: then a campaign section, one row per shard)\n"
               "  --no-repro     do not write repro scripts\n"
               "  --no-pages     do not write upstream pages (OUT/upstream/NAME.md, by attnfuzz\n"
               "                 triage --no-share --out: for each real target's finding that is\n"
               "                 a known real bug or matches no known entry)\n"
               "  --known FILE   known bugs, as for fuzz (default: the repository's): a finding\n"
               "                 that is one says which, and a real bug links its public issues\n"
               "                 and its repro (copied to OUT/known/); --no-known: none\n"
               "\n"
               "exit: 0 written, 2 an error (unreadable bundles are listed in the report)\n");
}

/* --- collecting bundles -------------------------------------------------------------- */

static int af_report_cmp(const void *a, const void *b) {
    const af_report_item *x = *(af_report_item *const *)a, *y = *(af_report_item *const *)b;
    int c = strcmp(af_bundle_who(x->b), af_bundle_who(y->b));
    if (c) return c;
    if (af_bundle_kind(x->b) != af_bundle_kind(y->b)) return (int)af_bundle_kind(x->b) - (int)af_bundle_kind(y->b);
    return strcmp(x->name, y->name);
}

typedef struct af_report {
    af_report_item **items;
    size_t n;
    char bad[64][600]; /* unreadable bundles: path and message */
    size_t n_bad;
    const char *out_dir;
    cJSON *campaign;   /* the stats of a merged campaign (merge.h), NULL when none */
} af_report;

static void af_report_add(af_report *r, const char *dir, const char *name) {
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->items[i]->name, name)) { /* the same finding stored twice: shown once */
            r->items[i]->dup++;
            return;
        }
    if (r->n >= AF_REPORT_MAX) return;
    af_error err = {0};
    af_bundle *b;
    if (af_bundle_read(dir, &b, &err) != AF_OK) {
        if (r->n_bad < 64) snprintf(r->bad[r->n_bad++], sizeof r->bad[0], "%s", err.msg);
        return;
    }
    af_report_item *it = af_calloc(1, sizeof *it);
    if (!it) {
        af_bundle_free(b);
        return;
    }
    it->b = b;
    it->count = -1;
    snprintf(it->name, sizeof it->name, "%s", name);
    snprintf(it->dir, sizeof it->dir, "%s", dir);
    struct stat sb;
    if (stat(dir, &sb) == 0) it->written = sb.st_mtime;
    r->items[r->n++] = it;
}

/* Bundles at DIR or below it (depth 4), skipping hidden entries and the output. */
static void af_report_scan(af_report *r, const char *dir, int depth) {
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/case.json", dir);
    if (stat(path, &sb) == 0) {
        const char *slash = strrchr(dir, '/');
        char name[128];
        snprintf(name, sizeof name, "%s", slash && slash[1] ? slash + 1 : dir);
        af_report_add(r, dir, name);
        return;
    }
    if (depth > 4) return;
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
            struct stat cs;
            if (stat(path, &cs) == 0 && S_ISDIR(cs.st_mode) && strcmp(path, r->out_dir) != 0)
                af_report_scan(r, path, depth + 1);
        }
        free(names[i]);
    }
    if (n >= 0) free(names);
}

/* Counts from a campaign's stats JSON (signatures[].signature/count). */
static void af_report_stats(af_report *r, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "attnfuzz report: --stats %s: %s\n", path, strerror(errno));
        return;
    }
    char *text = af_malloc(1 << 24);
    size_t n = text ? fread(text, 1, (1 << 24) - 1, f) : 0;
    fclose(f);
    if (!text) return;
    text[n] = 0;
    cJSON *j = cJSON_Parse(text);
    af_free(text);
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "signatures")) {
        const cJSON *sg = cJSON_GetObjectItem(it, "signature"), *cnt = cJSON_GetObjectItem(it, "count");
        if (!cJSON_IsString(sg) || !cJSON_IsNumber(cnt)) continue;
        uint64_t sig = strtoull(sg->valuestring, NULL, 16);
        for (size_t i = 0; i < r->n; i++)
            if (af_bundle_signature(r->items[i]->b) == sig)
                r->items[i]->count = (r->items[i]->count < 0 ? 0 : r->items[i]->count) + (long long)cnt->valuedouble;
    }
    /* known bugs (known-<id> bundles): hits per id */
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "known")) {
        const cJSON *id = cJSON_GetObjectItem(it, "id"), *hits = cJSON_GetObjectItem(it, "hits");
        if (!cJSON_IsString(id) || !cJSON_IsNumber(hits)) continue;
        for (size_t i = 0; i < r->n; i++)
            if (!strncmp(r->items[i]->name, "known-", 6) && !strcmp(r->items[i]->name + 6, id->valuestring))
                r->items[i]->count = (r->items[i]->count < 0 ? 0 : r->items[i]->count) + (long long)hits->valuedouble;
    }
    if (!j) fprintf(stderr, "attnfuzz report: --stats %s: not JSON\n", path);
    const cJSON *fmt = cJSON_GetObjectItem(j, "format");
    if (!r->campaign && cJSON_IsString(fmt) && !strcmp(fmt->valuestring, AF_MERGE_FORMAT)) {
        r->campaign = j; /* the merged campaign's summary, written above the findings */
        return;
    }
    cJSON_Delete(j);
}

/* --- per finding: picture and worst elements --------------------------------------------- */

static bool af_report_is_real(const char *backend) { return af_backend_spec_kind(backend) == AF_BACKEND_WORKER; }

/* The failing tensor (the output, or the finding's gradient) of the worst backend: its worst
 * elements and a heatmap of its worst (batch, head). */
static void af_report_draw(af_report_item *it, const char *out_dir) {
    const af_case *c = af_bundle_case(it->b);
    const int g = af_bundle_grad(it->b);
    size_t pick = SIZE_MAX;
    it->tol_src = af_bundle_has_tolerance(it->b, &it->tol) ? 1 : 0;
    double worst = -1;
    for (size_t i = 0; i < af_bundle_record_count(it->b); i++) {
        const af_bundle_record *r = af_bundle_record_at(it->b, i);
        if (!strcmp(r->backend, "ref")) continue;
        if (af_report_is_real(r->backend) && !it->real) {
            it->real = true;
            snprintf(it->backend, sizeof it->backend, "%s", r->backend);
        }
        const af_metrics *m = g < 0 ? &r->m : &r->grad_m[g];
        bool has = g < 0 ? r->has_output : r->has_grad_output[g];
        af_kind kind = g < 0 ? r->kind : r->grad_kind[g];
        double ratio = isnan(m->worst_ratio) ? HUGE_VAL : m->worst_ratio;
        if (has && kind != AF_KIND_OK && ratio > worst) {
            worst = ratio;
            pick = i;
        }
    }
    if (pick == SIZE_MAX) {
        snprintf(it->note, sizeof it->note, "no failing backend output recorded: no picture");
        return;
    }
    const af_bundle_record *r = af_bundle_record_at(it->b, pick);
    if (!it->real) snprintf(it->backend, sizeof it->backend, "%s", r->backend);
    if (g >= 0 && r->has_grad_tol[g]) { /* a gradient finding is judged by the gradient's tolerance */
        it->tol = r->grad_tol[g];
        it->tol_src = 2;
    }
    const af_metrics *rm = g < 0 ? &r->m : &r->grad_m[g];
    it->max_abs = rm->max_abs;
    double *out = NULL, *ref = NULL;
    af_error err = {0};
    af_status st = g < 0 ? af_bundle_load_output(it->b, r->backend, &out, &err) : af_bundle_load_grad(it->b, r->backend, g, &out, &err);
    if (st == AF_OK) st = g < 0 ? af_bundle_load_output(it->b, "ref", &ref, &err) : af_bundle_load_grad(it->b, "ref", g, &ref, &err);
    if (st == AF_OK && (!out || !ref)) st = af_error_set(&err, AF_ERR_FORMAT, "%s: the gradient's arrays are missing", af_bundle_dir(it->b));
    if (st != AF_OK) {
        snprintf(it->note, sizeof it->note, "%s", err.msg);
        af_free(out);
        af_free(ref);
        return;
    }
    af_tolerance tol = it->tol_src ? it->tol : (af_tolerance){0};
    size_t ne[4] = {c->batch, c->q_heads, c->q_len, c->v_head_dim};
    if (g >= 0) af_case_grad_shape(c, g, ne);
    size_t B = ne[0], H = ne[1], S = ne[2], D = ne[3], n = B * H * S * D;
    /* the AF_REPORT_WORST worst elements: class mismatches first, then by |out-ref| / tolerance */
    for (size_t e = 0; e < n; e++) {
        double o = out[e], f = ref[e], score;
        bool same_class = (isnan(o) && isnan(f)) || (isinf(o) && isinf(f) && (o > 0) == (f > 0)) ||
                          (isfinite(o) && isfinite(f));
        if (!same_class) {
            score = HUGE_VAL;
        } else if (isfinite(o)) {
            double t = tol.atol + tol.rtol * fabs(f);
            score = t > 0 ? fabs(o - f) / t : fabs(o - f);
        } else {
            continue;
        }
        if (score <= 0) continue;
        size_t k;
        if (it->n_worst < AF_REPORT_WORST) {
            k = it->n_worst++;
        } else if (it->worst[AF_REPORT_WORST - 1].score < score) {
            k = AF_REPORT_WORST - 1;
        } else {
            continue;
        }
        while (k > 0 && it->worst[k - 1].score < score) { /* keep them sorted, worst first */
            it->worst[k] = it->worst[k - 1];
            k--;
        }
        af_report_elem *w = &it->worst[k];
        w->idx[3] = e % D, w->idx[2] = e / D % S, w->idx[1] = e / D / S % H, w->idx[0] = e / D / S / H;
        w->out = o, w->ref = f, w->score = score;
    }
    size_t b0 = it->n_worst ? it->worst[0].idx[0] : rm->worst[0], h0 = it->n_worst ? it->worst[0].idx[1] : rm->worst[1];
    size_t bh = b0 * H + h0;
    if (bh >= B * H) bh = 0;
    char path[4400];
    snprintf(it->png, sizeof it->png, "img/%s.png", it->name);
    snprintf(path, sizeof path, "%s/%s", out_dir, it->png);
    if (af_heatmap_write_png(path, out + bh * S * D, ref + bh * S * D, S, D, &err) != AF_OK) {
        snprintf(it->note, sizeof it->note, "%s", err.msg);
        it->png[0] = 0;
    }
    af_free(out);
    af_free(ref);
}

/* --- repro scripts through Python --------------------------------------------------------- */

/* Runs PYTHON -m attnfuzz.repro BUNDLE -o OUT --search CWD (no shell; stdin and stdout
 * /dev/null, stderr into errpath) and waits for it; *code: its exit status, 128 when a
 * signal ended it. AF_ERR_INVALID when Python cannot be run, AF_ERR_IO when the system
 * refuses (as af_proc_spawn). */
static af_status af_report_run_python(const af_proc_python *py, char **envp, const char *bundle, const char *out,
                                      const char *errpath, int *code, af_error *err) {
    char cwd[4096] = ".";
    if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, ".");
    char *argv[] = {(char *)py->exe, "-m", "attnfuzz.repro", (char *)bundle, "-o", (char *)out, "--search", cwd, NULL};
    af_proc_opts o;
    af_proc_opts_init(&o);
    o.fd[0] = o.fd[1] = AF_PROC_DEVNULL;
    o.err_path = errpath;
    o.envp = envp;
    pid_t pid;
    int status;
    AF_TRY(af_proc_spawn(argv, &o, &pid, err));
    AF_TRY(af_proc_wait(pid, &status, err));
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    return AF_OK;
}

/* Writes the repro script of it, a real target's finding. When Python cannot run attnfuzz.repro
 * at all (it cannot be started, or a module is missing: attnfuzz itself, numpy, zstandard),
 * sets *python_missing, says why in why (len bytes), and later items are not tried. */
static void af_report_repro(af_report_item *it, const af_proc_python *py, char **envp, const char *out_dir,
                            bool *python_missing, char *why, size_t len) {
    if (!it->real) return;
    if (*python_missing) {
        snprintf(it->note, sizeof it->note, "no repro script: Python unavailable");
        return;
    }
    char out[4400], err[4400];
    snprintf(it->repro, sizeof it->repro, "repro/%s.py", it->name);
    snprintf(out, sizeof out, "%s/%s", out_dir, it->repro);
    snprintf(err, sizeof err, "%s/repro/%s.err", out_dir, it->name);
    int rc = 0;
    af_error perr;
    af_status st = af_report_run_python(py, envp, it->dir, out, err, &rc, &perr);
    if (st == AF_OK && rc == 0) {
        unlink(err);
        return;
    }
    it->repro[0] = 0;
    if (st != AF_OK) {
        *python_missing = st == AF_ERR_INVALID; /* it cannot be run: no use trying again */
        if (*python_missing) snprintf(why, len, "%.500s", perr.msg);
        snprintf(it->note, sizeof it->note, "no repro script: %.400s", perr.msg);
        unlink(err);
        return;
    }
    char msg[400] = "";
    FILE *f = fopen(err, "r");
    if (f) {
        char line[400];
        while (fgets(line, sizeof line, f)) /* the last line says why */
            if (line[0] != '\n') snprintf(msg, sizeof msg, "%s", line);
        fclose(f);
    }
    msg[strcspn(msg, "\n")] = 0;
    if (rc == 1 && strstr(msg, "No module named")) {
        *python_missing = true;
        snprintf(why, len, "%.300s: %.250s", py->exe, msg);
    }
    snprintf(it->note, sizeof it->note, "no repro script: %s", msg[0] ? msg : "attnfuzz.repro failed");
}

/* --- for the tracker: a known real bug's repro, upstream pages ------------------------------ */

/* Copies the matching entry's repro (a path from the project root, root; "" when no root was
 * found: from the current directory) to OUT/known/BASENAME, once for the entries that share
 * one, and sets it->known_repro; a note says why when it cannot. */
static void af_report_copy_repro(af_report_item *it, const char *src, const char *root, const char *out_dir) {
    const char *slash = strrchr(src, '/');
    const char *base = slash ? slash + 1 : src;
    char from[4800], to[4800];
    if (src[0] == '/' || !root[0]) snprintf(from, sizeof from, "%s", src);
    else snprintf(from, sizeof from, "%s/%s", root, src);
    snprintf(to, sizeof to, "%s/known/%s", out_dir, base);
    struct stat sb;
    if (stat(to, &sb) == 0) { /* another finding of an entry with this repro copied it */
        snprintf(it->known_repro, sizeof it->known_repro, "known/%s", base);
        return;
    }
    FILE *in = fopen(from, "rb");
    FILE *out = in ? fopen(to, "wb") : NULL;
    bool ok = in && out;
    char buf[8192];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
    if (in) ok = ok && !ferror(in), fclose(in);
    if (out && fclose(out) != 0) ok = false;
    if (ok) {
        snprintf(it->known_repro, sizeof it->known_repro, "known/%s", base);
        return;
    }
    if (out) unlink(to);
    snprintf(it->note, sizeof it->note, "the known entry's repro %.300s was not copied: %s", from, strerror(errno));
}

/* Does this finding get an upstream page: a real target's, a known real bug or no known one
 * (a new finding: the page is the draft to file). Known conventions and precision limits are
 * not filed. */
static bool af_report_wants_page(const af_report_item *it) { return it->real && (it->known_real || !it->known_id[0]); }

/* Runs PYTHON -m attnfuzz.triage --no-share [--no-known] --out OUT/upstream BUNDLE... once
 * over the findings that want a page (stdout /dev/null, stderr kept in upstream/triage.err
 * when it fails) and sets each one's page to upstream/NAME.md where the page was written;
 * a note where it was not. */
static void af_report_pages(af_report *r, const af_proc_python *py, char **envp, bool no_known) {
    size_t want = 0;
    for (size_t i = 0; i < r->n; i++) want += af_report_wants_page(r->items[i]);
    if (!want) return;
    char dir[4200], errpath[4300];
    snprintf(dir, sizeof dir, "%s/upstream", r->out_dir);
    snprintf(errpath, sizeof errpath, "%s/triage.err", dir);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        for (size_t i = 0; i < r->n; i++)
            if (af_report_wants_page(r->items[i]))
                snprintf(r->items[i]->note, sizeof r->items[i]->note, "no upstream page: %.300s: %s", dir, strerror(errno));
        return;
    }
    char **argv = af_calloc(want + 10, sizeof *argv);
    if (!argv) return;
    size_t a = 0;
    argv[a++] = (char *)py->exe;
    argv[a++] = "-m";
    argv[a++] = "attnfuzz.triage";
    argv[a++] = "--no-share"; /* the models and the known entries: no replays (seconds, not minutes) */
    if (no_known) argv[a++] = "--no-known";
    argv[a++] = "--out";
    argv[a++] = dir;
    for (size_t i = 0; i < r->n; i++)
        if (af_report_wants_page(r->items[i])) argv[a++] = r->items[i]->dir;
    af_proc_opts o;
    af_proc_opts_init(&o);
    o.fd[0] = o.fd[1] = AF_PROC_DEVNULL;
    o.err_path = errpath;
    o.envp = envp;
    pid_t pid;
    int status = 0;
    af_error err = {0};
    af_status st = af_proc_spawn(argv, &o, &pid, &err);
    if (st == AF_OK) st = af_proc_wait(pid, &status, &err);
    af_free(argv);
    bool clean = st == AF_OK && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    for (size_t i = 0; i < r->n; i++) {
        af_report_item *it = r->items[i];
        if (!af_report_wants_page(it)) continue;
        char page[4400];
        struct stat sb;
        snprintf(page, sizeof page, "%s/%s.md", dir, it->name);
        if (stat(page, &sb) == 0 && S_ISREG(sb.st_mode)) snprintf(it->page, sizeof it->page, "upstream/%s.md", it->name);
        else if (!it->note[0])
            snprintf(it->note, sizeof it->note, "no upstream page: %.400s",
                     st != AF_OK ? err.msg : "attnfuzz triage did not write it (upstream/triage.err says why)");
    }
    if (clean) unlink(errpath);
}

/* --- writing ------------------------------------------------------------------------------ */

static void af_html_esc(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

static void af_md_esc(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '|' || *s == '`') fputc('\\', f);
        fputc(*s, f);
    }
}

/* GitHub repositories of the short names the known entries' `issue` fields use. */
static const char *const af_report_repos[][2] = {
    {"pytorch", "pytorch/pytorch"},          {"jax", "jax-ml/jax"},           {"onnxruntime", "microsoft/onnxruntime"},
    {"openvino", "openvinotoolkit/openvino"}, {"tvm", "apache/tvm"},           {"tinygrad", "tinygrad/tinygrad"},
    {"iree", "iree-org/iree"},               {"flashinfer", "flashinfer-ai/flashinfer"}, {"xla", "openxla/xla"},
    {"oneDNN", "uxlfoundation/oneDNN"},      {"keras", "keras-team/keras"}, {"cudnn-frontend", "NVIDIA/cudnn-frontend"},
    {"onnxscript", "microsoft/onnxscript"}};

typedef struct af_report_link {
    size_t at, len; /* the reference's bytes in the text */
    char url[300];
} af_report_link;

static bool af_report_repo_char(char c) { return isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.' || c == '/'; }

/* The public issues an entry's `issue` text names, in order, at most max: a URL as written;
 * `owner/repo#N` and `name#N` (name a short name of af_report_repos) as
 * https://github.com/owner/repo/issues/N (GitHub redirects an issue number to its PR);
 * `owner/repo PR #N`, `name PR #N` as .../pull/N; a bare `#N` after one of them in the same
 * repository ("iree-org/iree PR #23304 / #23544"). A name it does not know is no link. */
static size_t af_report_links(const char *text, af_report_link *links, size_t max) {
    size_t n = 0, last_end = 0;
    char repo[160] = "";
    for (size_t i = 0; text[i] && n < max; i++) {
        if (!strncmp(text + i, "https://", 8) || !strncmp(text + i, "http://", 7)) {
            size_t j = i;
            while (text[j] && !isspace((unsigned char)text[j]) && !strchr(")],;\"<>", text[j])) j++;
            while (j > i && text[j - 1] == '.') j--;
            links[n].at = i, links[n].len = j - i;
            snprintf(links[n].url, sizeof links[n].url, "%.*s", (int)(j - i), text + i);
            n++;
            last_end = j;
            i = j - 1;
            continue;
        }
        if (text[i] != '#' || !isdigit((unsigned char)text[i + 1])) continue;
        size_t end = i + 1;
        while (isdigit((unsigned char)text[end])) end++;
        bool pr_sp = i >= 3 && !strncmp(text + i - 3, "PR ", 3), pr = pr_sp || (i >= 2 && !strncmp(text + i - 2, "PR", 2));
        size_t we = pr_sp ? i - 3 : pr ? i - 2 : i; /* the repository's word ends here (exclusive) */
        if (pr && we > 0 && text[we - 1] == ' ') we--;
        size_t ws = we;
        while (ws > last_end && af_report_repo_char(text[ws - 1])) ws--;
        char word[160];
        snprintf(word, sizeof word, "%.*s", (int)(we - ws), text + ws);
        const char *r = NULL;
        if (strchr(word, '/')) r = word;
        for (size_t k = 0; !r && word[0] && k < sizeof af_report_repos / sizeof af_report_repos[0]; k++)
            if (!strcasecmp(word, af_report_repos[k][0])) r = af_report_repos[k][1];
        if (!r && !word[0] && repo[0]) { /* a bare #N: the repository of the link before it */
            r = repo;
            ws = i;
        }
        if (!r) {
            i = end - 1;
            continue;
        }
        if (r != repo) snprintf(repo, sizeof repo, "%s", r);
        links[n].at = word[0] ? ws : i, links[n].len = end - links[n].at;
        snprintf(links[n].url, sizeof links[n].url, "https://github.com/%s/%s/%.*s", repo, pr ? "pull" : "issues",
                 (int)(end - i - 1), text + i + 1);
        n++;
        last_end = end;
        i = end - 1;
    }
    return n;
}

/* text with its issue references as links: HTML (md false) or Markdown. */
static void af_report_linked(FILE *f, const char *text, bool md) {
    af_report_link links[16];
    size_t n = af_report_links(text, links, 16), at = 0;
    char seg[600];
    for (size_t k = 0; k <= n; k++) {
        size_t upto = k < n ? links[k].at : strlen(text);
        snprintf(seg, sizeof seg, "%.*s", (int)(upto - at), text + at);
        if (md) af_md_esc(f, seg);
        else af_html_esc(f, seg);
        if (k == n) break;
        snprintf(seg, sizeof seg, "%.*s", (int)links[k].len, text + links[k].at);
        if (md) {
            fputc('[', f);
            af_md_esc(f, seg);
            fprintf(f, "](%s)", links[k].url);
        } else {
            fprintf(f, "<a href=\"");
            af_html_esc(f, links[k].url);
            fprintf(f, "\">");
            af_html_esc(f, seg);
            fprintf(f, "</a>");
        }
        at = links[k].at + links[k].len;
    }
}

static void af_report_shape(const af_case *c, char *buf, size_t len) {
    snprintf(buf, len, "%s B=%u Hq=%u Hkv=%u Sq=%u Sk=%u D=%u Dv=%u", af_dtype_names[c->dtype], c->batch, c->q_heads,
             c->kv_heads, c->q_len, c->kv_len, c->head_dim, c->v_head_dim);
}

static void af_report_time(time_t t, char *buf, size_t len) {
    struct tm tm;
    if (!t || !gmtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%SZ", &tm)) snprintf(buf, len, "?");
}

/* --- the campaign of a merged directory (attnfuzz merge) ---------------------------------- */

static double af_report_num(const cJSON *j, const char *name) {
    const cJSON *v = cJSON_GetObjectItem(j, name);
    return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

/* "3 of 4 shards (2 finished; missing: 3), 123456 execs in 1:02:03 (the longest shard),
 * 345 execs/s over all shards" */
static void af_report_campaign_line(const cJSON *c, char *buf, size_t len) {
    char missing[256] = "";
    size_t n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(c, "shards_missing")) {
        if (n + 16 >= sizeof missing) break;
        int w = snprintf(missing + n, sizeof missing - n, "%s%.0f", n ? ", " : "; missing: ", it->valuedouble);
        if (w > 0) n += (size_t)w;
    }
    double t = af_report_num(c, "elapsed");
    unsigned long v = t > 0 ? (unsigned long)t : 0;
    snprintf(buf, len,
             "%.0f of %.0f shards (%.0f finished%s), %.0f execs in %lu:%02lu:%02lu (the longest shard), %.0f execs/s "
             "over all shards",
             af_report_num(c, "shards_merged"), af_report_num(c, "shards"), af_report_num(c, "shards_finished"), missing,
             af_report_num(c, "execs"), v / 3600, v / 60 % 60, v % 60, af_report_num(c, "execs_per_sec"));
}

static void af_report_campaign_html(FILE *f, const cJSON *c) {
    char line[512];
    af_report_campaign_line(c, line, sizeof line);
    fprintf(f, "<h2>Campaign</h2>\n<p>%s.</p>\n", line);
    fprintf(f, "<table><tr><th>shard</th><th>host</th><th>execs</th><th>seconds</th><th>execs/s</th>"
               "<th>findings</th><th>state</th></tr>\n");
    const cJSON *row;
    cJSON_ArrayForEach(row, cJSON_GetObjectItem(c, "per_shard")) {
        const cJSON *h = cJSON_GetObjectItem(row, "host");
        fprintf(f, "<tr><td>%.0f</td><td>", af_report_num(row, "shard"));
        af_html_esc(f, cJSON_IsString(h) ? h->valuestring : "");
        fprintf(f, "</td><td>%.0f</td><td>%.0f</td><td>%.0f</td><td>%.0f</td><td>%s</td></tr>\n",
                af_report_num(row, "execs"), af_report_num(row, "elapsed"), af_report_num(row, "execs_per_sec"),
                af_report_num(row, "unique_signatures"),
                !cJSON_IsTrue(cJSON_GetObjectItem(row, "stats"))    ? "no stats yet"
                : cJSON_IsTrue(cJSON_GetObjectItem(row, "finished")) ? "finished"
                                                                     : "running");
    }
    fprintf(f, "</table>\n");
}

static void af_report_campaign_md(FILE *f, const cJSON *c) {
    char line[512];
    af_report_campaign_line(c, line, sizeof line);
    fprintf(f, "Campaign: %s.\n\n| shard | host | execs | seconds | execs/s | findings | state |\n"
               "| --- | --- | --- | --- | --- | --- | --- |\n",
            line);
    const cJSON *row;
    cJSON_ArrayForEach(row, cJSON_GetObjectItem(c, "per_shard")) {
        const cJSON *h = cJSON_GetObjectItem(row, "host");
        fprintf(f, "| %.0f | ", af_report_num(row, "shard"));
        af_md_esc(f, cJSON_IsString(h) ? h->valuestring : "");
        fprintf(f, " | %.0f | %.0f | %.0f | %.0f | %s |\n", af_report_num(row, "execs"), af_report_num(row, "elapsed"),
                af_report_num(row, "execs_per_sec"), af_report_num(row, "unique_signatures"),
                !cJSON_IsTrue(cJSON_GetObjectItem(row, "stats"))    ? "no stats yet"
                : cJSON_IsTrue(cJSON_GetObjectItem(row, "finished")) ? "finished"
                                                                     : "running");
    }
    fprintf(f, "\n");
}

static const char af_report_css[] =
    "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}"
    "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;"
    "vertical-align:top}th{background:#f3f3f3}code{font-size:12px}"
    ".finding{border-top:2px solid #888;margin-top:1.5em;padding-top:.5em}"
    ".finding img{image-rendering:pixelated;min-width:128px;max-width:640px;border:1px solid #999}"
    ".note{color:#a40}";

/* Marks the page once every picture has loaded (or failed): body data-images="ok N" or
 * "broken K of N", for a person (a red banner) and for the browser test. */
static const char af_report_js[] =
    "function afCheck(){var im=document.images,bad=0;for(var i=0;i<im.length;i++)"
    "if(!(im[i].complete&&im[i].naturalWidth>0))bad++;"
    "document.body.setAttribute('data-images',bad?('broken '+bad+' of '+im.length):('ok '+im.length));"
    "if(bad){var d=document.createElement('p');d.className='note';d.textContent=bad+' picture(s) did not load';"
    "document.body.insertBefore(d,document.body.firstChild);}}"
    "window.addEventListener('load',afCheck);";

/* "For the tracker": each known real bug once (its issues, its repro, its findings and their
 * upstream pages), then each finding of a real target that no entry matches (its page is the
 * draft to file). Nothing when there is neither. */
static bool af_report_first_of_entry(const af_report *r, size_t i) {
    for (size_t k = 0; k < i; k++)
        if (!strcmp(r->items[k]->known_id, r->items[i]->known_id)) return false;
    return true;
}

static bool af_report_any_tracker(const af_report *r) {
    for (size_t i = 0; i < r->n; i++)
        if (r->items[i]->known_real || (r->items[i]->real && !r->items[i]->known_id[0])) return true;
    return false;
}

static void af_report_tracker_html(FILE *f, const af_report *r) {
    if (!af_report_any_tracker(r)) return;
    fprintf(f, "<h2 id=\"tracker\">For the tracker</h2>\n<table><tr><th>bug</th><th>upstream issue</th><th>repro</th>"
               "<th>findings (upstream page)</th></tr>\n");
    for (size_t i = 0; i < r->n; i++) {
        const af_report_item *it = r->items[i];
        if (!it->known_real || !af_report_first_of_entry(r, i)) continue;
        fprintf(f, "<tr><td><b>");
        af_html_esc(f, it->known_id);
        fprintf(f, "</b>: ");
        af_html_esc(f, it->known_title);
        fprintf(f, "</td><td>");
        if (it->known_issue[0]) af_report_linked(f, it->known_issue, false);
        else fprintf(f, "none recorded");
        fprintf(f, "</td><td>");
        if (it->known_repro[0]) fprintf(f, "<a href=\"%s\">%s</a>", it->known_repro, it->known_repro);
        fprintf(f, "</td><td>");
        for (size_t k = i; k < r->n; k++) {
            const af_report_item *o = r->items[k];
            if (strcmp(o->known_id, it->known_id)) continue;
            fprintf(f, "<a href=\"#%s\">%s</a>", o->name, o->name);
            if (o->page[0]) fprintf(f, " (<a href=\"%s\">page</a>)", o->page);
            fprintf(f, "<br>");
        }
        fprintf(f, "</td></tr>\n");
    }
    for (size_t i = 0; i < r->n; i++) {
        const af_report_item *it = r->items[i];
        if (!it->real || it->known_id[0]) continue;
        fprintf(f, "<tr><td>new: <code>");
        af_html_esc(f, af_bundle_who(it->b));
        fprintf(f, "</code> %s</td><td>no known entry matches</td><td>", af_kind_names[af_bundle_kind(it->b)]);
        if (it->repro[0]) fprintf(f, "<a href=\"%s\">%s</a>", it->repro, it->repro);
        fprintf(f, "</td><td><a href=\"#%s\">%s</a>", it->name, it->name);
        if (it->page[0]) fprintf(f, " (<a href=\"%s\">draft page</a>)", it->page);
        fprintf(f, "</td></tr>\n");
    }
    fprintf(f, "</table>\n");
}

static void af_report_tracker_md(FILE *f, const af_report *r) {
    if (!af_report_any_tracker(r)) return;
    fprintf(f, "### For the tracker\n\n| bug | upstream issue | repro | findings (upstream page) |\n| --- | --- | --- | --- |\n");
    for (size_t i = 0; i < r->n; i++) {
        const af_report_item *it = r->items[i];
        if (!it->known_real || !af_report_first_of_entry(r, i)) continue;
        fprintf(f, "| **");
        af_md_esc(f, it->known_id);
        fprintf(f, "**: ");
        af_md_esc(f, it->known_title);
        fprintf(f, " | ");
        if (it->known_issue[0]) af_report_linked(f, it->known_issue, true);
        else fprintf(f, "none recorded");
        fprintf(f, " | ");
        if (it->known_repro[0]) fprintf(f, "[%s](%s)", it->known_repro, it->known_repro);
        fprintf(f, " | ");
        const char *sep = "";
        for (size_t k = i; k < r->n; k++) {
            const af_report_item *o = r->items[k];
            if (strcmp(o->known_id, it->known_id)) continue;
            fprintf(f, "%s%s", sep, o->name);
            if (o->page[0]) fprintf(f, " ([page](%s))", o->page);
            sep = "<br>";
        }
        fprintf(f, " |\n");
    }
    for (size_t i = 0; i < r->n; i++) {
        const af_report_item *it = r->items[i];
        if (!it->real || it->known_id[0]) continue;
        fprintf(f, "| new: `");
        af_md_esc(f, af_bundle_who(it->b));
        fprintf(f, "` %s | no known entry matches | %s | %s", af_kind_names[af_bundle_kind(it->b)], it->repro, it->name);
        if (it->page[0]) fprintf(f, " ([draft page](%s))", it->page);
        fprintf(f, " |\n");
    }
    fprintf(f, "\n");
}

static int af_report_write_html(const af_report *r, const char *path, const char *py_note) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>attnfuzz report</title>\n<style>%s</style>\n"
               "<script>%s</script></head>\n<body>\n<h1>attnfuzz report</h1>\n",
            af_report_css, af_report_js);
    fprintf(f, "<p>%zu finding%s", r->n, r->n == 1 ? "" : "s");
    if (r->n_bad) fprintf(f, ", %zu unreadable bundle%s", r->n_bad, r->n_bad == 1 ? "" : "s");
    fprintf(f, ".</p>\n");
    if (py_note[0]) {
        fprintf(f, "<p class=\"note\">");
        af_html_esc(f, py_note);
        fprintf(f, "</p>\n");
    }
    if (r->campaign) af_report_campaign_html(f, r->campaign);
    fprintf(f, "<table><tr><th>target</th><th>kind</th><th>findings</th><th>seen</th><th>bundles</th></tr>\n");
    for (size_t i = 0; i < r->n;) {
        size_t j = i;
        long long seen = 0;
        bool known = true;
        while (j < r->n && !strcmp(af_bundle_who(r->items[j]->b), af_bundle_who(r->items[i]->b)) &&
               af_bundle_kind(r->items[j]->b) == af_bundle_kind(r->items[i]->b)) {
            if (r->items[j]->count < 0) known = false;
            else seen += r->items[j]->count;
            j++;
        }
        fprintf(f, "<tr><td><code>");
        af_html_esc(f, af_bundle_who(r->items[i]->b));
        fprintf(f, "</code></td><td>%s</td><td>%zu</td><td>", af_kind_names[af_bundle_kind(r->items[i]->b)], j - i);
        if (known) fprintf(f, "%lld", seen);
        else fprintf(f, "&mdash;");
        fprintf(f, "</td><td>");
        for (size_t k = i; k < j; k++) fprintf(f, "%s<a href=\"#%s\">%s</a>", k > i ? " " : "", r->items[k]->name, r->items[k]->name);
        fprintf(f, "</td></tr>\n");
        i = j;
    }
    fprintf(f, "</table>\n");
    af_report_tracker_html(f, r);
    for (size_t i = 0; i < r->n; i++) {
        const af_report_item *it = r->items[i];
        const af_case *c = af_bundle_case(it->b);
        char shape[256], feat[512], when[64];
        af_report_shape(c, shape, sizeof shape);
        af_case_features_str(c, feat, sizeof feat);
        af_report_time(it->written, when, sizeof when);
        fprintf(f, "<div class=\"finding\" id=\"%s\">\n<h2>%s</h2>\n<table>\n", it->name, it->name);
        fprintf(f, "<tr><th>target</th><td><code>");
        af_html_esc(f, af_bundle_who(it->b));
        fprintf(f, "</code>%s%s</td></tr>\n", af_bundle_relation(it->b) ? " under relation " : "",
                af_bundle_relation(it->b) ? af_bundle_relation(it->b) : "");
        fprintf(f, "<tr><th>kind</th><td>%s", af_kind_names[af_bundle_kind(it->b)]);
        if (af_bundle_grad(it->b) >= 0) fprintf(f, " in %s (a gradient of the backward)", af_bundle_tensor(it->b));
        fprintf(f, "</td></tr>\n");
        if (it->known[0]) {
            fprintf(f, "<tr><th>known bug</th><td>");
            af_html_esc(f, it->known);
            fprintf(f, "</td></tr>\n");
            if (it->known_issue[0]) {
                fprintf(f, "<tr><th>upstream issue</th><td>");
                af_report_linked(f, it->known_issue, false);
                fprintf(f, "</td></tr>\n");
            }
            if (it->known_repro[0])
                fprintf(f, "<tr><th>known repro</th><td><a href=\"%s\">%s</a> (the entry's standalone script)</td></tr>\n",
                        it->known_repro, it->known_repro);
        }
        if (it->page[0])
            fprintf(f, "<tr><th>upstream page</th><td><a href=\"%s\">%s</a> (attnfuzz triage: environment, expected "
                       "against actual, verdict, repro, what to search for%s)</td></tr>\n",
                    it->page, it->page, it->known_id[0] ? "" : "; no known entry: a draft to file");
        fprintf(f, "<tr><th>first seen</th><td>%s", when);
        if (it->count >= 0) fprintf(f, "; seen %lld time%s", it->count, it->count == 1 ? "" : "s");
        if (it->dup) fprintf(f, "; %d more cop%s under the directories", it->dup, it->dup == 1 ? "y" : "ies");
        fprintf(f, "</td></tr>\n<tr><th>shape</th><td>%s</td></tr>\n<tr><th>features</th><td>", shape);
        af_html_esc(f, feat);
        fprintf(f, "</td></tr>\n");
        if (it->tol_src)
            fprintf(f, "<tr><th>tolerance</th><td>|out &minus; ref| &le; %.3g + %.3g |ref| (%s%s)</td></tr>\n",
                    it->tol.atol, it->tol.rtol, it->tol.honest ? "from the honest run" : "per-dtype floor",
                    it->tol_src == 2 ? "; the gradient's, its worst element's row"
                    : af_bundle_grad(it->b) >= 0 ? "; the output's: the bundle records no gradient tolerance"
                                                 : "");
        if (it->backend[0]) {
            fprintf(f, "<tr><th>max abs error</th><td>%.6g (<code>", it->max_abs);
            af_html_esc(f, it->backend);
            fprintf(f, "</code>)</td></tr>\n");
        }
        fprintf(f, "<tr><th>replay</th><td><code>attnfuzz replay ");
        af_html_esc(f, it->dir);
        fprintf(f, "</code></td></tr>\n");
        if (it->repro[0]) fprintf(f, "<tr><th>repro</th><td><a href=\"%s\">%s</a> (standalone: numpy and the target)</td></tr>\n", it->repro, it->repro);
        fprintf(f, "</table>\n");
        if (it->n_worst) {
            fprintf(f, "<table><tr><th>[b, h, i, d]</th><th>out</th><th>ref</th><th>&times; tolerance</th></tr>\n");
            for (size_t k = 0; k < it->n_worst; k++) {
                const af_report_elem *w = &it->worst[k];
                fprintf(f, "<tr><td>[%zu, %zu, %zu, %zu]</td><td>%.9g</td><td>%.9g</td><td>%.3g</td></tr>\n", w->idx[0],
                        w->idx[1], w->idx[2], w->idx[3], w->out, w->ref, w->score);
            }
            fprintf(f, "</table>\n");
        }
        if (it->png[0])
            fprintf(f, "<p><img src=\"%s\" alt=\"|out - ref| heatmap of %s\" title=\"|out - ref| over (query position, "
                       "value dim): black 0, white max, magenta NaN/Inf\"></p>\n", it->png, it->name);
        if (it->note[0]) {
            fprintf(f, "<p class=\"note\">");
            af_html_esc(f, it->note);
            fprintf(f, "</p>\n");
        }
        fprintf(f, "</div>\n");
    }
    if (r->n_bad) {
        fprintf(f, "<h2>Unreadable bundles</h2>\n<ul>\n");
        for (size_t i = 0; i < r->n_bad; i++) {
            fprintf(f, "<li>");
            af_html_esc(f, r->bad[i]);
            fprintf(f, "</li>\n");
        }
        fprintf(f, "</ul>\n");
    }
    fprintf(f, "</body></html>\n");
    return fclose(f) == 0 ? 0 : -1;
}

static int af_report_write_md(const af_report *r, const char *path, const char *py_note) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "## attnfuzz report: %zu finding%s\n\n", r->n, r->n == 1 ? "" : "s");
    if (py_note[0]) fprintf(f, "_%s_\n\n", py_note);
    if (r->campaign) af_report_campaign_md(f, r->campaign);
    af_report_tracker_md(f, r);
    fprintf(f, "| target | kind | bundle | known bug | seen | first seen | shape | features | max abs | tolerance | replay | repro "
               "| upstream page |\n");
    fprintf(f, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (size_t i = 0; i < r->n; i++) {
        const af_report_item *it = r->items[i];
        const af_case *c = af_bundle_case(it->b);
        char shape[256], feat[512], when[64];
        af_report_shape(c, shape, sizeof shape);
        af_case_features_str(c, feat, sizeof feat);
        af_report_time(it->written, when, sizeof when);
        fprintf(f, "| `");
        af_md_esc(f, af_bundle_who(it->b));
        bool grad = af_bundle_grad(it->b) >= 0;
        fprintf(f, "` | %s%s%s | %s | ", af_kind_names[af_bundle_kind(it->b)], grad ? " in " : "",
                grad ? af_bundle_tensor(it->b) : "", it->name);
        af_md_esc(f, it->known);
        fprintf(f, " | ");
        if (it->count >= 0) fprintf(f, "%lld", it->count);
        fprintf(f, " | %s | %s | ", when, shape);
        af_md_esc(f, feat);
        fprintf(f, " | %.3g | ", it->max_abs);
        if (it->tol_src) fprintf(f, "%.3g + %.3g\\|ref\\|%s", it->tol.atol, it->tol.rtol, it->tol_src == 2 ? " (gradient)" : "");
        fprintf(f, " | `attnfuzz replay ");
        af_md_esc(f, it->dir);
        fprintf(f, "` | %s | %s |\n", it->repro[0] ? it->repro : "", it->page);
    }
    fprintf(f, "\n");
    for (size_t i = 0; i < r->n; i++) {
        const af_report_item *it = r->items[i];
        if (!it->png[0] && !it->n_worst) continue;
        fprintf(f, "### %s\n\n", it->name);
        if (it->png[0]) fprintf(f, "![|out - ref| of %s](%s)\n\n", it->name, it->png);
        if (it->n_worst) {
            fprintf(f, "| [b, h, i, d] | out | ref | x tolerance |\n| --- | --- | --- | --- |\n");
            for (size_t k = 0; k < it->n_worst; k++)
                fprintf(f, "| [%zu, %zu, %zu, %zu] | %.9g | %.9g | %.3g |\n", it->worst[k].idx[0], it->worst[k].idx[1],
                        it->worst[k].idx[2], it->worst[k].idx[3], it->worst[k].out, it->worst[k].ref, it->worst[k].score);
            fprintf(f, "\n");
        }
        if (it->note[0]) fprintf(f, "_%s_\n\n", it->note);
    }
    for (size_t i = 0; i < r->n_bad; i++) fprintf(f, "- unreadable: %s\n", r->bad[i]);
    return fclose(f) == 0 ? 0 : -1;
}

static int af_mkdir(const char *path) {
    if (mkdir(path, 0755) == 0 || errno == EEXIST) return 0;
    fprintf(stderr, "attnfuzz report: cannot create %s: %s\n", path, strerror(errno));
    return -1;
}

int af_cmd_report(int argc, char **argv) {
    const char *out_dir = "report";
    const char *stats[16];
    int n_stats = 0;
    bool no_repro = false, no_pages = false;
    af_cli_known ko = {0};
    static const struct option longopts[] = {{"output", required_argument, 0, 'o'},
                                             AF_CLI_KNOWN_OPTIONS,
                                             {"stats", required_argument, 0, 's'},
                                             {"no-repro", no_argument, 0, 'n'},
                                             {"no-pages", no_argument, 0, 'p'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int opt, kr;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        if (opt == 'o') {
            out_dir = optarg;
        } else if (opt == 's' && n_stats < 16) {
            stats[n_stats++] = optarg;
        } else if (opt == 'n') {
            no_repro = true;
        } else if (opt == 'p') {
            no_pages = true;
        } else if ((kr = af_cli_known_option(&ko, opt, optarg)) != 0) {
            if (kr < 0) return 2;
        } else {
            af_report_usage(opt == 'h' ? stdout : stderr);
            return opt == 'h' ? 0 : 2;
        }
    }
    if (optind >= argc) {
        af_report_usage(stderr);
        return 2;
    }
    char sub[4200];
    if (af_mkdir(out_dir) != 0) return 2;
    snprintf(sub, sizeof sub, "%s/img", out_dir);
    if (af_mkdir(sub) != 0) return 2;
    snprintf(sub, sizeof sub, "%s/repro", out_dir);
    if (!no_repro && af_mkdir(sub) != 0) return 2;
    snprintf(sub, sizeof sub, "%s/known", out_dir);
    if (!ko.none && af_mkdir(sub) != 0) return 2;

    af_report *r = af_calloc(1, sizeof *r);
    af_report_item **items = af_calloc(AF_REPORT_MAX, sizeof *items);
    if (!r || !items) {
        af_free(r);
        af_free(items);
        fprintf(stderr, "attnfuzz report: out of memory\n");
        return 2;
    }
    r->items = items;
    r->out_dir = out_dir;
    bool explicit_stats = n_stats > 0;
    for (int a = optind; a < argc; a++) {
        struct stat sb;
        if (stat(argv[a], &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            fprintf(stderr, "attnfuzz report: %s: not a directory\n", argv[a]);
            continue;
        }
        size_t len = strlen(argv[a]);
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", argv[a]);
        while (len > 1 && dir[len - 1] == '/') dir[--len] = 0;
        af_report_scan(r, dir, 0);
        /* a campaign's stats beside its bundles (attnfuzz merge's OUT/stats.json, or
         * fuzz --stats DIR/stats.json): used unless --stats names some */
        static char auto_stats[16][4200];
        if (!explicit_stats && n_stats < 16) {
            snprintf(auto_stats[n_stats], sizeof auto_stats[0], "%s/stats.json", dir);
            if (stat(auto_stats[n_stats], &sb) == 0 && S_ISREG(sb.st_mode)) {
                stats[n_stats] = auto_stats[n_stats];
                n_stats++;
            }
        }
    }
    qsort(r->items, r->n, sizeof *r->items, af_report_cmp);
    for (int s = 0; s < n_stats; s++) af_report_stats(r, stats[s]);
    af_known *known = NULL;
    if (af_cli_known_load(&ko, "report", false, &known) != 0) {
        for (size_t i = 0; i < r->n; i++) {
            af_bundle_free(r->items[i]->b);
            af_free(r->items[i]);
        }
        af_free(items);
        af_free(r);
        return 2;
    }
    size_t n_known = 0;
    char root[AF_PROC_PATH_MAX] = "";
    af_error rerr;
    if (af_proc_root(root, sizeof root, &rerr) != AF_OK) root[0] = 0;
    for (size_t i = 0; i < r->n && known; i++) {
        long e = -1;
        af_error kerr;
        if (af_known_match_bundle(known, r->items[i]->b, &e, &kerr) != AF_OK || e < 0) continue;
        af_known_info info;
        af_known_info_of(known, (size_t)e, &info);
        af_report_item *it = r->items[i];
        snprintf(it->known, sizeof it->known, "%s (%s): %s", info.id, af_known_class_names[info.cls], info.title);
        snprintf(it->known_id, sizeof it->known_id, "%s", info.id);
        snprintf(it->known_title, sizeof it->known_title, "%s", info.title);
        snprintf(it->known_issue, sizeof it->known_issue, "%s", info.issue);
        it->known_real = info.cls == AF_KNOWN_REAL_BUG;
        if (info.repro[0]) af_report_copy_repro(it, info.repro, root, out_dir);
        n_known++;
    }
    af_known_destroy(known);

    /* the project's Python (proc.h), its PYTHONPATH in a copy of the environment */
    af_proc_python py;
    af_error perr;
    char **envp = NULL;
    char py_why[600] = "";
    bool python_missing = false, any_real = false;
    if (af_proc_python_find(&py, &perr) != AF_OK || af_proc_python_env(&py, &envp, &perr) != AF_OK) {
        python_missing = true;
        snprintf(py_why, sizeof py_why, "%s", perr.msg);
    }
    for (size_t i = 0; i < r->n; i++) {
        af_report_draw(r->items[i], out_dir);
        if (r->items[i]->real) any_real = true;
        if (!no_repro) af_report_repro(r->items[i], &py, envp, out_dir, &python_missing, py_why, sizeof py_why);
    }
    if (!no_pages && !python_missing) af_report_pages(r, &py, envp, ko.none);
    af_free(envp);
    if (python_missing && !py_why[0])
        snprintf(py_why, sizeof py_why, "%.300s%s", py.exe,
                 py.root[0] || py.installed
                     ? ""
                     : "; no python/attnfuzz/__init__.py above the executable or the current directory");
    char py_note[800] = "";
    if (any_real && !no_repro && python_missing)
        snprintf(py_note, sizeof py_note, "Python is unavailable (%.600s): no repro scripts were written; the rest of the "
                                          "report is complete.",
                 py_why);

    char html[4200], md[4200];
    snprintf(html, sizeof html, "%s/index.html", out_dir);
    snprintf(md, sizeof md, "%s/report.md", out_dir);
    int rc = 0;
    if (af_report_write_html(r, html, py_note) != 0 || af_report_write_md(r, md, py_note) != 0) {
        fprintf(stderr, "attnfuzz report: cannot write %s: %s\n", out_dir, strerror(errno));
        rc = 2;
    }
    size_t pics = 0, repros = 0;
    for (size_t i = 0; i < r->n; i++) {
        pics += r->items[i]->png[0] != 0;
        repros += r->items[i]->repro[0] != 0;
        af_bundle_free(r->items[i]->b);
        af_free(r->items[i]);
    }
    if (rc == 0)
        printf("attnfuzz report: %zu findings (%zu of them known bugs), %zu pictures, %zu repro scripts, %zu unreadable "
               "-> %s (and report.md)\n",
               r->n, n_known, pics, repros, r->n_bad, html);
    if (py_note[0]) fprintf(stderr, "attnfuzz report: %s\n", py_note);
    cJSON_Delete(r->campaign);
    af_free(items);
    af_free(r);
    return rc;
}
