/* stop.h - the request to stop a campaign (a SIGINT, SIGTERM, or --max-findings reached in a
 * --jobs parent), seen by the campaign loop, the store's end pass and `attnfuzz minimize`. */
#ifndef ATTNFUZZ_STOP_H
#define ATTNFUZZ_STOP_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Asks a running campaign (and its job processes) to stop after the current execution.
 * Async-signal-safe: call it from a SIGINT handler. */
void af_campaign_interrupt(void);
bool af_campaign_interrupted(void);

#ifdef __cplusplus
}
#endif
#endif
