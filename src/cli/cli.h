/* cli.h - the subcommands of the attnfuzz command line (main.c dispatches). Each returns
 * the process exit code: 0 clean, 1 findings, 2 usage or runtime error. */
#ifndef ATTNFUZZ_CLI_H
#define ATTNFUZZ_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "attnfuzz/exec.h"

int af_cmd_fuzz(int argc, char **argv);
int af_cmd_replay(int argc, char **argv);
int af_cmd_show(int argc, char **argv);
int af_cmd_backends(int argc, char **argv);
int af_cmd_minimize(int argc, char **argv);
int af_cmd_regress(int argc, char **argv);
int af_cmd_report(int argc, char **argv);
int af_cmd_merge(int argc, char **argv);
int af_cmd_known(int argc, char **argv);
int af_cmd_triage(int argc, char **argv);

/* The checks a bundle recorded: its backends (without ref, relation outputs and expected
 * comparisons) and its relation; the default pair for a bundle of another tool. names
 * holds the backend names (AF_EXEC_MAX_BACKENDS x AF_BACKEND_NAME_MAX). */
struct af_bundle;
void af_cli_config_from_bundle(const struct af_bundle *b, af_exec_config *cfg, char names[][AF_BACKEND_NAME_MAX]);

/* Shared option parsing: --backend, --pair, --relation, --budget, --waive, --timeout,
 * --compile-timeout (worker backends). Returns 1 if
 * the option was consumed, 0 if not one of these, -1 on a bad value (message printed). */
int af_cli_exec_option(af_exec_config *cfg, int opt, const char *arg, int *selected);
/* With no --backend/--pair (selected bit 1): the pair explicit,fused, and every relation
 * unless --relation chose some (bit 2). */
void af_cli_default_checks(af_exec_config *cfg, int selected);
/* Reads a raw input file into buf (its first cap bytes: the decoder reads fewer). A file
 * over AF_CASE_INPUT_MAX bytes, or not a regular file, is refused unread: -1 with err naming
 * the file and the problem, as when it cannot be opened. */
int af_cli_read_input(const char *path, uint8_t *buf, size_t cap, size_t *n, af_error *err);

/* Fills the relation set for "all" or a name; prints an error and returns -1 if unknown. */
int af_cli_relation(af_exec_config *cfg, const char *name);

enum { AF_OPT_BACKEND = 1000, AF_OPT_PAIR, AF_OPT_RELATION, AF_OPT_BUDGET, AF_OPT_WAIVE, AF_OPT_TIMEOUT,
       AF_OPT_COMPILE_TIMEOUT, AF_OPT_KNOWN, AF_OPT_NO_KNOWN };

/* Known bugs (known.h) for fuzz, replay, regress and report: by default every
 * corpus/findings/<stack>/known.json of the repository (found from the project root, as
 * the targets are), plus each --known FILE; none with --no-known. */
#define AF_CLI_KNOWN_MAX 16
typedef struct af_cli_known {
    const char *files[AF_CLI_KNOWN_MAX];
    size_t n;
    bool none;
} af_cli_known;
#define AF_CLI_KNOWN_OPTIONS                                                                       \
    {"known", required_argument, 0, AF_OPT_KNOWN}, {"no-known", no_argument, 0, AF_OPT_NO_KNOWN}
/* 1 if opt was --known or --no-known (consumed), 0 if not, -1 on a bad value (printed). */
int af_cli_known_option(af_cli_known *ko, int opt, const char *arg);
/* Loads what ko asks for into *out (NULL with --no-known): the repository's (where
 * af_known_locate finds them) and each --known file. On an error prints "attnfuzz CMD:
 * <the file and the problem>" and returns -1. Finding none is no error, but always says so
 * in one line on stderr ("attnfuzz CMD: no known bugs loaded (... where it looked ...;
 * --known FILE)"); when verbose, one line says how many entries it loaded and from where. */
struct af_known;
int af_cli_known_load(const af_cli_known *ko, const char *cmd, bool verbose, struct af_known **out);
/* "  [known bug ID (CLASS): TITLE]" for entry (or "" for -1), for verdict lines. */
void af_cli_known_text(const struct af_known *k, long entry, char *buf, size_t len);
#define AF_CLI_EXEC_OPTIONS                                                                        \
    {"backend", required_argument, 0, AF_OPT_BACKEND}, {"pair", required_argument, 0, AF_OPT_PAIR}, \
        {"relation", required_argument, 0, AF_OPT_RELATION},                                       \
        {"budget", required_argument, 0, AF_OPT_BUDGET}, {"waive", required_argument, 0, AF_OPT_WAIVE},           \
        {"timeout", required_argument, 0, AF_OPT_TIMEOUT},                                                         \
        {"compile-timeout", required_argument, 0, AF_OPT_COMPILE_TIMEOUT}

#endif
