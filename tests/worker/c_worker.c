/* c_worker.c - a worker in plain C (docs/worker-protocol.md): naive attention in float64
 * for every case attnfuzz generates (all capabilities, all eight layouts, f32/f16/bf16,
 * counter-RNG dropout), and, on request, the faults and bugs the tests need.
 *
 *   c_worker [--compile-sleep S] [--out-dtype f32|f64|case] [--masked-rows nan]
 *            [--dropout keep_mask] [--bug scale|last_column] [--fault KIND] [--fault-mod N] [--fault-run N]
 *            [--name NAME] [--affinity-file PATH] [--start-sleep S] [--batch N] [--unsupported-mod N]
 *            [--count-file PATH] [--key-log PATH] [--event-log PATH] [--eager] [--ppid-file PATH]
 *
 * --compile-sleep S   sleep S seconds on each compile key not seen before (a compiler)
 * --bug scale         ignore the case's scale (always 1/sqrt(D)): a deliberately wrong worker
 * --bug last_column   the last output column 1.25 times too large: wrong on nearly every case
 * --fault KIND        on cases with (q_len + kv_len + head_dim) % N == 0 (N = --fault-mod, 3):
 *                     crash (abort), hang (sleep forever), garbage (a frame that is not JSON),
 *                     shape (an out of the wrong shape), error (status error), exit (exit 0
 *                     without answering), device (a fault that ends the process, said: in a
 *                     batch the item is answered crash and the rest not_run, then exit 70;
 *                     alone, abort); die: exit 3 before the hello
 * --fault-run N       fault on the N-th run request only, whatever its case (a flaky target:
 *                     the same case passes when sent again)
 * --affinity-file P   append "PID CPU,CPU,..." (the CPUs this worker may run on) to P at start
 * --start-sleep S     sleep S seconds before the hello (an interpreter and a GPU context starting)
 * --run-sleep S       sleep S seconds on every case (a slow kernel)
 * --batch N           declare batch N and answer run frames holding a batch of cases
 * --eager             declare no compile key (an eager worker: it builds nothing per structure)
 * --ppid-file P       append "NAME PPID" as it starts: which process started it
 * --unsupported-mod N answer "unsupported" on cases with (q_len + kv_len + head_dim) % N == 0
 * --count-file P      append "PID RUNS" (the run requests it answered) to P when it ends
 * --key-log P         append "KEY FAULT" for each run request: its compile key (hex) and 1
 *                     when --fault applied to it, else 0 (which structures a campaign drew)
 * --event-log P       append "NAME EVENT PID SECONDS" at its start (start), as it sends its
 *                     hello (hello), on each run request (run) and when told bye or its
 *                     input ends (end); SECONDS on CLOCK_MONOTONIC,
 *                     one clock for every process, so several workers may share P and their
 *                     events be ordered (each line is one write to a file opened O_APPEND)
 *
 * Only libm and src/core/json_scan.c (a JSON reader that depends on the C library alone):
 * the frames are read and written here, not through attnfuzz. A header is read in place
 * as tokens and answers are written with snprintf: nothing is allocated per request but
 * the output, so the protocol's cost is what bench_worker.sh measures, not a JSON tree's. */
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "json_scan.h"

typedef struct cw_opts {
    double compile_sleep, start_sleep, run_sleep;
    long batch, unsupported_mod;
    const char *out_dtype; /* f32, f64, case */
    int masked_rows_nan, keep_mask, bug_scale, bug_last_column;
    const char *fault;
    long fault_mod, fault_run;
    const char *name;
    const char *affinity_file;
    const char *count_file;
    const char *key_log;
    const char *event_log;
    int eager;
    const char *ppid_file;
} cw_opts;

static cw_opts opt = {0.0, 0.0, 0.0, 0, 0, "f32", 0, 0, 0, 0, NULL, 3, 0, "c_worker", NULL, NULL, NULL, NULL, 0, NULL};
static long runs_seen; /* run requests so far */
static FILE *key_log;  /* --key-log, opened once, line-buffered */

/* Whether --fault applies to this run request. */
static int faults_here(size_t Sq, size_t Sk, size_t D) {
    if (!opt.fault) return 0;
    if (opt.fault_run > 0) return runs_seen == opt.fault_run;
    return (Sq + Sk + D) % (size_t)opt.fault_mod == 0;
}

/* --- frames ------------------------------------------------------------------------------ */

static uint8_t *rbuf;
static size_t rcap;

