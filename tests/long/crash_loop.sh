#!/usr/bin/env bash
# The long crash loop: >= 200 SIGKILLs of `tally meter` over a 20,000-message
# stream, in both modes (three overlapping meters in groups of their own, and
# one meter restarted in one group), with the same checks as the CI version
# (tests/reliability/test_crash_loop.c) after every kill. Not run by ctest.
#
#   tests/long/crash_loop.sh [BUILD_DIR] [KILLS] [SEED]
#
# Takes about 8 minutes (overlap) + 15 minutes (sequential) on two cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
kills=${2:-200}
seed=${3:-20260301}
cmake --build "$build" --target tally test_crash_loop >/dev/null
export TALLY_TEST_TMP=${TALLY_TEST_TMP:-$PWD/$build/testtmp-long}
for overlap in 3 1; do
  echo "== crash loop: $kills kills, overlap $overlap, seed $seed"
  start=$(date +%s)
  REL_KILLS=$kills REL_EVENTS=20000 REL_SEED=$seed REL_OVERLAP=$overlap \
    "$build/test_crash_loop" 2>&1 | grep -v '^%'
  echo "== $(( $(date +%s) - start )) s"
done
