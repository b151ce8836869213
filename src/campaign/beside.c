/* beside.c - one job at a time on a thread beside the campaign loop (see beside.h). */
#include "beside.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "attnfuzz/mem.h"

struct af_beside {
    af_beside_fn fn;
    void *ctx;
    pthread_t thread;
    pthread_mutex_t mu; /* guards todo, finished and quit */
    pthread_cond_t cv;
    void *todo;    /* the job handed, NULL when none */
    bool finished; /* the thread has run todo */
    bool quit;
};

static void *af_beside_main(void *arg) {
    af_beside *b = arg;
    cpu_set_t any;
    CPU_ZERO(&any);
    long ncpu = sysconf(_SC_NPROCESSORS_CONF);
    for (size_t c = 0; c < (size_t)(ncpu > 0 ? ncpu : 1) && c < CPU_SETSIZE; c++) CPU_SET(c, &any);
    (void)pthread_setaffinity_np(pthread_self(), sizeof any, &any); /* failing: it shares the loop's CPU */
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (!b->quit && (!b->todo || b->finished)) pthread_cond_wait(&b->cv, &b->mu);
        if (b->quit) break;
        void *job = b->todo;
        pthread_mutex_unlock(&b->mu);
        b->fn(job, b->ctx);
        pthread_mutex_lock(&b->mu);
        b->finished = true;
        pthread_cond_broadcast(&b->cv);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

af_beside *af_beside_start(af_beside_fn fn, void *ctx, af_error *err) {
    af_beside *b = af_calloc(1, sizeof *b);
    if (!b) {
        af_error_set(err, AF_ERR_NOMEM, "out of memory");
        return NULL;
    }
    b->fn = fn;
    b->ctx = ctx;
    if (pthread_mutex_init(&b->mu, NULL)) {
        af_free(b);
        af_error_set(err, AF_ERR_NOMEM, "the minimizer's lock");
        return NULL;
    }
    if (pthread_cond_init(&b->cv, NULL)) {
        pthread_mutex_destroy(&b->mu);
        af_free(b);
        af_error_set(err, AF_ERR_NOMEM, "the minimizer's lock");
        return NULL;
    }
    if (pthread_create(&b->thread, NULL, af_beside_main, b)) {
        pthread_cond_destroy(&b->cv);
        pthread_mutex_destroy(&b->mu);
        af_free(b);
        af_error_set(err, AF_ERR_NOMEM, "the minimizer's thread");
        return NULL;
    }
    return b;
}

void af_beside_hand(af_beside *b, void *job) {
    pthread_mutex_lock(&b->mu);
    AF_ASSERT(!b->todo);
    b->todo = job;
    b->finished = false;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

void *af_beside_take(af_beside *b, bool wait) {
    pthread_mutex_lock(&b->mu);
    while (wait && b->todo && !b->finished) pthread_cond_wait(&b->cv, &b->mu);
    void *done = b->todo && b->finished ? b->todo : NULL;
    if (done) {
        b->todo = NULL;
        b->finished = false;
    }
    pthread_mutex_unlock(&b->mu);
    return done;
}

void af_beside_stop(af_beside *b) {
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    b->quit = true;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->thread, NULL);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    af_free(b);
}
