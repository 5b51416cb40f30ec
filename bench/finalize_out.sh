#!/usr/bin/env bash
# The cost of `invoice run --out` (issue 15, item 2: at most 1.3x the run
# without it): finalize runs with and without --out over copies of one
# prepared ledger, alternating, and the ratio of each pair's wall times.
#
#   bench/finalize_out.sh BUILD SETUP WORK [PAIRS]
#
# SETUP holds bench.db and bench.key from
#   BENCH_SETUP_ONLY=1 BUILD/bench_invoice 20000 SETUP
# WORK is a scratch folder (on /dev/shm to time the engine, not the disk).
# Only `tally invoice run` is timed: copying the ledger and deleting the
# last run's files (60,000 of them for 20,000 accounts, about half a second
# on tmpfs) happen before the clock starts. Prints each pair and the
# median ratio.
set -euo pipefail
build=$1 setup=$2 work=$3 pairs=${4:-5}

# One run; prints its wall time in ms. $1: "out" or "".
one() {
  rm -rf "$work"
  mkdir -p "$work"
  cp "$setup/bench.db" "$work/bench.db"
  local args=(--db "$work/bench.db" --key "$setup/bench.key" invoice run --period 2026-03
    --finalize)
  [ "$1" = out ] && args+=(--out "$work/out")
  local t0 t1
  t0=$(date +%s%N)
  TALLY_NOW=2026-04-02T00:00:00Z "$build/tally" "${args[@]}" >/dev/null
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000000))
}

one "" >/dev/null # warm-up
ratios=()
for i in $(seq "$pairs"); do
  with=$(one out)
  without=$(one "")
  r=$(awk -v a="$with" -v b="$without" 'BEGIN { printf "%.3f", a / b }')
  ratios+=("$r")
  echo "pair $i: --out ${with} ms, without ${without} ms, ratio $r"
done
rm -rf "$work"
printf '%s\n' "${ratios[@]}" | sort -n |
  awk '{ v[NR] = $1 } END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "median ratio %.3f (min %s, max %s, %d pairs)\n", m, v[1], v[NR], NR }'