/* Reads one frame; returns its length or -1 at end of input. */
static long read_frame(void) {
    uint8_t len[4];
    if (fread(len, 1, 4, stdin) != 4) return -1;
    size_t n = (size_t)len[0] | (size_t)len[1] << 8 | (size_t)len[2] << 16 | (size_t)len[3] << 24;
    if (n + 1 > rcap) {
        rcap = n + 1;
        rbuf = realloc(rbuf, rcap);
        if (!rbuf) {
            fprintf(stderr, "c_worker: out of memory\n");
            exit(1);
        }
    }
    if (fread(rbuf, 1, n, stdin) != n) return -1;
    return (long)n;
}

static void write_frame(const char *header, const void *payload, size_t plen) {
    size_t hl = strlen(header), n = hl + 1 + plen;
    uint8_t len[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
    fwrite(len, 1, 4, stdout);
    fwrite(header, 1, hl, stdout);
    fputc('\n', stdout);
    if (plen) fwrite(payload, 1, plen, stdout);
    fflush(stdout);
}

/* The answers to a batch: its items' headers, then one payload (an item's tensor offsets
 * count from the start of that payload: batch_base is where the current item's start). */
static int in_batch;
static int device_faulted; /* --fault device in this batch: the rest is not run, then exit 70 */
static char *bhdr;
static size_t bhdr_len, bhdr_cap;
static uint8_t *bpay;
static size_t bpay_len, bpay_cap;

static void grow(void **p, size_t *cap, size_t need) {
    if (need <= *cap) return;
    size_t c = *cap ? *cap : 4096;
    while (c < need) c *= 2;
    *p = realloc(*p, c);
    if (!*p) {
        fprintf(stderr, "c_worker: out of memory\n");
        exit(1);
    }
    *cap = c;
}

/* One answer: a frame of its own, or an item of the batch being answered. */
static void emit(const char *header, const void *payload, size_t plen) {
    if (!in_batch) {
        write_frame(header, payload, plen);
        return;
    }
    size_t hl = strlen(header);
    grow((void **)&bhdr, &bhdr_cap, bhdr_len + hl + 2);
    if (bhdr_len) bhdr[bhdr_len++] = ',';
    memcpy(bhdr + bhdr_len, header, hl + 1);
    bhdr_len += hl;
    grow((void **)&bpay, &bpay_cap, bpay_len + plen + 1);
    if (plen) memcpy(bpay + bpay_len, payload, plen);
    bpay_len += plen;
}

/* --- numbers ------------------------------------------------------------------------------- */

static float f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31u, m = h & 1023u;
    float f;
    if (e == 0) {
        f = ldexpf((float)m, -24);
        return s ? -f : f;
    }
    uint32_t bits = e == 31 ? s | 0x7f800000u | (m << 13) : s | ((e + 112u) << 23) | (m << 13);
    memcpy(&f, &bits, 4);
    return f;
}

static float bf16_to_f32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* float -> f16 / bf16, round to nearest even */
static uint16_t f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static uint16_t f64_to_f16(double d) {
    uint16_t s = signbit(d) ? 0x8000u : 0;
    double a = fabs(d);
    if (isnan(d)) return 0x7e00u;
    if (a >= 65520.0) return s | 0x7c00u;
    if (a < ldexp(1.0, -14)) return s | (uint16_t)nearbyint(a * ldexp(1.0, 24)); /* subnormal (RNE) */
    int e;
    double m = frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
    double q = nearbyint(ldexp(m, 11));
    if (q >= 2048.0) q /= 2.0, e++;
    if (e + 14 >= 31) return s | 0x7c00u;
    return s | (uint16_t)((unsigned)(e + 14) << 10) | (uint16_t)((unsigned)q - 1024u);
}

typedef enum { DT_F32, DT_F16, DT_BF16, DT_F64, DT_BOOL, DT_BAD } cw_dtype;

static cw_dtype dtype_of(const char *s) {
    if (!s) return DT_BAD;
    if (!strcmp(s, "f32")) return DT_F32;
    if (!strcmp(s, "f16")) return DT_F16;
    if (!strcmp(s, "bf16")) return DT_BF16;
    if (!strcmp(s, "f64")) return DT_F64;
    if (!strcmp(s, "bool")) return DT_BOOL;
    return DT_BAD;
}

static double load(cw_dtype dt, const uint8_t *p) {
    switch (dt) {
    case DT_F32: {
        float f;
        memcpy(&f, p, 4);
        return (double)f;
    }
    case DT_F16: {
        uint16_t u;
        memcpy(&u, p, 2);
        return (double)f16_to_f32(u);
    }
    case DT_BF16: {
        uint16_t u;
        memcpy(&u, p, 2);
        return (double)bf16_to_f32(u);
    }
    case DT_F64: {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    case DT_BOOL: return p[0] ? 1.0 : 0.0;
    case DT_BAD: break;
    }
    return NAN;
}

/* --- dropout: Philox4x32-10, keep(b,h,i,j) = w[j % 4] 2^-32 >= p, counter {j/4, i, h, b} */

static void philox(uint32_t c[4], uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1, n3 = (uint32_t)p0;
        c[0] = n0, c[1] = n1, c[2] = n2, c[3] = n3;
        k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    }
}

