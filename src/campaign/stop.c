/* stop.c - the stop request (see stop.h). */
#include "attnfuzz/stop.h"

#include <signal.h>

static volatile sig_atomic_t af_campaign_stop;

void af_campaign_interrupt(void) { af_campaign_stop = 1; }
bool af_campaign_interrupted(void) { return af_campaign_stop != 0; }
