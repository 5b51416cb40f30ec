#!/usr/bin/env bash
# tally ingest of a generated 1M-event NDJSON file, against the bare decode
# rate of the same kind of events, measured in the same run.
#
#   bench/ingest.sh [BUILD_DIR] [EVENTS]
#
# PRODUCE_ARGS adds bench_produce options (e.g. "--gaps 1" for the stream of
# earlier runs, whose accelerator intervals break every few reports).
# Prints events/s for both (CPU time, which the machine's other load moves
# less than wall time), their ratio, wall time and peak RSS of the ingest.
set -euo pipefail
build=${1:-build}
n=${2:-1000000}
work=$(mktemp -d /tmp/tally-ingest-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

"$build/bench_produce" --events "$n" --accounts 2000 --instances 8000 \
  --dup-permille 5 --poison-permille 1 --start 2026-03-01T00:00:00Z \
  --ndjson "$work/usage.ndjson" ${PRODUCE_ARGS:-} >/dev/null
lines=$(wc -l <"$work/usage.ndjson")
bytes=$(stat -c %s "$work/usage.ndjson")
"$build/tally" --db "$work/ledger.db" init >/dev/null

# Ingest: one process, the file on disk, ledger with synchronous=FULL.
/usr/bin/time -f '%e %U %S %M' -o "$work/time" \
  "$build/tally" --db "$work/ledger.db" ingest "$work/usage.ndjson" >"$work/counts"
read -r wall user sys rss_kib <"$work/time"
cpu_ms=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%d", (u + s) * 1000 }')
wall_ms=$(awk -v w="$wall" 'BEGIN { printf "%d", w * 1000 }')
ingest_cpu=$((lines * 1000 / cpu_ms))
ingest_wall=$((lines * 1000 / wall_ms))

# Bare decode of the same number of events (tally_event_decode, no ledger).
decode=$("$build/bench_decode" "$n" tally | sed -E 's/^tally_event_decode ([0-9]+) events.*/\1/')

echo "events          $lines lines, $bytes bytes ($(cat "$work/counts"))"
echo "ingest          $ingest_cpu events/s CPU, $ingest_wall events/s wall, ${wall}s, peak RSS ${rss_kib} KiB"
echo "bare decode     $decode events/s CPU"
echo "ingest / decode $((ingest_cpu * 1000 / decode))/1000 (CPU)"
echo "ledger          $(stat -c %s "$work/ledger.db") bytes after the ingest"