static int counter_keep(uint64_t seed, double p, uint32_t b, uint32_t h, uint32_t i, uint32_t j) {
    if (p >= 1.0) return 0;
    uint32_t c[4] = {j >> 2, i, h, b};
    philox(c, (uint32_t)seed, (uint32_t)(seed >> 32));
    return ldexp((double)c[j & 3u], -32) >= p;
}

/* --- tensors -------------------------------------------------------------------------------- */

typedef struct cw_tensor {
    cw_dtype dt;
    int nd;
    size_t ne[5], nb[5];
    const uint8_t *data;
} cw_tensor;

/* --- the request header, read in place ---------------------------------------------------- */

static const char *J;   /* the header text */
static af_js_tok *T;    /* its tokens */
static size_t t_cap;

static long get(long obj, const char *key) { return af_js_get(J, T, obj, key); }

static double num(long obj, const char *key, double dflt) {
    double v;
    return af_js_number(J, T, get(obj, key), &v) ? v : dflt;
}

static double item_num(long arr, uint32_t i) {
    double v = 0.0;
    af_js_number(J, T, af_js_item(T, arr, i), &v);
    return v;
}

static int get_tensor(long tensors, const char *name, const uint8_t *payload, cw_tensor *t) {
    long e = af_js_item(T, tensors, 0);
    for (uint32_t i = 0; e >= 0 && i < T[tensors].size; i++, e = (long)T[e].next) {
        if (!af_js_is(J, T, get(e, "name"), name)) continue;
        char dt[8] = "";
        af_js_string(J, T, get(e, "dtype"), dt, sizeof dt);
        t->dt = dtype_of(dt);
        long sh = get(e, "shape"), st = get(e, "strides");
        t->nd = sh >= 0 ? (int)T[sh].size : 0;
        for (int k = 0; k < t->nd && k < 5; k++) {
            t->ne[k] = (size_t)item_num(sh, (uint32_t)k);
            t->nb[k] = (size_t)item_num(st, (uint32_t)k);
        }
        t->data = payload + (size_t)num(e, "offset", 0.0);
        return 1;
    }
    return 0;
}

/* Canonical [B, H, S, D] byte strides of one q/k/v tensor in layout lay (packed layouts
 * arrive as per-tensor views: [B, S, H, D] or [B, H*D, S]). */
static void canon(const char *lay, const cw_tensor *t, size_t D, size_t s[4]) {
    const size_t *nb = t->nb;
    if (!strcmp(lay, "bhsd")) {
        s[0] = nb[0], s[1] = nb[1], s[2] = nb[2], s[3] = nb[3];
    } else if (!strcmp(lay, "bshd") || !strcmp(lay, "qkv_bs3hd") || !strcmp(lay, "qkv_bsh3d")) {
        s[0] = nb[0], s[1] = nb[2], s[2] = nb[1], s[3] = nb[3];
    } else if (!strcmp(lay, "sbhd")) {
        s[0] = nb[1], s[1] = nb[2], s[2] = nb[0], s[3] = nb[3];
    } else if (!strcmp(lay, "bsd")) {
        s[0] = nb[0], s[1] = D * nb[2], s[2] = nb[1], s[3] = nb[2];
    } else { /* channels_first, qkv_channels_first: [B, H*D, S] */
        s[0] = nb[0], s[1] = D * nb[1], s[2] = nb[2], s[3] = nb[1];
    }
}

/* A mask element at (b, h, i, j) broadcast from its 2-D or 4-D shape (size-1 dims and
 * stride-0 dims read index 0). */
static double mask_at(const cw_tensor *m, size_t b, size_t h, size_t i, size_t j) {
    size_t idx[4] = {b, h, i, j};
    size_t off = 0;
    int first = 4 - m->nd;
    for (int d = 0; d < m->nd; d++) off += (m->ne[d] == 1 ? 0 : idx[first + d]) * m->nb[d];
    return load(m->dt, m->data + off);
}

/* --- the case -------------------------------------------------------------------------------- */

static const char *layout_of(long c, const char *t) {
    static char l[32];
    if (!af_js_string(J, T, get(get(c, t), "layout"), l, sizeof l)) return "bhsd";
    return l;
}

