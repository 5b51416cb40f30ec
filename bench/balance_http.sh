#!/usr/bin/env bash
# The balance lookup against /healthz on the same `tally serve`, in one run.
#
#   bench/balance_http.sh [BUILD_DIR] [SECONDS] [CONNECTIONS] [THREADS]
#
# Makes a ledger with the demo's usage (`tally demo --emit-ndjson`, 17,032
# events of five accounts, March 2026) and a prepaid top-up for the busiest
# account (acme-ai), starts `tally serve` on a free loopback port, and runs
# wrk for SECONDS each (default 10; THREADS default 2, CONNECTIONS 32) with
# an admin key: first GET /healthz, then GET /v1/accounts/acme-ai/balance.
# Prints both rates, their ratio and the load average. The target is a
# balance rate of at least 0.3 of the healthz rate (SPEC section 9: a read is
# a lookup, never a rating). Exits 1 if a request was answered other than
# 200, 0 otherwise (a ratio below target is printed, not an exit status).
#
# Needs wrk (TALLY_DEPS_EXTRA=wrk scripts/deps). Sends traffic to 127.0.0.1
# only; stops the server it started, and nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
secs=${2:-10}
conns=${3:-32}
threads=${4:-2}
tally=$build/tally
[ -x "$tally" ] || { echo "balance_http.sh: $tally missing (build it first)" >&2; exit 1; }
command -v wrk >/dev/null || { echo "balance_http.sh: wrk missing (TALLY_DEPS_EXTRA=wrk scripts/deps)" >&2; exit 1; }

dir=$(mktemp -d /tmp/tally-bench-balance.XXXXXX)
server=
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
export TALLY_DB=$dir/tally.db
account=acme-ai

"$tally" demo --emit-ndjson >"$dir/ev.ndjson"
"$tally" init >/dev/null
"$tally" ingest "$dir/ev.ndjson" >/dev/null
"$tally" credit grant "$account" 1000.00 --kind prepaid --effective 2026-03-01T00:00:00Z >/dev/null
key=$("$tally" apikey create --admin 2>/dev/null)
events=$(wc -l <"$dir/ev.ndjson")

"$tally" serve --listen 127.0.0.1:0 >"$dir/addr" 2>"$dir/serve.err" &
server=$!
for _ in $(seq 100); do [ -s "$dir/addr" ] && break; sleep 0.1; done
addr=$(head -1 "$dir/addr")
[ -n "$addr" ] || { echo "balance_http.sh: tally serve did not start:" >&2; cat "$dir/serve.err" >&2; exit 1; }
auth="Authorization: Bearer $key"
balance_path=/v1/accounts/$account/balance

# Both answer 200 before anything is measured.
for p in /healthz "$balance_path"; do
  code=$(curl -s -o "$dir/first.body" -w '%{http_code}' -H "$auth" "http://$addr$p")
  [ "$code" = 200 ] || { echo "balance_http.sh: GET $p answered $code: $(cat "$dir/first.body")" >&2; exit 1; }
done

# The server's CPU time so far (user + system), in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$server/stat"; }
tck=$(getconf CLK_TCK)

# One wrk run; prints requests/s, p99, non-2xx (0 when none) and the
# server's CPU microseconds per request (less sensitive than the rate to
# other load on the machine: the server is one thread).
measure() {
  local name=$1 path=$2 out=$dir/wrk.$1
  wrk -t1 -c2 -d2s -H "$auth" "http://$addr$path" >/dev/null # warm-up
  local t0 t1
  t0=$(cpu_ticks)
  wrk -t"$threads" -c"$conns" -d"${secs}s" --latency -H "$auth" "http://$addr$path" >"$out"
  t1=$(cpu_ticks)
  local rps p99 non2xx n
  rps=$(awk '/^Requests\/sec:/ { print $2 }' "$out")
  p99=$(awk '$1 == "99%" { print $2 }' "$out")
  non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' "$out")
  n=$(awk '/requests in/ { print $1 }' "$out")
  echo "$name $rps $p99 ${non2xx:-0} $(awk -v d=$((t1 - t0)) -v n="$n" -v t="$tck" \
    'BEGIN { printf "%.1f", d * 1e6 / t / n }')"
}

echo "machine: $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "ledger: $events demo events, account $account; wrk -t$threads -c$conns -d${secs}s each"
read -r _ h_rps h_p99 h_bad h_cpu < <(measure healthz /healthz)
read -r _ b_rps b_p99 b_bad b_cpu < <(measure balance "$balance_path")
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
row='%-34s %10s req/s  p99 %-8s non-2xx %-4s server CPU %7s us/request\n'
printf "$row" "GET /healthz" "$h_rps" "$h_p99" "$h_bad" "$h_cpu"
printf "$row" "GET $balance_path" "$b_rps" "$b_p99" "$b_bad" "$b_cpu"
awk -v b="$b_rps" -v h="$h_rps" -v bc="$b_cpu" -v hc="$h_cpu" 'BEGIN {
  r = b / h
  printf "ratio balance/healthz: %.3f (target >= 0.30: %s); by server CPU per request: %.3f\n",
    r, (r >= 0.3) ? "met" : "BELOW", hc / bc
}'
[ "$h_bad" = 0 ] && [ "$b_bad" = 0 ]
