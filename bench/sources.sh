#!/usr/bin/env bash
# Cost per event with 1,000 hosts against 20,000 hosts (issue 15, item 3):
# `tally ingest` of two generated streams, alternately, CPU time of each.
#
#   bench/sources.sh [BUILD_DIR] [EVENTS_PER_INSTANCE] [ROUNDS]
#
# Both streams give every instance the same number of reports (default
# 62.5 on average: 250,000 events over 1,000 hosts' 4,000 instances, and
# 5,000,000 over 20,000 hosts' 80,000), so each holds the same usage per
# host, as a cloud's stream does at any moment whatever its size. (With the
# same number of events for both, the larger cloud's stream covers a
# twentieth of the time, every instance opens its interval and account
# rows and reports a dozen times, and the output per event is not the same:
# FIXED=1 measures that too, 1M events each.)
#
# Prints each round's CPU seconds and CPU per event, and the median ratio
# of 20,000 hosts' cost per event to 1,000 hosts'.
set -euo pipefail
build=${1:-build}
per=${2:-62.5}
rounds=${3:-3}
work=$(mktemp -d "${TMPDIR:-/tmp}/tally-sources-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

small=$(awk -v p="$per" 'BEGIN { printf "%d", p * 4000 }')
large=$(awk -v p="$per" 'BEGIN { printf "%d", p * 80000 }')
if [ "${FIXED:-0}" = 1 ]; then
  small=1000000
  large=1000000
fi
gen() { # events instances file
  "$build/bench_produce" --events "$1" --accounts 2000 --instances "$2" --dup-permille 5 \
    --poison-permille 1 --start 2026-03-01T00:00:00Z --ndjson "$3" >/dev/null
}
gen "$small" 4000 "$work/small.ndjson"
gen "$large" 80000 "$work/large.ndjson"

# One ingest into a fresh ledger; prints its CPU seconds (user + system).
one() {
  rm -f "$work"/l.db*
  "$build/tally" --db "$work/l.db" init >/dev/null
  /usr/bin/time -f '%U %S' -o "$work/time" "$build/tally" --db "$work/l.db" ingest "$1" \
    >/dev/null
  awk '{ printf "%.2f", $1 + $2 }' "$work/time"
}

ratios=()
for r in $(seq "$rounds"); do
  s=$(one "$work/small.ndjson")
  l=$(one "$work/large.ndjson")
  ratio=$(awk -v s="$s" -v l="$l" -v ns="$small" -v nl="$large" \
    'BEGIN { printf "%.3f", (l / nl) / (s / ns) }')
  ratios+=("$ratio")
  awk -v r="$r" -v s="$s" -v l="$l" -v ns="$small" -v nl="$large" -v q="$ratio" 'BEGIN {
    printf "round %d: 1,000 hosts %d events %.2f s CPU (%.2f us/event); 20,000 hosts %d events %.2f s (%.2f us/event); ratio %s\n",
      r, ns, s, s * 1e6 / ns, nl, l, l * 1e6 / nl, q }'
done
printf '%s\n' "${ratios[@]}" | sort -n |
  awk '{ v[NR] = $1 } END { printf "cost per event, 20,000 hosts / 1,000 hosts: median %.2f (%d rounds)\n",
    NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, NR }'
