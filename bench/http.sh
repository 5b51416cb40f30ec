#!/usr/bin/env bash
# HTTP API load test: wrk against balance and usage with an account key.
#
#   bench/http.sh [BUILD_DIR] [SECONDS] [CONNECTIONS]
#
# Makes a ledger with a month of usage for one account (hourly 8-card h100
# runs, an SSD volume, token traffic; 2,160 events) plus 50 other accounts,
# starts `tally serve` on a free loopback port and runs wrk (2 threads) for
# SECONDS (default 30). Prints requests/s, p99 latency, non-2xx responses
# and the server's resident memory before, after and at peak (VmHWM).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
secs=${2:-30}
conns=${3:-16}
tally=$build/tally
[ -x "$tally" ] || { echo "http.sh: $tally missing (build it first)" >&2; exit 1; }
command -v wrk >/dev/null || { echo "http.sh: wrk missing" >&2; exit 1; }

dir=$(mktemp -d /tmp/tally-bench-http.XXXXXX)
server=
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
export TALLY_DB=$dir/tally.db TALLY_NOW=2026-03-31T12:00:00Z

"$tally" init >/dev/null
# One month of hourly usage for acme; a day of usage for 50 others.
awk 'BEGIN {
  for (d = 1; d <= 30; d++) for (h = 0; h < 24; h++) {
    printf "{\"specversion\":\"1.0\",\"id\":\"g-%d-%d\",\"source\":\"bench\",\"type\":\"accelerator.usage\",\"subject\":\"acme\",\"time\":\"2026-03-%02dT%02d:00:00Z\",\"data\":{\"instance\":\"i-1\",\"sku\":\"h100\",\"pricing\":\"on_demand\",\"cards\":8,\"seconds\":3600}}\n", d, h, d, h
    printf "{\"specversion\":\"1.0\",\"id\":\"s-%d-%d\",\"source\":\"bench\",\"type\":\"storage.usage\",\"subject\":\"acme\",\"time\":\"2026-03-%02dT%02d:00:00Z\",\"data\":{\"volume\":\"v-1\",\"class\":\"ssd\",\"bytes\":500000000000,\"seconds\":3600}}\n", d, h, d, h
    printf "{\"specversion\":\"1.0\",\"id\":\"t-%d-%d\",\"source\":\"bench\",\"type\":\"tokens.usage\",\"subject\":\"acme\",\"time\":\"2026-03-%02dT%02d:00:00Z\",\"data\":{\"model\":\"m\",\"kind\":\"input\",\"tokens\":123456}}\n", d, h, d, h
  }
  for (a = 1; a <= 50; a++)
    printf "{\"specversion\":\"1.0\",\"id\":\"o-%d\",\"source\":\"bench\",\"type\":\"accelerator.usage\",\"subject\":\"acct-%d\",\"time\":\"2026-03-10T00:00:00Z\",\"data\":{\"instance\":\"i-%d\",\"sku\":\"a100-40g\",\"pricing\":\"on_demand\",\"cards\":1,\"seconds\":3600}}\n", a, a, a
}' > "$dir/usage.ndjson"
"$tally" ingest "$dir/usage.ndjson" >/dev/null
"$tally" credit grant acme 10.00 --kind trial --effective 2026-03-01T00:00:00Z >/dev/null
key=$("$tally" apikey create --account acme 2>/dev/null)

"$tally" serve --listen 127.0.0.1:0 >"$dir/addr" 2>"$dir/serve.err" &
server=$!
for _ in $(seq 100); do [ -s "$dir/addr" ] && break; sleep 0.1; done
addr=$(head -1 "$dir/addr")
rss() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$server/status"; }

# Warm up (first queries load rate cards and fill caches), then measure.
wrk -t1 -c2 -d2s -s bench/wrk/reports.lua "http://$addr" -- acme "$key" >/dev/null
rss_before=$(rss VmRSS)
wrk -t2 -c"$conns" -d"${secs}s" --latency -s bench/wrk/reports.lua "http://$addr" -- acme "$key" \
  | tee "$dir/wrk.out"
rss_after=$(rss VmRSS)
rss_peak=$(rss VmHWM)

rps=$(awk '/^Requests\/sec:/ { print $2 }' "$dir/wrk.out")
p99=$(awk '$1 == "99%" { print $2 }' "$dir/wrk.out")
non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' "$dir/wrk.out")
sockerr=$(awk '/Socket errors:/ { sub(/.*Socket errors: /, ""); print }' "$dir/wrk.out")
echo
echo "requests/s: $rps"
echo "p99 latency: $p99"
echo "non-2xx responses: ${non2xx:-0}"
echo "socket errors: ${sockerr:-none}"
echo "server RSS: before ${rss_before} kB, after ${rss_after} kB, peak ${rss_peak} kB"
