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
flood=$(t apikey create --ingest --source //flood/ 2>/dev/null | tail -1)
# Not through t(): `t ... &` would background a subshell, and $! (what
# cleanup kills) would be that subshell, leaving the server running.
"$tally" --db "$db" --key "$key" serve --listen 127.0.0.1:0 --header-timeout 2 \
  --ingest-rate 50 --ingest-burst 50 >"$work/serve.out" 2>"$work/serve.err" &
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
[ "$(count "SELECT count(*) FROM dedupe_keys")" = 0 ] || fail "1. an account key's event was stored"
post "$host" /v1/events "[$(tok pre-1 //hosts/n1 acme-ai 2026-03-02T00:00:00Z 5),$(tok x //other/n acme-ai 2026-03-02T00:00:00Z 5)]"
[ "$code" = 200 ] && grep -q source_not_allowed <<<"$body" ||
  fail "1. an ingest key outside its prefix got $code: $body"
[ "$(count "SELECT count(*) FROM dedupe_keys")" = 1 ] || fail "1. the ingest key's events were not stored as expected"
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

# ---- HTTP server: raw requests over loopback ----------------------------------
# raw REQUEST: sends the bytes as they are, prints what comes back (5 s at most).
raw() {
  local host=${addr%:*} port=${addr##*:}
  trap '' PIPE
  exec 3<>"/dev/tcp/$host/$port"
  printf '%b' "$1" >&3
  timeout 5 cat <&3 || true
  exec 3<&- 3>&-
}
json_error() { grep -q "^HTTP/1.1 $2" <<<"$1" && grep -q '{"error":{"code":' <<<"$1"; }

# 8. one header byte every second, for longer than the head's deadline (2 s here)
start=$(date +%s)
trickle() {
  trap '' PIPE # the server closes first: a write then fails instead of killing us
  exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}" || return 0
  for c in G E T ' ' / h e a l t h z; do
    printf '%s' "$c" >&3 2>/dev/null || break
    sleep 1
  done
  timeout 5 cat <&3 2>/dev/null || true
  exec 3<&- 3>&-
}
slow=$( (trickle) 2>/dev/null || true)
took=$(($(date +%s) - start))
grep -q '^HTTP/1.1 408' <<<"$slow" || fail "8. a trickling request head got: $slow"
[ "$took" -le 14 ] || fail "8. a trickling request head held its connection for ${took}s"
ok "8. a request head trickling one byte a second: 408 at its deadline"

# 9. descriptors running out: tests/server/test_http_hostile.c (test_out_of_fds)

# 10. requests libevent would answer with its own HTML pages
declare -A want=(
  ["TRACE / HTTP/1.1\r\nHost: x\r\n\r\n"]=501
  ["CONNECT x:443 HTTP/1.1\r\nHost: x\r\n\r\n"]=501
  ["get /healthz HTTP/1.1\r\nHost: x\r\n\r\n"]=501
  ["GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n"]=505
  ["POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n"]=400
  ["POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"]=400
  ["GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n"]=400
)
for req in "${!want[@]}"; do
  got=$(raw "$req")
  json_error "$got" "${want[$req]}" || fail "10. $(head -c 40 <<<"$req") got: $(head -3 <<<"$got")"
done
long=$(head -c 100000 /dev/zero | tr '\0' a)
got=$(raw "GET /$long HTTP/1.1\r\nHost: x\r\n\r\n")
json_error "$got" 414 || fail "10. a 100 KB path got: $(head -3 <<<"$got")"
got=$(raw "HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
grep -q '^HTTP/1.1 200' <<<"$got" && ! grep -q '"status"' <<<"$got" ||
  fail "10. HEAD /healthz got: $got"
got=$(raw "GET http://$addr/healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
grep -q '^HTTP/1.1 200' <<<"$got" || fail "10. an absolute-form target got: $(head -3 <<<"$got")"
ok "10. TRACE, CONNECT, lowercase, HTTP/9.9, bad lengths, two Authorization headers, 100 KB path: JSON errors; HEAD and absolute-form answered"

# 11. one key flooding the quarantine
bad=$(printf '{"bad":%d},' $(seq 40))
post "$flood" /v1/events "[${bad%,}]"
[ "$code" = 200 ] || fail "11. the first 40 bad events got $code"
post "$flood" /v1/events "[${bad%,}]"
[ "$code" = 429 ] && grep -qi '^Retry-After' < <(curl -sS --max-time 10 -D - -o /dev/null \
  -H "Authorization: Bearer $flood" --data-binary "[${bad%,}]" "http://$addr/v1/events") ||
  fail "11. a key over its ingest rate got $code: $body"
flood_id=$(t apikey list | awk '/ingest/ && /\/\/flood\// {print $1}')
[ "$(count "SELECT count(*) FROM quarantine WHERE key_id = $flood_id")" = 40 ] ||
  fail "11. quarantined rows do not name the key that sent them"
ok "11. a key over its ingest rate: 429 with Retry-After; its quarantined rows name it"

# 12. smaller refusals
set +e
t apikey create --account nobody >/dev/null 2>&1
rc=$?
set -e
[ "$rc" = 2 ] || fail "12. apikey create --account for a missing account exited $rc"
code=$(curl -sS --max-time 10 -o "$work/resp" -w '%{http_code}' -H "Authorization: Bearer $admin" \
  "http://$addr/v1/accounts/acme-ai/usage?from=2024-01-01T00:00:00Z&to=2026-01-01T00:00:00Z&by=day")
[ "$code" = 400 ] && grep -q 'at most' "$work/resp" || fail "12. a 2-year report by day got $code: $(cat "$work/resp")"
t invoice run --period 2026-03 --finalize >/dev/null
inv=$(count "SELECT id FROM invoices WHERE account = 'acme-ai' AND doc_type = 'invoice' LIMIT 1")
t invoice void "$inv" --reason "replay" >/dev/null
cn=$(count "SELECT id FROM invoices WHERE doc_type = 'credit_note' LIMIT 1")
for id in "$inv" "$cn"; do
  set +e
  t invoice void "$id" --reason "again" >/dev/null 2>&1
  rc=$?
  set -e
  [ "$rc" = 2 ] || fail "12. voiding $id again exited $rc"
done
t verify >/dev/null || fail "12. verify fails after the refusals"
ok "12. a key for a missing account, a 2-year report by day, voiding a void invoice or a credit note: refused, verify passes"

# ---- 6. tampering with the ledger file, as an outsider with the sqlite3 tool ---
# tamper NAME "TRIGGER ..." SQL: on a copy of the ledger, drops the triggers in
# the way, makes the edit, recreates them with their exact text, and checks
# that tally verify fails on the copy.
tamper() {
  local name=$1 triggers=$2 sql=$3 copy="$work/tamper-$1.db" texts=
  rm -f "$copy"
  sqlite3 "$db" ".backup '$copy'"
  for trg in $triggers; do
    texts+="$(sqlite3 "$copy" "SELECT sql FROM sqlite_master WHERE name = '$trg'");"$'\n'
    sqlite3 "$copy" "DROP TRIGGER $trg"
  done
  sqlite3 "$copy" "$sql" || fail "6. $name: the edit itself failed"
  [ -z "$texts" ] || sqlite3 "$copy" "$texts"
  set +e
  out=$("$tally" --db "$copy" --key "$key" verify 2>&1)
  rc=$?
  set -e
  [ "$rc" != 0 ] || fail "6. $name passed tally verify: $out"
  echo "       $name: $(grep -m1 FAILED <<<"$out" | cut -c1-110)"
}
inv1=$(count "SELECT id FROM invoices WHERE doc_type = 'invoice' ORDER BY seq LIMIT 1")
t credit grant acme-ai 5.00 --kind goodwill >/dev/null 2>&1
t spot set rtx4090 0.90 --from 2026-03-20T00:00:00Z >/dev/null 2>&1
tamper balanced-postings "postings_no_update" \
  "UPDATE postings SET debit_minor = debit_minor - 1 WHERE debit_minor >= 1 AND ledger_acct LIKE 'receivable:%' AND entry_id = (SELECT min(entry_id) FROM postings); UPDATE postings SET credit_minor = credit_minor - 1 WHERE credit_minor >= 1 AND ledger_acct LIKE 'revenue%' AND entry_id = (SELECT min(entry_id) FROM postings)"
tamper last-invoice-deleted "invoices_no_delete invoice_lines_no_delete invoice_credits_no_delete entries_no_delete postings_no_delete outbox_no_delete" \
  "DELETE FROM invoice_lines WHERE invoice_seq = (SELECT max(seq) FROM invoices); DELETE FROM invoice_credits WHERE invoice_seq = (SELECT max(seq) FROM invoices); DELETE FROM postings WHERE entry_id IN (SELECT id FROM entries WHERE ref = (SELECT id FROM invoices ORDER BY seq DESC LIMIT 1)); DELETE FROM entries WHERE ref = (SELECT id FROM invoices ORDER BY seq DESC LIMIT 1); DELETE FROM outbox WHERE subject = 'acme-ai' AND id = (SELECT max(id) FROM outbox); DELETE FROM invoices WHERE seq = (SELECT max(seq) FROM invoices)"
tamper grant-multiplied "grants_no_update" "UPDATE grants SET amount_minor = amount_minor * 10"
tamper spot-price-edited "spot_prices_no_update" "UPDATE spot_prices SET price_nano = price_nano / 2"
tamper outbox-deleted "outbox_no_delete" "DELETE FROM outbox WHERE id = (SELECT min(id) FROM outbox)"
tamper refers-to-set "invoices_no_update" "UPDATE invoices SET refers_to = 'CN-2026-000001' WHERE id = '$inv1'"
# a rollback to an older copy of the file, caught by a saved signed head
sqlite3 "$db" ".backup '$work/older.db'"
t credit grant acme-ai 1.00 --kind goodwill >/dev/null 2>&1
t head >"$work/head.json"
set +e
out=$("$tally" --db "$work/older.db" --key "$key" verify --head "$work/head.json" 2>&1)
rc=$?
set -e
[ "$rc" != 0 ] || fail "6. an older copy of the ledger passed verify --head: $out"
t verify --head "$work/head.json" >/dev/null || fail "6. the ledger itself fails verify --head"
echo "       rollback to an older copy: $(head -1 <<<"$out" | cut -c1-110)"
ok "6. hidden edits of postings, invoices, grants, prices, outbox rows and a rollback: each named by tally verify"

# ---- 7. rotating the signing key ----------------------------------------------
t keygen --force >/dev/null 2>&1
t verify >/dev/null || fail "7. verify fails on old documents after keygen --force"
[ "$(t pubkey --all | grep -c 'BEGIN PUBLIC KEY')" -ge 2 ] || fail "7. pubkey --all does not list the old key"
ok "7. keygen --force: old documents still verify; pubkey --all lists both keys"

# ---- 17. a 10 MB message: its quarantine row keeps a bounded prefix ----------
{ printf '{"specversion":"1.0","id":"huge","pad":"'; head -c 10000000 /dev/zero | tr '\0' x; printf '"}\n'; } >"$work/huge.ndjson"
t ingest "$work/huge.ndjson" >/dev/null || fail "17. tally ingest of a 10 MB line exited $?"
want="65536 $(($(stat -c %s "$work/huge.ndjson") - 1)) $(head -c -1 "$work/huge.ndjson" | sha256sum | cut -d' ' -f1)"
row=$(count "SELECT length(raw) || ' ' || raw_size || ' ' || raw_sha256 FROM quarantine WHERE raw_size > 1000000")
[ "$row" = "$want" ] || fail "17. the 10 MB line's quarantine row is '$row', not '$want'"
ok "17. a 10 MB message: quarantined with a 64 KiB prefix, its size and SHA-256"

# ---- 13-16. the Kafka path needs the embedded broker: tests/e2e/test_kafka_hostile.c

ok "replayed every attempt in $work"
