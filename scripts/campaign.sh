#!/usr/bin/env bash
# The main job: set up (apt packages, build) and run a fuzz campaign on the built-in
# backends - the pair explicit,fused and every relation on both - on all cores.
#   scripts/campaign.sh                     10 minutes, findings in crashes/
#   scripts/campaign.sh --time 28800        overnight
# Any `attnfuzz fuzz` option may be added; later ones override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mkdir -p crashes
exec build/attnfuzz fuzz --jobs "$(nproc 2>/dev/null || echo 2)" --time 600 \
  --crashes crashes --stats crashes/stats.json "$@"
