#!/usr/bin/env bash
# Replays issue 14's list of hostile inputs and tampering against a real
# `tally serve` and a ledger file, as an attacker with an API key or with
# write access to the database would, and checks what each attempt gets.
# RELIABILITY.md ("Hostile input and tampering") lists the same attempts.
#
#   tests/hostile/replay.sh TALLY_BINARY [PARENT_DIR]
#
# Loopback only; every request is bounded by curl's --max-time. Prints one
# line per attempt ("ok <what>: <what it got>") and exits non-zero on the
# first attempt that gets anything else. Run by ctest as hostile/replay.
set -euo pipefail
tally=${1:?usage: replay.sh TALLY_BINARY [PARENT_DIR]}
mkdir -p "${2:-/tmp}"
work=$(mktemp -d "${2:-/tmp}/tally-hostile.XXXXXX")
db="$work/tally.db"
key="$work/tally.key"
serve_pid=
cleanup() { [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT
for tool in curl sqlite3; do
  command -v "$tool" >/dev/null || { echo "replay: $tool is missing (scripts/deps installs it)" >&2; exit 1; }
done

fail() { echo "FAIL $*" >&2; exit 1; }
ok() { echo "ok   $*"; }
t() { "$tally" --db "$db" --key "$key" "$@"; }
# An accelerator.usage event: id, source, subject, time, [cards].
ev() {
  printf '{"specversion":"1.0","id":"%s","source":"%s","type":"accelerator.usage","subject":"%s","time":"%s","data":{"instance":"i-1","sku":"a100-40g","pricing":"on_demand","cards":%s,"seconds":60}}' \
    "$1" "$2" "$3" "$4" "${5:-1}"
}
tok() {
  printf '{"specversion":"1.0","id":"%s","source":"%s","type":"tokens.usage","subject":"%s","time":"%s","data":{"model":"qwen-72b","kind":"input","tokens":%s}}' \
    "$1" "$2" "$3" "$4" "$5"
}
# POST BODY with KEY to PATH; sets $code and $body.
post() {
  local out
  out=$(curl -sS --max-time 10 -o "$work/resp" -w '%{http_code}' -H "Authorization: Bearer $1" \
    -H 'Content-Type: application/json' --data-binary "$3" "http://$addr$2") || out=000
  code=$out
  body=$(cat "$work/resp" 2>/dev/null || true)
}
count() { sqlite3 "$db" "$1"; }

# ---- set-up: a ledger, a key, accounts, a server ------------------------------
t init >/dev/null
t keygen >/dev/null
t account set acme-ai --name "Acme AI" >/dev/null
t account set rival >/dev/null
admin=$(t apikey create --admin 2>/dev/null | tail -1)
acme=$(t apikey create --account acme-ai 2>/dev/null | tail -1)
rival=$(t apikey create --account rival 2>/dev/null | tail -1)
host=$(t apikey create --ingest --source //hosts/ 2>/dev/null | tail -1)
t serve --listen 127.0.0.1:0 >"$work/serve.out" 2>"$work/serve.err" &
serve_pid=$!
for _ in $(seq 50); do
  addr=$(head -1 "$work/serve.out" 2>/dev/null || true)
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || fail "tally serve did not start: $(cat "$work/serve.err")"
addr=${addr#http://}

# ---- 1. pre-empting a host's event ids ----------------------------------------
for k in "$acme" "$rival"; do
  post "$k" /v1/events "[$(tok pre-1 //hosts/n1 acme-ai 2026-03-02T00:00:00Z 0)]"
  [ "$code" = 403 ] || fail "1. an account key sending usage got $code: $body"
done
[ "$(count "SELECT count(*) FROM dedupe")" = 0 ] || fail "1. an account key's event was stored"
post "$host" /v1/events "[$(tok pre-1 //hosts/n1 acme-ai 2026-03-02T00:00:00Z 5),$(tok x //other/n acme-ai 2026-03-02T00:00:00Z 5)]"
[ "$code" = 200 ] && grep -q source_not_allowed <<<"$body" ||
  fail "1. an ingest key outside its prefix got $code: $body"
[ "$(count "SELECT count(*) FROM dedupe")" = 1 ] || fail "1. the ingest key's events were not stored as expected"
ok "1. account keys sending usage: 403, nothing stored; an ingest key's own source stored, another refused per event"

# ---- 2. events dated 1969 and 0001, with good events around them --------------
post "$admin" /v1/events "[$(ev g1 //hosts/n1 acme-ai 2026-03-03T00:00:00Z),$(ev b1 //hosts/n1 acme-ai 1969-12-31T23:59:59Z),$(ev b2 //hosts/n1 acme-ai 0001-01-01T00:00:00Z),$(ev g2 //hosts/n1 acme-ai 2026-03-03T01:00:00Z)]"
[ "$code" = 200 ] || fail "2. a request with old times got $code: $body"
[ "$(count "SELECT count(*) FROM quarantine WHERE reason = 'bad_time'")" = 2 ] ||
  fail "2. old times over HTTP were not quarantined as bad_time"
printf '%s\n%s\n%s\n' "$(ev f1 //hosts/n2 acme-ai 2026-03-04T00:00:00Z)" \
  "$(ev f2 //hosts/n2 acme-ai 1969-12-31T23:59:59Z)" "$(ev f3 //hosts/n2 acme-ai 2026-03-04T01:00:00Z)" >"$work/old.ndjson"
t ingest "$work/old.ndjson" >"$work/ingest.out" || fail "2. tally ingest of a file with a 1969 event exited $?"
grep -q 'accepted=2' "$work/ingest.out" || fail "2. tally ingest: $(cat "$work/ingest.out")"
ok "2. times before 2000: bad_time on HTTP and file ingest; the events around them stored"

# ---- 3. out-of-range quantities -----------------------------------------------
post "$admin" /v1/events "[$(ev big //hosts/n1 acme-ai 2026-03-05T00:00:00Z 9223372036854775807),$(ev g3 //hosts/n1 acme-ai 2026-03-05T01:00:00Z)]"
[ "$code" = 200 ] && [ "$(count "SELECT count(*) FROM quarantine WHERE reason = 'out_of_range'")" = 1 ] ||
  fail "3. cards 2^63-1 got $code: $body"
t invoice run --period 2026-03 >/dev/null || fail "3. the account can no longer be invoiced"
ok "3. cards 2^63-1: out_of_range; the account is still invoiced"

# ---- 4. a grant over the bound ------------------------------------------------
set +e
t credit grant acme-ai 92233720368547758.07 --kind goodwill >/dev/null 2>&1
rc=$?
set -e
[ "$rc" = 2 ] || fail "4. tally credit grant of 92233720368547758.07 exited $rc"
post "$admin" /v1/accounts/acme-ai/credits '{"amount":"92233720368547758.07","kind":"goodwill"}'
[ "$code" = 400 ] || fail "4. HTTP grant of 92233720368547758.07 got $code: $body"
[ "$(count "SELECT count(*) FROM grants")" = 0 ] || fail "4. an oversized grant was stored"
t verify >/dev/null || fail "4. verify fails after refused grants"
ok "4. a grant of 92233720368547758.07: exit 2 and HTTP 400, nothing stored, verify passes"

# ---- 5. late events and back-dated prices: tests/ledger/test_late.c -----------

ok "replayed every attempt in $work"
