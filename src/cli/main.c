/* main.c - attnfuzz: a differential fuzzer for attention implementations. Just the
 * dispatch; each subcommand lives in its cmd_*.c over the library. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnfuzz/backend.h"

#include "cli.h"

static void af_usage(FILE *f) {
    fprintf(f,
            "usage: attnfuzz COMMAND [options]\n"
            "\n"
            "commands:\n"
            "  fuzz      run a campaign: draw cases, keep every divergence as a bundle\n"
            "  replay    re-run bundles or raw inputs (exit 1 if anything still diverges)\n"
            "  show      explain a bundle, optionally draw its error heatmap\n"
            "  minimize  shrink a failing bundle or input to its essentials\n"
            "  regress   replay a corpus of bundles against their recorded verdicts (CI)\n"
            "  report    every bundle of some directories on one page (HTML, Markdown, repro scripts)\n"
            "  backends  list the backends and what they support\n"
            "  merge     join the bundles and stats of a campaign's shards (fuzz --shard)\n"
            "  known     list the known bugs, or say which one each bundle is\n"
            "  bisect    the released version of a stack that brought a bug, or fixed it\n"
            "  triage    explain bundles: which model reproduces them, who shares them, a verdict\n"
            "  export    a bundle as an ONNX model with its test data, or as Polygraphy JSON\n"
            "  capture   record a Python program's attention calls as a corpus of cases\n"
            "\n"
            "attnfuzz COMMAND --help shows the options of a command.\n"
            "exit codes: 0 clean, 1 findings, 2 usage or runtime error\n");
}

/* OpenBLAS reads OPENBLAS_CORETYPE only when it loads: start again with it set when it
 * fell back to generic kernels on a CPU it does not know (see af_blas_better_coretype). */
static void af_fix_blas_kernels(char **argv) {
    const char *core = af_blas_better_coretype();
    if (!core) return;
    setenv("OPENBLAS_CORETYPE", core, 1);
    execv("/proc/self/exe", argv); /* returns only on failure: then run as we are */
}

int main(int argc, char **argv) {
    af_fix_blas_kernels(argv);
    if (argc < 2) {
        af_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "fuzz")) return af_cmd_fuzz(argc - 1, argv + 1);
    if (!strcmp(cmd, "replay")) return af_cmd_replay(argc - 1, argv + 1);
    if (!strcmp(cmd, "show")) return af_cmd_show(argc - 1, argv + 1);
    if (!strcmp(cmd, "backends")) return af_cmd_backends(argc - 1, argv + 1);
    if (!strcmp(cmd, "minimize")) return af_cmd_minimize(argc - 1, argv + 1);
    if (!strcmp(cmd, "regress")) return af_cmd_regress(argc - 1, argv + 1);
    if (!strcmp(cmd, "report")) return af_cmd_report(argc - 1, argv + 1);
    if (!strcmp(cmd, "merge")) return af_cmd_merge(argc - 1, argv + 1);
    if (!strcmp(cmd, "known")) return af_cmd_known(argc - 1, argv + 1);
    if (!strcmp(cmd, "bisect")) return af_cmd_python("bisect", "attnfuzz.bisect", argc - 1, argv + 1);
    if (!strcmp(cmd, "triage")) return af_cmd_python("triage", "attnfuzz.triage", argc - 1, argv + 1);
    if (!strcmp(cmd, "export")) return af_cmd_python("export", "attnfuzz.export", argc - 1, argv + 1);
    if (!strcmp(cmd, "capture")) return af_cmd_python("capture", "attnfuzz.capture", argc - 1, argv + 1);
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        af_usage(stdout);
        return 0;
    }
    fprintf(stderr, "attnfuzz: unknown command \"%s\"\n", cmd);
    af_usage(stderr);
    return 2;
}
