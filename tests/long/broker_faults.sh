#!/usr/bin/env bash
# The long broker-fault run: the CI schedule (tests/reliability/
# test_broker_faults.c) repeated for ROUNDS rounds over a larger stream, with
# the invariant and monotonic offsets sampled every 100 ms. Not run by ctest.
#
#   tests/long/broker_faults.sh [BUILD_DIR] [ROUNDS] [SEED]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
rounds=${2:-66}
seed=${3:-4242}
cmake --build "$build" --target tally test_broker_faults >/dev/null
export TALLY_TEST_TMP=${TALLY_TEST_TMP:-$PWD/$build/testtmp-long}
start=$(date +%s)
REL_ROUNDS=$rounds REL_EVENTS=$((rounds * 400)) REL_SEED=$seed \
  "$build/test_broker_faults" 2>&1 | grep -v '^%'
echo "== $(( $(date +%s) - start )) s"
