#!/usr/bin/env bash
# Two builds' `tally meter` on one topic of the embedded broker, alternately,
# for a ratio between builds that the machine's drift moves less than two
# runs of bench/kafka.sh would.
#
#   bench/meter_ab.sh BUILD_A BUILD_B [ROUNDS]
#
# Environment: EVENTS (default 1000000), PARTITIONS (default 256),
# PRODUCE_ARGS (extra bench_produce options). Prints, per run, the rate
# (messages / time from the first message to the last, so the group join
# is left out) and the process's CPU seconds; each meter reads the whole
# topic in a group of its own into a fresh ledger.
set -euo pipefail
A=$1 B=$2 rounds=${3:-3}
work=$(mktemp -d "${TMPDIR:-/tmp}/tally-meter-ab.XXXXXX")
broker_pid=
cleanup() {
  [ -n "$broker_pid" ] && kill "$broker_pid" 2>/dev/null && wait "$broker_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
"$A/tally" broker --partitions "${PARTITIONS:-256}" >"$work/broker.out" 2>/dev/null &
broker_pid=$!
for _ in $(seq 100); do [ -s "$work/broker.out" ] && break; sleep 0.1; done
bootstrap=$(head -1 "$work/broker.out")
# shellcheck disable=SC2086
"$A/bench_produce" --brokers "$bootstrap" --topic usage --events "${EVENTS:-1000000}" \
  ${PRODUCE_ARGS:-} >/dev/null
run() { # build group
  rm -f "$work"/l.db*
  "$1/tally" --db "$work/l.db" init >/dev/null
  /usr/bin/time -f '%U %S' -o "$work/time" "$1/tally" --db "$work/l.db" meter \
    --brokers "$bootstrap" --topic usage --group "$2" --until-idle 2 >"$work/out" 2>/dev/null
  local first last msgs
  first=$(sed 's/.*first_ms=\([0-9-]*\).*/\1/' "$work/out")
  last=$(sed 's/.*last_ms=\([0-9-]*\).*/\1/' "$work/out")
  msgs=$(sed 's/^messages=\([0-9]*\).*/\1/' "$work/out")
  echo "$2 rate=$((msgs * 1000 / (last > first ? last - first : 1))) cpu=$(awk '{print $1 + $2}' "$work/time")"
}
# A first in odd rounds, B first in even ones: the second run of a round
# may fare differently (two 6-round calls with the same two builds swapped
# gave pair-ratio medians of 0.94 and 1.02: RESULTS.md, fifteenth pass).
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then
    run "$A" "a$r"
    run "$B" "b$r"
  else
    run "$B" "b$r"
    run "$A" "a$r"
  fi
done
