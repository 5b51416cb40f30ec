#!/usr/bin/env bash
# Kafka benchmark: a bare counting consumer, kcat and `tally meter` read the
# same pre-produced topic of the embedded broker, in the same run; the
# meter with prepaid balances kept and off (TALLY_NO_BALANCES=1), for what
# they cost.
#
#   bench/kafka.sh [BUILD_DIR]          (default: build)
#
# Environment: EVENTS (default 1000000), PARTITIONS (default 128: the mock
# broker keeps about 5 MB per partition, so EVENTS x ~275 bytes must fit,
# and messages are keyed by account, so use many more accounts than
# partitions), PRODUCE_ARGS (extra bench_produce options, e.g. --accounts
# 5000 --instances 20000), METER_ARGS (extra `tally meter` options), ROUNDS
# (meter runs of each kind, default 2), KEEP=1
# keeps the work folder.
#
# Each consumer's rate excludes joining the group: it is messages / (time of
# the last message or commit - time of the first message). Peak RSS and CPU
# seconds come from /usr/bin/time -v. Prints one line per consumer and the
# ratio meter/baseline.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
EVENTS=${EVENTS:-1000000}
PARTITIONS=${PARTITIONS:-128}
work=$(mktemp -d "${TMPDIR:-/tmp}/tally-kafka-bench.XXXXXX")
broker_pid=
cleanup() {
  [ -n "$broker_pid" ] && kill "$broker_pid" 2>/dev/null && wait "$broker_pid" 2>/dev/null
  [ "${KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT

for t in tally bench_produce bench_kafka_baseline; do
  [ -x "$B/$t" ] || { echo "kafka.sh: $B/$t missing (cmake --build $B)" >&2; exit 1; }
done

# Fields of /usr/bin/time -v output.
peak_rss_mb() { awk -F': ' '/Maximum resident/ {printf "%d", $2 / 1024}' "$1"; }
cpu_s() { awk -F': ' '/User time/ {u=$2} /System time/ {s=$2} END {printf "%.1f", u + s}' "$1"; }

"$B/tally" broker --partitions "$PARTITIONS" >"$work/broker.out" 2>"$work/broker.err" &
broker_pid=$!
for _ in $(seq 100); do [ -s "$work/broker.out" ] && break; sleep 0.1; done
bootstrap=$(head -1 "$work/broker.out")
echo "broker $bootstrap, $PARTITIONS partitions"

# shellcheck disable=SC2086
"$B/bench_produce" --brokers "$bootstrap" --topic usage --events "$EVENTS" ${PRODUCE_ARGS:-} |
  sed 's/^/produce: /'

# 1. The bare consumer, once here and once before each round of the meter
# (step 3): the meter's ratio is taken against the baseline of its own
# round, and the median of those ratios is the figure.
base_run() { # group -> sets base_rate, prints the line
  /usr/bin/time -v "$B/bench_kafka_baseline" --brokers "$bootstrap" --topic usage \
    --group "$1" --expect "$EVENTS" >"$work/base.out" 2>"$work/base.time" ||
    echo "kafka.sh: the baseline did not see all $EVENTS messages (retention? more partitions)" >&2
  base_rate=$(sed 's/.*rate=\([0-9]*\).*/\1/' "$work/base.out")
  echo "baseline: $(cat "$work/base.out") rss_mb=$(peak_rss_mb "$work/base.time") cpu_s=$(cpu_s "$work/base.time")"
}
base_run bench-base

# 2. kcat (plain consumer, no group): time to the first message subtracted.
t0=$(date +%s%N)
kcat -C -b "$bootstrap" -t usage -o beginning -c 1 -q -f '%o\n' >/dev/null
t1=$(date +%s%N)
/usr/bin/time -v kcat -C -b "$bootstrap" -t usage -o beginning -e -q -f '%o\n' \
  >"$work/kcat.out" 2>"$work/kcat.time"
t2=$(date +%s%N)
kcat_n=$(wc -l <"$work/kcat.out")
kcat_ms=$(( (t2 - t1 - (t1 - t0)) / 1000000 ))
echo "kcat: messages=$kcat_n consume_ms=$kcat_ms rate=$(( kcat_n * 1000 / (kcat_ms > 0 ? kcat_ms : 1) )) rss_mb=$(peak_rss_mb "$work/kcat.time") cpu_s=$(cpu_s "$work/kcat.time")"

# 3. tally meter into a fresh ledger on disk, with prepaid balances kept
# (the default) and without them (TALLY_NO_BALANCES=1), alternately, ROUNDS
# times each (default 2); each group reads the whole topic. The best rate of
# each is compared: what keeping running charges in every batch costs
# (SPEC section 9).
meter_run() { # name env -> sets rate, prints the line
  local name=$1 env=$2
  "$B/tally" --db "$work/$name.db" init >/dev/null
  # shellcheck disable=SC2086
  env $env /usr/bin/time -v "$B/tally" --db "$work/$name.db" meter --brokers "$bootstrap" \
    --topic usage --group "bench-$name" --until-idle 2 ${METER_ARGS:-} >"$work/$name.out" \
    2>"$work/$name.err" || { echo "kafka.sh: tally meter ($name) failed:" >&2
    tail -5 "$work/$name.err" >&2; exit 1; }
  local first last msgs ms
  first=$(sed 's/.*first_ms=\([0-9-]*\).*/\1/' "$work/$name.out")
  last=$(sed 's/.*last_ms=\([0-9-]*\).*/\1/' "$work/$name.out")
  msgs=$(sed 's/^messages=\([0-9]*\).*/\1/' "$work/$name.out")
  ms=$(( last - first ))
  rate=$(( msgs * 1000 / (ms > 0 ? ms : 1) ))
  echo "$name: $(cat "$work/$name.out") consume_ms=$ms rate=$rate rss_mb=$(peak_rss_mb "$work/$name.err") cpu_s=$(cpu_s "$work/$name.err") ledger_mb=$(du -m "$work/$name.db" | cut -f1)"
  [ "${KEEP:-0}" = 1 ] || rm -f "$work/$name.db" "$work/$name.db-wal" "$work/$name.db-shm"
}
meter_rate=0
nobal_rate=0
ratios=
for r in $(seq "${ROUNDS:-2}"); do
  base_run "bench-base-$r"
  meter_run "meter-$r" "TALLY_BENCH_ROUND=$r"
  ratios="$ratios $(awk -v m="$rate" -v b="$base_rate" 'BEGIN {printf "%.3f", m / b}')"
  [ "$rate" -gt "$meter_rate" ] && meter_rate=$rate
  meter_run "nobal-$r" "TALLY_NO_BALANCES=1"
  [ "$rate" -gt "$nobal_rate" ] && nobal_rate=$rate
done
echo "meter (best of ${ROUNDS:-2}): rate=$meter_rate; without balances: rate=$nobal_rate"
echo "ratio meter/baseline, each round against its own baseline:$ratios"
echo "$ratios" | tr ' ' '\n' | sed '/^$/d' | sort -n |
  awk '{v[NR] = $1} END {printf "ratio meter/baseline, median: %.2f\n", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
awk -v m="$meter_rate" -v n="$nobal_rate" 'BEGIN {printf "ratio with/without balances: %.2f\n", m / n}'
