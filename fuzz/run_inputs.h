/* run_inputs.h - runs inputs given on a command line through the harness, as a
 * libFuzzer binary does with file arguments: files, directories of files, and bundle
 * directories (their input.bin). Used by the replay driver and by the AFL++ driver when
 * it is started outside afl-fuzz. */
#ifndef ATTNFUZZ_FUZZ_RUN_INPUTS_H
#define ATTNFUZZ_FUZZ_RUN_INPUTS_H

/* Runs every path of argv[1..argc) (arguments starting with '-' are engine flags and
 * ignored). Prints one line per input (stderr) and, with ATTNFUZZ_PRINT_FEATURES=1, a
 * "features 0x... combo N ran 0|1 PATH: TEXT" line per input on stdout (ran 0: skipped
 * for its flops). Returns the exit status:
 * 0 nothing found, 1 some input has a finding (as libFuzzer reproducing a crash),
 * 2 a path could not be read or no path was given. */
int af_run_inputs(int argc, char **argv);

#endif
