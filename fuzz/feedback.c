/* feedback.c - semantic feedback as coverage (see feedback.h). Cheap by design: one
 * pass over the checks of an execution, a few stores or calls, no allocation. */
#include "feedback.h"

#include <math.h>

uint32_t af_feedback_combo(const af_case *c) {
    uint32_t precision = c->dtype == AF_F32 && c->allow_tf32 ? 3u : (uint32_t)c->dtype;
    bool window = af_case_has_window(c);
    uint32_t masks = (uint32_t)c->amask.present | (uint32_t)c->bmask.present << 1 | (uint32_t)c->causal << 2 |
                     (uint32_t)c->key_padding << 3 | (uint32_t)window << 4;
    uint32_t diag = c->causal || window ? (uint32_t)c->diag : 0u;
    uint32_t id = (uint32_t)c->t[AF_Q].layout;                   /* 3 bits */
    id = id << 2 | precision;                                     /* 2 bits */
    id = id << 5 | masks;                                         /* 5 bits */
    id = id << 2 | diag;                                          /* 2 bits */
    id = id << 1 | (uint32_t)(c->q_heads != c->kv_heads);         /* GQA */
    id = id << 1 | (uint32_t)(c->q_len != c->kv_len);             /* Sq != Sk */
    id = id << 1 | (uint32_t)(c->dropout_p > 0.0);                /* dropout */
    return id & (AF_FEEDBACK_COMBOS - 1);
}

unsigned af_feedback_bucket(const af_result *r) {
    switch (r->kind) {
    case AF_KIND_NAN_MISMATCH:
    case AF_KIND_INF_MISMATCH:
    case AF_KIND_MASKED_ROW_NAN:
    case AF_KIND_MASKED_VALUE_LEAK:
    case AF_KIND_NONDETERMINISTIC:
    case AF_KIND_BATCH_VARIANT:
    case AF_KIND_GUARD_WRITE: return 31;
    case AF_KIND_ERROR:
    case AF_KIND_CRASH:
    case AF_KIND_TIMEOUT: return 30;
    case AF_KIND_OK:
    case AF_KIND_DIVERGE:
    case AF_KIND_LSE_DIVERGE: /* its worst ratio buckets as a divergence does */
    case AF_KIND_COUNT: break;
    }
    double q = r->m.worst_ratio;
    if (!isfinite(q)) return 31;
    if (!(q > 0.0)) return 0;
    int e;
    frexp(q, &e); /* q = m * 2^e with m in [0.5, 1): floor(log2 q) = e - 1 */
    int b = e - 1 + 23;
    return b < 1 ? 1u : b > 29 ? 29u : (unsigned)b;
}

#if defined(AF_FEEDBACK_COUNTERS)

/* libFuzzer reads this section as extra coverage: counter i nonzero = feature i. */
__attribute__((used, section("__libfuzzer_extra_counters"))) static uint8_t
    af_feedback_counters[AF_FEEDBACK_COMBOS + AF_FEEDBACK_CLOSENESS];

static void af_feedback_hit(uint32_t id) { af_feedback_counters[id] = 1; }
const char *af_feedback_mode(void) { return "counters"; }

#elif defined(AF_FEEDBACK_EDGES)

/* AFL++ assigns each instrumented basic block its own slot in the coverage map and sizes
 * the map from the blocks it saw at link time, so extra slots must be real blocks: one
 * tiny noinline function per id. The empty asm keeps every body distinct and alive. */
#define AF_FEEDBACK_EDGE_COUNT 8192u
#define AF_FEEDBACK_EDGE_COMBOS (AF_FEEDBACK_EDGE_COUNT - AF_FEEDBACK_CLOSENESS)

#define AF_EDGE_FN(n)                                                                              \
    static __attribute__((noinline)) void af_feedback_edge_##n(void) { __asm__ volatile("" ::: "memory"); }
#define AF_EDGE_PTR(n) af_feedback_edge_##n,
#define AF_EDGE_16(X, p)                                                                           \
    X(p##0) X(p##1) X(p##2) X(p##3) X(p##4) X(p##5) X(p##6) X(p##7) X(p##8) X(p##9) X(p##a) X(p##b) \
        X(p##c) X(p##d) X(p##e) X(p##f)
#define AF_EDGE_256(X, p)                                                                          \
    AF_EDGE_16(X, p##0) AF_EDGE_16(X, p##1) AF_EDGE_16(X, p##2) AF_EDGE_16(X, p##3) AF_EDGE_16(X, p##4) \
        AF_EDGE_16(X, p##5) AF_EDGE_16(X, p##6) AF_EDGE_16(X, p##7) AF_EDGE_16(X, p##8)             \
            AF_EDGE_16(X, p##9) AF_EDGE_16(X, p##a) AF_EDGE_16(X, p##b) AF_EDGE_16(X, p##c)         \
                AF_EDGE_16(X, p##d) AF_EDGE_16(X, p##e) AF_EDGE_16(X, p##f)
#define AF_EDGE_4096(X, p)                                                                         \
    AF_EDGE_256(X, p##0) AF_EDGE_256(X, p##1) AF_EDGE_256(X, p##2) AF_EDGE_256(X, p##3)             \
        AF_EDGE_256(X, p##4) AF_EDGE_256(X, p##5) AF_EDGE_256(X, p##6) AF_EDGE_256(X, p##7)         \
            AF_EDGE_256(X, p##8) AF_EDGE_256(X, p##9) AF_EDGE_256(X, p##a) AF_EDGE_256(X, p##b)     \
                AF_EDGE_256(X, p##c) AF_EDGE_256(X, p##d) AF_EDGE_256(X, p##e) AF_EDGE_256(X, p##f)

AF_EDGE_4096(AF_EDGE_FN, 0)
AF_EDGE_4096(AF_EDGE_FN, 1)

static void (*const af_feedback_edges[AF_FEEDBACK_EDGE_COUNT])(void) = {
    AF_EDGE_4096(AF_EDGE_PTR, 0) AF_EDGE_4096(AF_EDGE_PTR, 1)};

/* Ids below AF_FEEDBACK_COMBOS are combinations, folded onto 6144 slots by a
 * multiplicative hash (neighbouring ids land apart); closeness ids keep their own
 * 2048 slots. */
static void af_feedback_hit(uint32_t id) {
    uint32_t slot;
    if (id < AF_FEEDBACK_COMBOS) {
        slot = (uint32_t)(((uint64_t)(id * 2654435761u) * AF_FEEDBACK_EDGE_COMBOS) >> 32);
    } else {
        slot = AF_FEEDBACK_EDGE_COMBOS + (id - AF_FEEDBACK_COMBOS);
    }
    af_feedback_edges[slot]();
}
const char *af_feedback_mode(void) { return "edges"; }

#else

static void af_feedback_hit(uint32_t id) { (void)id; }
const char *af_feedback_mode(void) { return "off"; }

#endif

void af_feedback_record(const af_exec *x) {
    af_feedback_hit(af_feedback_combo(af_exec_case(x)));
    size_t n = af_exec_check_count(x);
    for (size_t i = 0; i < n && i < AF_EXEC_MAX_CHECKS; i++) {
        if (!af_exec_check_ran(x, i)) continue;
        unsigned b = af_feedback_bucket(af_exec_check_result(x, i));
        af_feedback_hit(AF_FEEDBACK_COMBOS + (uint32_t)i * AF_FEEDBACK_BUCKETS + b);
    }
}