/* Hashes the text of member key of obj (absent: nothing). */
static unsigned long hash_member(unsigned long h, long obj, const char *key) {
    long v = get(obj, key);
    if (v < 0) return h;
    for (uint32_t p = T[v].start; p < T[v].end; p++) h = h * 33u ^ (unsigned char)J[p];
    return h;
}

/* A compile key: the structure fields (shapes, dtype, layouts, masks, causal) as text. */
static unsigned long compile_key(long c) {
    static const char *const fields[] = {"batch", "q_heads", "kv_heads", "q_len", "kv_len", "head_dim",
                                         "v_head_dim", "dtype", "allow_tf32", "causal", "diagonal", "window", NULL};
    unsigned long h = 5381;
    for (int f = 0; fields[f]; f++) h = hash_member(h, c, fields[f]);
    const char *ts[3] = {"q", "k", "v"};
    for (int t = 0; t < 3; t++) {
        const char *keys[4] = {"layout", "perm", "pad", "broadcast"};
        for (int k = 0; k < 4; k++) h = hash_member(h, get(c, ts[t]), keys[k]);
    }
    const char *ms[2] = {"additive_mask", "bool_mask"};
    for (int m = 0; m < 2; m++) {
        long o = get(c, ms[m]);
        int is_obj = o >= 0 && T[o].type == AF_JS_OBJECT;
        h = h * 33u ^ (unsigned long)is_obj;
        if (!is_obj) continue;
        const char *keys[4] = {"full_dims", "rank", "expanded", "dtype"};
        for (int k = 0; k < 4; k++) h = hash_member(h, o, keys[k]);
    }
    long kp = get(c, "key_padding");
    h = h * 33u ^ (unsigned long)(kp >= 0 && T[kp].type != AF_JS_NULL);
    return h;
}

static unsigned long seen_keys[65536];
static size_t n_seen;

