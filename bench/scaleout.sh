#!/usr/bin/env bash
# Scale-out benchmark: aggregate `tally meter` throughput with 1 and with 2
# meter processes in one consumer group, each run writing a fresh ledger
# directory (one shard per partition), all reading the same pre-produced
# topic of the embedded broker. A single meter into a plain ledger file is
# measured too, as the reference.
#
#   bench/scaleout.sh [BUILD_DIR]          (default: build)
#
# Environment: EVENTS (default 400000), PARTITIONS (default 32; the mock
# broker keeps about 5 MB per partition, so EVENTS x ~275 bytes must fit),
# ACCOUNTS (default 2000, the message keys), METER_ARGS (extra `tally meter`
# options), KEEP=1 keeps the work folder.
#
# A run's rate excludes joining the group: messages / (the last commit of any
# of its meters - the first message of any), on one wall clock (each meter
# reports first_ms/last_ms from its own start, which the script records).
# CPU seconds are user+system of all its meters, max_rss_mb the largest
# meter's peak resident set (/usr/bin/time -v).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
EVENTS=${EVENTS:-400000}
PARTITIONS=${PARTITIONS:-32}
ACCOUNTS=${ACCOUNTS:-2000}
work=$(mktemp -d "${TMPDIR:-/tmp}/tally-scaleout-bench.XXXXXX")
broker_pid=
cleanup() {
  [ -n "$broker_pid" ] && kill "$broker_pid" 2>/dev/null && wait "$broker_pid" 2>/dev/null
  [ "${KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT

for t in tally bench_produce; do
  [ -x "$B/$t" ] || { echo "scaleout.sh: $B/$t missing (cmake --build $B)" >&2; exit 1; }
done

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
field() { sed "s/.*$2=\([0-9-]*\).*/\1/" "$1"; }
cpu_s() { awk -F': ' '/User time/ {u+=$2} /System time/ {s+=$2} END {printf "%.1f", u + s}' "$@"; }
rss_mb() { awk -F': ' '/Maximum resident/ {if ($2 > m) m = $2} END {printf "%d", m / 1024}' "$@"; }

"$B/tally" broker --partitions "$PARTITIONS" >"$work/broker.out" 2>"$work/broker.err" &
broker_pid=$!
for _ in $(seq 100); do [ -s "$work/broker.out" ] && break; sleep 0.1; done
bootstrap=$(head -1 "$work/broker.out")
echo "broker $bootstrap, $PARTITIONS partitions, $EVENTS events, $ACCOUNTS accounts"
"$B/bench_produce" --brokers "$bootstrap" --topic usage --events "$EVENTS" \
  --accounts "$ACCOUNTS" | sed 's/^/produce: /'

# run NAME LEDGER METERS: METERS processes in group NAME into LEDGER.
run() {
  local name=$1 ledger=$2 n=$3 i pids=() starts=()
  for i in $(seq "$n"); do
    starts+=("$(now_ms)")
    # shellcheck disable=SC2086
    /usr/bin/time -v "$B/tally" --db "$ledger" meter --brokers "$bootstrap" --topic usage \
      --group "$name" --until-idle 3 ${METER_ARGS:-} >"$work/$name.$i.out" \
      2>"$work/$name.$i.err" &
    pids+=($!)
  done
  for i in $(seq "$n"); do
    wait "${pids[$((i - 1))]}" || { echo "scaleout.sh: a meter of $name failed:" >&2;
      tail -5 "$work/$name.$i.err" >&2; exit 1; }
  done
  local first= last= msgs=0 f l
  for i in $(seq "$n"); do
    f=$(field "$work/$name.$i.out" first_ms)
    l=$(field "$work/$name.$i.out" last_ms)
    msgs=$(( msgs + $(sed 's/^messages=\([0-9]*\).*/\1/' "$work/$name.$i.out") ))
    [ "$f" -ge 0 ] || continue
    f=$(( ${starts[$((i - 1))]} + f )); l=$(( ${starts[$((i - 1))]} + l ))
    if [ -z "$first" ] || [ "$f" -lt "$first" ]; then first=$f; fi
    if [ -z "$last" ] || [ "$l" -gt "$last" ]; then last=$l; fi
  done
  local ms=$(( last - first ))
  local cpu rss
  cpu=$(cpu_s "$work/$name".*.err)
  rss=$(rss_mb "$work/$name".*.err)
  echo "$name: meters=$n messages=$msgs consume_ms=$ms rate=$(( msgs * 1000 / (ms > 0 ? ms : 1) )) cpu_s=$cpu max_rss_mb=$rss"
  [ "$msgs" -eq "$EVENTS" ] || echo "scaleout.sh: $name stored $msgs of $EVENTS messages" >&2
}

"$B/tally" --db "$work/plain.db" init >/dev/null
run plain-1 "$work/plain.db" 1
mkdir "$work/dir1" "$work/dir2"
"$B/tally" --db "$work/dir1" init >/dev/null
"$B/tally" --db "$work/dir2" init >/dev/null
run sharded-1 "$work/dir1" 1
run sharded-2 "$work/dir2" 2
