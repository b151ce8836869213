/* driver_replay.c - the plain main of the harness: no engine, any compiler. Runs the
 * files, directories and bundle directories on its command line through the same
 * LLVMFuzzerTestOneInput that libFuzzer and AFL++ call (cJSON's fuzz_main.c, zstd's
 * regression_driver.c): the seed corpus as a ctest regression, a crash input from any
 * engine, or a corpus with ATTNFUZZ_PRINT_FEATURES=1 to count what it covers.
 * Exit status: 0 nothing found, 1 a finding (as libFuzzer reproducing a crash), 2 an
 * unreadable input or a bad configuration. */
#include "harness.h"
#include "run_inputs.h"

int main(int argc, char **argv) {
    LLVMFuzzerInitialize(&argc, &argv);
    return af_run_inputs(argc, argv);
}