static int key_is_new(unsigned long k) {
    for (size_t i = 0; i < n_seen; i++)
        if (seen_keys[i] == k) return 0;
    if (n_seen < sizeof seen_keys / sizeof seen_keys[0]) seen_keys[n_seen++] = k;
    return 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --event-log: one line, one write (O_APPEND: lines of several workers do not mix) */
static void log_event(const char *event) {
    if (!opt.event_log) return;
    int fd = open(opt.event_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;
    char line[256];
    int n = snprintf(line, sizeof line, "%s %s %ld %.6f\n", opt.name, event, (long)getpid(), now_s());
    if (n > 0 && (size_t)n < sizeof line && write(fd, line, (size_t)n) < 0) fprintf(stderr, "c_worker: event log\n");
    close(fd);
}

static uint64_t xorshift_state = 0x9e3779b97f4a7c15ull;
static uint64_t xorshift(void) {
    uint64_t x = xorshift_state;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return xorshift_state = x;
}

/* msg needs no JSON escaping (the messages here are fixed text) */
static void answer_error(double id, const char *status, const char *key, const char *msg) {
    char hdr[512];
    snprintf(hdr, sizeof hdr, "{\"type\":\"result\",\"id\":%.0f,\"status\":\"%s\",\"%s\":\"%s\"}", id, status, key,
             msg);
    emit(hdr, NULL, 0);
}

/* Runs one request; returns 0 to go on. */
static int serve_run(long req, const uint8_t *payload) {
    double id = num(req, "id", 0);
    long c = get(req, "case"), der = get(req, "derived");
    long tensors = get(req, "tensors");
    const size_t B = (size_t)num(c, "batch", 1), Hq = (size_t)num(c, "q_heads", 1);
    const size_t Hkv = (size_t)num(c, "kv_heads", (double)Hq), Sq = (size_t)num(c, "q_len", 1);
    const size_t Sk = (size_t)num(c, "kv_len", (double)Sq), D = (size_t)num(c, "head_dim", 1);
    const size_t Dv = (size_t)num(c, "v_head_dim", (double)D);
    char dtype[8] = "";
    af_js_string(J, T, get(c, "dtype"), dtype, sizeof dtype);

    if (device_faulted) { /* the batch's rest after a device fault: not run */
        char h[96];
        snprintf(h, sizeof h, "{\"id\":%.0f,\"status\":\"not_run\"}", id);
        emit(h, NULL, 0);
        return 0;
    }
    runs_seen++;
    log_event("run");
    int fault = faults_here(Sq, Sk, D);
    if (key_log) fprintf(key_log, "%lx %d\n", compile_key(c), fault);
    if (fault) {
        fprintf(stderr, "c_worker: fault %s on purpose (q_len %zu, kv_len %zu, head_dim %zu)\n", opt.fault, Sq, Sk, D);
        fflush(stderr);
        if (!strcmp(opt.fault, "crash") || (!strcmp(opt.fault, "device") && !in_batch)) abort();
        if (!strcmp(opt.fault, "device")) {
            answer_error(id, "crash", "message", "DeviceError: a device fault on purpose");
            device_faulted = 1;
            return 0;
        }
        if (!strcmp(opt.fault, "exit")) exit(0);
        if (!strcmp(opt.fault, "hang"))
            for (;;) pause();
        if (!strcmp(opt.fault, "garbage")) {
            write_frame("this is not JSON {", NULL, 0);
            return 0;
        }
        if (!strcmp(opt.fault, "error")) {
            /* the case's shape in the text, as a stack's own errors have: one message class */
            char msg[160];
            snprintf(msg, sizeof msg, "RuntimeError: failing on purpose (q_len %zu, kv_len %zu, head_dim %zu)", Sq, Sk,
                     D);
            answer_error(id, "error", "message", msg);
            return 0;
        }
    }

    if (opt.unsupported_mod > 0 && (Sq + Sk + D) % (size_t)opt.unsupported_mod == 0) {
        answer_error(id, "unsupported", "reason", "c_worker: declining on purpose");
        return 0;
    }

    double t0 = now_s(), compile_s = 0.0;
    if (opt.run_sleep > 0) {
        struct timespec ts = {(time_t)opt.run_sleep, (long)((opt.run_sleep - floor(opt.run_sleep)) * 1e9)};
        nanosleep(&ts, NULL);
    }
    if (opt.compile_sleep > 0 && key_is_new(compile_key(c))) {
        struct timespec ts = {(time_t)opt.compile_sleep, (long)((opt.compile_sleep - floor(opt.compile_sleep)) * 1e9)};
        nanosleep(&ts, NULL);
        compile_s = now_s() - t0;
    }

    cw_tensor q, k, v, am, bm;
    if (!get_tensor(tensors, "q", payload, &q) || !get_tensor(tensors, "k", payload, &k) ||
        !get_tensor(tensors, "v", payload, &v)) {
        answer_error(id, "error", "message", "c_worker: q, k or v missing");
        return 0;
    }
    int has_am = get_tensor(tensors, "mask", payload, &am), has_bm = get_tensor(tensors, "bool_mask", payload, &bm);
    size_t qs[4], ks[4], vs[4];
    canon(layout_of(c, "q"), &q, D, qs);
    canon(layout_of(c, "k"), &k, D, ks);
    canon(layout_of(c, "v"), &v, Dv, vs);

    double scale = num(der, "scale", 1.0 / sqrt((double)D));
    if (opt.bug_scale) scale = 1.0 / sqrt((double)D);
    double softcap = num(c, "softcap", 0.0);
    long causal_t = get(c, "causal");
    int causal = causal_t >= 0 && T[causal_t].type == AF_JS_TRUE;
    long win = get(c, "window");
    int has_win = win >= 0 && T[win].type == AF_JS_ARRAY;
    long wl = has_win ? (long)item_num(win, 0) : -1;
    long wr = has_win ? (long)item_num(win, 1) : -1;
    long diag = get(der, "diag_offset"), valid = get(der, "valid_keys");
    double p = num(c, "dropout_p", 0.0);
    char seed_s[32];
    uint64_t seed = af_js_string(J, T, get(c, "dropout_seed"), seed_s, sizeof seed_s) ? strtoull(seed_s, NULL, 0)
                                                                                     : (uint64_t)num(c, "dropout_seed", 0);

    cw_dtype odt = !strcmp(opt.out_dtype, "f64") ? DT_F64 : DT_F32;
    if (!strcmp(opt.out_dtype, "case")) odt = dtype_of(dtype);
    size_t es = odt == DT_F64 ? 8 : odt == DT_F32 ? 4 : 2;
    size_t on = B * Hq * Sq * Dv;
    int wrong_shape = fault && !strcmp(opt.fault, "shape");
    size_t osq = wrong_shape ? Sq + 1 : Sq;
    size_t keep_n = opt.keep_mask && p > 0.0 ? B * Hq * Sq * Sk : 0;
    uint8_t *outb = calloc(B * Hq * osq * Dv * es + keep_n + 1, 1);
    double *s = malloc((Sk + 1) * sizeof *s), *acc = malloc((Dv + 1) * sizeof *acc);
    uint8_t *live = malloc(Sk + 1), *kp = malloc(Sk + 1), *slive = malloc(Sk + 1);
    uint8_t *keepout = outb + B * Hq * osq * Dv * es;
    if (!outb || !s || !acc || !live || !kp || !slive) {
        fprintf(stderr, "c_worker: out of memory\n");
        exit(1);
    }
    size_t group = Hq / (Hkv ? Hkv : 1);
    for (size_t b = 0; b < B; b++) {
        long off = (long)item_num(diag, (uint32_t)b);
        long nvalid = (long)item_num(valid, (uint32_t)b);
        for (size_t h = 0; h < Hq; h++) {
            size_t g = h / group;
            for (size_t i = 0; i < Sq; i++) {
                long d = (long)i + off;
                double m = -INFINITY;
                int nan_row = 0;
                for (size_t j = 0; j < Sk; j++) {
                    int ok = (long)j < nvalid;
                    if (causal && (long)j > d) ok = 0;
                    if (wl >= 0 && (long)j < d - wl) ok = 0;
                    if (wr >= 0 && (long)j > d + wr) ok = 0;
                    if (has_bm && mask_at(&bm, b, h, i, j) == 0.0) ok = 0;
                    slive[j] = (uint8_t)ok; /* live by the structural and boolean masks */
                    double x = 0.0;
                    if (ok) {
                        for (size_t e = 0; e < D; e++)
                            x += load(q.dt, q.data + b * qs[0] + h * qs[1] + i * qs[2] + e * qs[3]) *
                                 load(k.dt, k.data + b * ks[0] + g * ks[1] + j * ks[2] + e * ks[3]);
                        x *= scale;
                        if (softcap > 0.0) x = softcap * tanh(x / softcap);
                        if (has_am) x += mask_at(&am, b, h, i, j);
                        if (x == -INFINITY) ok = 0;
                    }
                    live[j] = (uint8_t)ok;
                    s[j] = x;
                    if (ok && isnan(x)) nan_row = 1;
                    if (ok && x > m) m = x;
                }
                for (size_t j = 0; j < Sk; j++) {
                    if (p <= 0.0) {
                        kp[j] = 1;
                    } else if (opt.keep_mask) {
                        kp[j] = (double)(xorshift() >> 11) * 0x1p-53 >= p;
                    } else {
                        kp[j] = (uint8_t)counter_keep(seed, p, (uint32_t)b, (uint32_t)h, (uint32_t)i, (uint32_t)j);
                    }
                    if (keep_n) keepout[((b * Hq + h) * Sq + i) * Sk + j] = kp[j];
                }
                for (size_t e = 0; e < Dv; e++) acc[e] = 0.0;
                /* a NaN row has NaN weights on every key the structural and boolean masks
                 * leave live, an additive -inf or a -inf score included (as the reference):
                 * the row is NaN unless dropout drops all of those */
                int any_kept_live = 0;
                for (size_t j = 0; j < Sk; j++) any_kept_live |= slive[j] && kp[j];
                if (nan_row) {
                    double fill = p > 0.0 && !any_kept_live ? 0.0 : NAN;
                    for (size_t e = 0; e < Dv; e++) acc[e] = fill;
                } else if (m == -INFINITY) {
                    for (size_t e = 0; e < Dv; e++) acc[e] = opt.masked_rows_nan ? NAN : 0.0;
                } else {
                    double sum = 0.0;
                    for (size_t j = 0; j < Sk; j++) {
                        /* an infinite score gives Inf - Inf = NaN weights, as the reference */
                        s[j] = live[j] ? exp(s[j] - m) : 0.0;
                        sum += s[j];
                    }
                    for (size_t j = 0; j < Sk; j++) {
                        double wgt = live[j] ? s[j] / sum : 0.0; /* masked keys stay 0 */
                        /* an infinite score makes the sum NaN: NaN weights on every key the
                         * masks leave live, a -inf score or additive -inf included (as the
                         * reference), so a kept one makes the row NaN */
                        if (isnan(sum) && slive[j]) wgt = NAN;
                        if (p > 0.0) wgt = kp[j] ? wgt / (1.0 - p) : 0.0;
                        if (wgt == 0.0) continue; /* a zero-weight key contributes nothing */
                        for (size_t e = 0; e < Dv; e++)
                            acc[e] += wgt * load(v.dt, v.data + b * vs[0] + g * vs[1] + j * vs[2] + e * vs[3]);
                    }
                }
                if (i >= osq) continue;
                if (opt.bug_last_column) acc[Dv - 1] *= 1.25; /* a deviation no known bug covers */
                uint8_t *o = outb + (((b * Hq + h) * osq + i) * Dv) * es;
                for (size_t e = 0; e < Dv; e++) {
                    if (odt == DT_F64) {
                        memcpy(o + e * 8, &acc[e], 8);
                    } else if (odt == DT_F32) {
                        float f = (float)acc[e];
                        memcpy(o + e * 4, &f, 4);
                    } else {
                        uint16_t u = odt == DT_F16 ? f64_to_f16(acc[e]) : f32_to_bf16((float)acc[e]);
                        memcpy(o + e * 2, &u, 2);
                    }
                }
            }
        }
    }
    double run_s = now_s() - t0 - compile_s;
    static const char *const dn[] = {"f32", "f16", "bf16", "f64"};
    char hdr[1024];
    size_t base = in_batch ? bpay_len : 0;
    int n = snprintf(hdr, sizeof hdr,
                     "{\"type\":\"result\",\"id\":%.0f,\"status\":\"ok\",\"layout\":\"bhsd\",\"tensors\":["
                     "{\"name\":\"out\",\"dtype\":\"%s\",\"shape\":[%zu,%zu,%zu,%zu],\"strides\":[%zu,%zu,%zu,%zu],"
                     "\"offset\":%zu}",
                     id, dn[odt], B, Hq, osq, Dv, Hq * osq * Dv * es, osq * Dv * es, Dv * es, es, base);
    if (keep_n)
        n += snprintf(hdr + n, sizeof hdr - (size_t)n,
                      ",{\"name\":\"dropout_keep\",\"dtype\":\"bool\",\"shape\":[%zu,%zu,%zu,%zu],"
                      "\"strides\":[%zu,%zu,%zu,1],\"offset\":%zu}",
                      B, Hq, Sq, Sk, Hq * Sq * Sk, Sq * Sk, Sk, base + B * Hq * osq * Dv * es);
    snprintf(hdr + n, sizeof hdr - (size_t)n, "],\"timings\":{\"compile_s\":%.6f,\"run_s\":%.6f}}", compile_s, run_s);
    emit(hdr, outb, B * Hq * osq * Dv * es + keep_n);
    (void)on;
    free(outb), free(s), free(acc), free(live), free(kp), free(slive);
    return 0;
}

static void write_count(void) {
    FILE *f = fopen(opt.count_file, "a");
    if (!f) return;
    fprintf(f, "%ld %ld\n", (long)getpid(), runs_seen);
    fclose(f);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--compile-sleep") && v) opt.compile_sleep = atof(v), i++;
        else if (!strcmp(a, "--start-sleep") && v) opt.start_sleep = atof(v), i++;
        else if (!strcmp(a, "--run-sleep") && v) opt.run_sleep = atof(v), i++;
        else if (!strcmp(a, "--batch") && v) opt.batch = atol(v), i++;
        else if (!strcmp(a, "--eager")) opt.eager = 1;
        else if (!strcmp(a, "--ppid-file") && v) opt.ppid_file = v, i++;
        else if (!strcmp(a, "--unsupported-mod") && v) opt.unsupported_mod = atol(v), i++;
        else if (!strcmp(a, "--out-dtype") && v) opt.out_dtype = v, i++;
        else if (!strcmp(a, "--masked-rows") && v) opt.masked_rows_nan = !strcmp(v, "nan"), i++;
        else if (!strcmp(a, "--dropout") && v) opt.keep_mask = !strcmp(v, "keep_mask"), i++;
        else if (!strcmp(a, "--bug") && v) opt.bug_scale = !strcmp(v, "scale"), opt.bug_last_column = !strcmp(v, "last_column"), i++;
        else if (!strcmp(a, "--fault") && v) opt.fault = v, i++;
        else if (!strcmp(a, "--fault-mod") && v) opt.fault_mod = atol(v) > 0 ? atol(v) : 3, i++;
        else if (!strcmp(a, "--fault-run") && v) opt.fault_run = atol(v), i++;
        else if (!strcmp(a, "--name") && v) opt.name = v, i++;
        else if (!strcmp(a, "--affinity-file") && v) opt.affinity_file = v, i++;
        else if (!strcmp(a, "--count-file") && v) opt.count_file = v, i++;
        else if (!strcmp(a, "--key-log") && v) opt.key_log = v, i++;
        else if (!strcmp(a, "--event-log") && v) opt.event_log = v, i++;
        else {
            fprintf(stderr, "c_worker: unknown option %s\n", a);
            return 2;
        }
    }
    log_event("start");
    if (opt.fault && !strcmp(opt.fault, "die")) {
        fprintf(stderr, "c_worker: cannot start: the device is not there (on purpose)\n");
        return 3;
    }
    if (opt.ppid_file) {
        FILE *f = fopen(opt.ppid_file, "a");
        if (!f) {
            fprintf(stderr, "c_worker: %s: cannot record the parent\n", opt.ppid_file);
            return 3;
        }
        fprintf(f, "%s %ld\n", opt.name, (long)getppid());
        fclose(f);
    }
    if (opt.affinity_file) {
        cpu_set_t set;
        FILE *f = fopen(opt.affinity_file, "a");
        if (!f || sched_getaffinity(0, sizeof set, &set) != 0) {
            fprintf(stderr, "c_worker: %s: cannot record the affinity\n", opt.affinity_file);
            return 3;
        }
        fprintf(f, "%ld ", (long)getpid());
        for (size_t c = 0, first = 1; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set)) fprintf(f, "%s%zu", first ? "" : ",", c), first = 0;
        fprintf(f, "\n");
        fclose(f);
    }
    if (opt.start_sleep > 0) {
        struct timespec ts = {(time_t)opt.start_sleep, (long)((opt.start_sleep - floor(opt.start_sleep)) * 1e9)};
        nanosleep(&ts, NULL);
    }
    if (opt.count_file) atexit(write_count);
    if (opt.key_log) {
        key_log = fopen(opt.key_log, "a");
        if (!key_log) {
            fprintf(stderr, "c_worker: %s: cannot open the key log\n", opt.key_log);
            return 2;
        }
        setvbuf(key_log, NULL, _IOLBF, 0); /* whole lines, as they come: a worker may be killed */
    }
    char hello[2048], batch[64] = "";
    if (opt.batch > 1) snprintf(batch, sizeof batch, ",\"batch\":%ld", opt.batch);
    snprintf(hello, sizeof hello,
             "{\"type\":\"hello\",\"protocol\":1,\"name\":\"%s\",\"version\":\"1.0\",\"variant\":\"%s\","
             "\"caps\":[\"f32\",\"f16\",\"bf16\",\"tf32\",\"gqa\",\"cross\",\"dv\",\"scale\",\"softcap\",\"amask\","
             "\"bmask\",\"causal\",\"padding\",\"window\",\"dropout\",\"strided\",\"mask_dtype\"],"
             "\"layouts\":[\"bhsd\",\"bshd\",\"sbhd\",\"bsd\",\"channels_first\",\"qkv_bs3hd\",\"qkv_bsh3d\","
             "\"qkv_channels_first\"],\"dtypes\":[\"f32\",\"f16\",\"bf16\"],"
             "\"conventions\":{\"masked_rows\":\"%s\",\"dropout\":\"%s\"},"
             "\"compile_key\":[%s]%s}",
             opt.name, opt.bug_scale ? "bug_scale" : opt.bug_last_column ? "bug_last_column" : "naive", opt.masked_rows_nan ? "nan" : "zero",
             opt.keep_mask ? "keep_mask" : "counter",
             opt.eager ? "" : "\"shapes\",\"dtype\",\"layouts\",\"masks\",\"causal\"", batch);
    log_event("hello");
    write_frame(hello, NULL, 0);
    for (;;) {
        long n = read_frame();
        if (n < 0) {
            log_event("end");
            return 0;
        }
        size_t used = 0;
        long nt = af_js_parse((const char *)rbuf, (size_t)n, T, t_cap, &used);
        if (nt > (long)t_cap) {
            t_cap = (size_t)nt;
            T = realloc(T, t_cap * sizeof *T);
            if (!T) {
                fprintf(stderr, "c_worker: out of memory\n");
                return 1;
            }
            nt = af_js_parse((const char *)rbuf, (size_t)n, T, t_cap, &used);
        }
        if (nt < 0 || T[0].type != AF_JS_OBJECT || used >= (size_t)n || rbuf[used] != '\n') {
            fprintf(stderr, "c_worker: a frame without a JSON header\n");
            return 1;
        }
        J = (const char *)rbuf;
        if (af_js_is(J, T, get(0, "type"), "bye")) {
            log_event("end");
            return 0;
        }
        if (!af_js_is(J, T, get(0, "type"), "run")) continue;
        long items = get(0, "batch");
        if (items < 0) {
            serve_run(0, rbuf + used + 1);
            continue;
        }
        /* a batch: every item answered, gathered into one frame */
        in_batch = 1;
        bhdr_len = bpay_len = 0;
        long it = af_js_item(T, items, 0);
        for (uint32_t k = 0; k < T[items].size; k++, it = T[it].next) serve_run(it, rbuf + used + 1);
        in_batch = 0;
        grow((void **)&bhdr, &bhdr_cap, bhdr_len + 64);
        char *frame = malloc(bhdr_len + 64);
        if (!frame) return 1;
        snprintf(frame, bhdr_len + 64, "{\"type\":\"result\",\"batch\":[%s]}", bhdr_len ? bhdr : "");
        write_frame(frame, bpay, bpay_len);
        free(frame);
        if (device_faulted) exit(70);
    }
}
