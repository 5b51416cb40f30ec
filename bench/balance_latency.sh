#!/usr/bin/env bash
# Balance-event latency: from producing the usage event that exhausts a
# prepaid account to a downstream kcat reading its balance.exhausted event.
#
#   bench/balance_latency.sh [BUILD_DIR]          (default: build)
#
# One embedded broker (`tally broker`), one `tally meter` and one continuous
# `tally publish` on a fresh ledger, and one kcat consumer of the invoices
# topic that stamps each event as it reads it. RUNS fresh accounts each get a
# 1.00 prepaid grant (stop mark 0.00) and one h100 on demand in one-minute
# events of 0.043: the first 23 (0.99) are produced and stored first; then,
# after a random pause of 0-200 ms (so the runs do not lock onto the
# meter's or the publisher's cycle), the 24th (charges 1.03, balance -0.03)
# is produced with a one-shot `kcat -P` and the clock runs until the reader
# prints balance.exhausted:<account>:1. A first account, lat-0 (lat-00),
# warms up the pipeline and is printed but not counted: the first event
# after `tally publish` starts was read 0.7-1.2 s after its commit in most
# trial runs, with the reader already warm, i.e. in the publisher's first
# delivery (its producer connects lazily).
#
# Per run it prints, in ms: produce (the one-shot kcat -P until it exits,
# i.e. acknowledged), commit (from the acknowledgement until the outbox row
# is visible, polled with sqlite3 about every 5 ms) and read (from the
# acknowledgement until kcat read the event); then min, p50, p99 and max.
#
# Environment: RUNS (default 20), METER_ARGS (extra `tally meter` options,
# e.g. "--batch-ms 10"), KCAT_FETCH_WAIT_MS (the reader's
# fetch.wait.max.ms, default 10; librdkafka's default is 500), KEEP=1 keeps
# the work folder.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
T=$B/tally
RUNS=${RUNS:-20}
KW=${KCAT_FETCH_WAIT_MS:-10}
for tool in kcat sqlite3; do
  command -v "$tool" >/dev/null || { echo "balance_latency.sh: $tool missing (scripts/deps)" >&2; exit 1; }
done
[ -x "$T" ] || { echo "balance_latency.sh: $T missing (cmake --build $B)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/tally-balance-latency.XXXXXX")
db=$work/tally.db
pids=()
cleanup() { # newest first: the reader, the publisher, the meter, then the broker
  for ((k = ${#pids[@]} - 1; k >= 0; k--)); do
    kill "${pids[k]}" 2>/dev/null || true
    wait "${pids[k]}" 2>/dev/null || true
  done
  [ "${KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT

ms() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", (b - a) * 1000}'; }

echo "uptime: $(uptime)"
"$T" broker --partitions 8 >"$work/broker.out" 2>"$work/broker.err" &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/broker.out" ] && break; sleep 0.1; done
bootstrap=$(head -1 "$work/broker.out")
[ -n "$bootstrap" ] || { echo "balance_latency.sh: the broker did not start" >&2; exit 1; }

"$T" --db "$db" init >/dev/null
for i in $(seq -w 0 "$RUNS"); do
  "$T" --db "$db" credit grant "lat-$i" 1.00 --kind prepaid \
    --effective 2026-03-01T00:00:00Z >/dev/null
done

# shellcheck disable=SC2086
"$T" --db "$db" meter --brokers "$bootstrap" --topic usage --group bench-latency \
  ${METER_ARGS:-} >"$work/meter.out" 2>"$work/meter.err" &
pids+=($!)
"$T" --db "$db" publish --brokers "$bootstrap" >"$work/publish.out" 2>"$work/publish.err" &
pids+=($!)
# The reader: one line "<time> <event id>" per event, stamped as kcat prints it.
kcat -C -b "$bootstrap" -t invoices -o beginning -u -q -X "fetch.wait.max.ms=$KW" -f '%s\n' \
  2>"$work/kcat.err" > >(while IFS= read -r line; do
    [[ $line =~ \"id\":\"([^\"]+)\" ]] && printf '%s %s\n' "$EPOCHREALTIME" "${BASH_REMATCH[1]}"
  done >"$work/reads.log") &
pids+=($!)

event() { # account, message number (1-based)
  local t
  t=$(date -u -d "@$((1773100800 + ($2 - 1) * 60))" +%Y-%m-%dT%H:%M:%SZ) # from 2026-03-10
  printf '%s:{"specversion":"1.0","id":"%s-%04d","source":"//hosts/bench-latency","type":"accelerator.usage","subject":"%s","time":"%s","data":{"instance":"ins-%s","sku":"h100","pricing":"on_demand","cards":1,"seconds":60}}\n' \
    "$1" "$1" "$2" "$1" "$t" "$1"
}

wait_for() { # what, seconds, command...
  local what=$1 until=$((SECONDS + $2))
  shift 2
  until "$@"; do
    [ $SECONDS -lt $until ] || { echo "balance_latency.sh: no $what (see $work)" >&2; KEEP=1; exit 1; }
    sleep 0.002
  done
}
stored() { [ "$(sqlite3 -readonly "$db" "SELECT running_minor FROM account_balances WHERE account = '$1'" 2>/dev/null)" = 99 ]; }
in_outbox() { [ -n "$(sqlite3 -readonly "$db" "SELECT 1 FROM outbox WHERE event_id = '$1'" 2>/dev/null)" ]; }
was_read() { grep -q " $1\$" "$work/reads.log"; }

printf '%-7s %10s %10s %10s\n' run produce_ms commit_ms read_ms
: >"$work/rows"
for i in $(seq -w 0 "$RUNS"); do
  acct=lat-$i id=balance.exhausted:lat-$i:1
  for n in $(seq 1 23); do event "$acct" "$n"; done >"$work/pre-$i.kv"
  kcat -P -l -b "$bootstrap" -t usage -K: "$work/pre-$i.kv"
  wait_for "usage stored for $acct" 60 stored "$acct"
  sleep "0.$(printf '%03d' $((RANDOM % 200)))"
  line=$(event "$acct" 24)
  t0=$EPOCHREALTIME
  printf '%s\n' "$line" | kcat -P -b "$bootstrap" -t usage -K: -X linger.ms=0
  t1=$EPOCHREALTIME
  wait_for "$id in the outbox" 30 in_outbox "$id"
  tc=$EPOCHREALTIME
  wait_for "$id read back" 30 was_read "$id"
  tr=$(awk -v id="$id" '$2 == id {print $1; exit}' "$work/reads.log")
  row=$(printf '%-7s %10s %10s %10s' "$acct" "$(ms "$t0" "$t1")" "$(ms "$t1" "$tc")" "$(ms "$t1" "$tr")")
  if [ "$i" -eq 0 ]; then
    echo "$row  (warm-up, not counted)"
  else
    echo "$row" | tee -a "$work/rows"
  fi
done

stats() { # column, name
  awk -v c="$1" '{print $c}' "$work/rows" | sort -g | awk -v name="$2" '
    { v[NR] = $1 }
    END {
      p50 = v[int((NR * 50 + 99) / 100)]; p99 = v[int((NR * 99 + 99) / 100)]
      printf "%-8s min %7.1f  p50 %7.1f  p99 %7.1f  max %7.1f ms  (n=%d)\n", name, v[1], p50, p99, v[NR], NR
    }'
}
echo "meter: ${METER_ARGS:-defaults (--batch-events 10000 --batch-ms 100)}, publisher: tally publish (polls the outbox every 100 ms when idle), reader fetch.wait.max.ms=$KW"
stats 2 produce
stats 3 commit
stats 4 read
echo "uptime: $(uptime)"
