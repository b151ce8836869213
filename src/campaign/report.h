/* report.h - the campaign's console (library-internal): the status line and the lines that
 * announce a new finding or a known bug met for the first time. */
#ifndef ATTNFUZZ_REPORT_H
#define ATTNFUZZ_REPORT_H

#include <stdbool.h>

#include "attnfuzz/campaign_opts.h"
#include "attnfuzz/store.h"

/* Progress. For logs (stderr not a terminal) one libFuzzer-like line per call:
 *   #1234  execs/s: 410  unique: 2 (diverge 2)  elapsed: 3s  last: ...
 * On a terminal one line rewritten in place (cut to the terminal's width so it never
 * wraps), a newline only with "DONE":
 *   0:42/1:00  410 execs/s  compile 0%  2 findings (diverge 2)  last: ...
 * ("DONE 1:00/1:00 ..." at the end, then a newline; "-" for the total without --time).
 * The compile share is the time targets spent compiling (compile_seconds, summed over
 * jobs) over the time the jobs ran. */
void af_report_status(const af_campaign_stats *s, const af_campaign_opts *o, const char *last, const char *tag,
                      bool tty);

/* What store event ev (of s) says, for the status line's "last:" (into last, cap bytes):
 * false when there is nothing to say (a repeat, only counted). With announce, a first
 * occurrence is also printed on its own line (NEW ..., KNOWN ...), over the updating line
 * on a terminal (tty). */
bool af_report_event(const af_campaign_stats *s, const af_store_event *ev, bool announce, bool tty, char *last,
                     size_t cap);

#endif
