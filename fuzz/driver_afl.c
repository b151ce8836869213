/* driver_afl.c - AFL++ persistent-mode main for the harness (built with afl-clang-fast).
 *
 * Shared-memory test cases (__AFL_FUZZ_INIT) and a persistent loop (__AFL_LOOP): afl-fuzz
 * forks the process once after the executor exists (__AFL_INIT, the deferred fork
 * server), then feeds it up to 10000 inputs per fork without exec or fork. This is
 * faster than linking libFuzzer's API through AFL++'s libAFLDriver.a (which reads each
 * input from a file descriptor) and lets the executor's setup stay out of the loop.
 * Outside afl-fuzz, with paths on the command line, it replays them like attnfuzz_replay. */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"
#include "run_inputs.h"

#ifndef __AFL_FUZZ_TESTCASE_LEN
#error "driver_afl.c is built with afl-clang-fast (AF_FUZZ_ENGINE=afl)"
#endif

#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wmissing-prototypes"
#pragma clang diagnostic ignored "-Wmissing-variable-declarations"
__AFL_FUZZ_INIT();
#pragma clang diagnostic pop

int main(int argc, char **argv) {
    LLVMFuzzerInitialize(&argc, &argv);
    if (argc > 1 && !getenv("__AFL_SHM_ID")) return af_run_inputs(argc, argv);
    __AFL_INIT();
    const uint8_t *buf = __AFL_FUZZ_TESTCASE_BUF; /* after __AFL_INIT: the shared buffer */
    while (__AFL_LOOP(10000)) {
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wconversion" /* inside AFL++'s macro: read() into an unsigned */
        unsigned len = __AFL_FUZZ_TESTCASE_LEN;
#pragma clang diagnostic pop
        LLVMFuzzerTestOneInput(buf, len);
    }
    return 0;
}
