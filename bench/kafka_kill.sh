#!/usr/bin/env bash
# The long exactly-once crash test: 200,000 events (with repeats, conflicts
# and poison), `tally meter` SIGKILLed at 20 seeded random moments and
# restarted each time; then the ledger must equal a clean `tally ingest`
# (usage to the card-second, dedupe keys, quarantine, invoice files) and
# every poison message must be quarantined exactly once. It is the CI test
# tests/e2e/test_meter_kill.c scaled up.
#
#   bench/kafka_kill.sh [BUILD_DIR] [SEED]      (default: build, 20260301)
#
# Environment: EVENTS (200000), KILLS (20).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
[ -x "$B/test_meter_kill" ] || { echo "kafka_kill.sh: build $B first" >&2; exit 1; }
mkdir -p "$B/testtmp"
TALLY_TEST_TMP="$B/testtmp" TALLY_KILL_EVENTS="${EVENTS:-200000}" \
  TALLY_KILL_KILLS="${KILLS:-20}" TALLY_KILL_PARTITIONS=32 TALLY_KILL_SEED="${2:-20260301}" "$B/test_meter_kill"
