#!/usr/bin/env bash
# What an invoice run costs as accounts age: the same accounts and usage,
# finalized for a month with ten earlier invoices each and with none.
#
#   bench/finalize_history.sh BUILD [ACCOUNTS] [ROUNDS]
#
# Writes ACCOUNTS (default 2000) accounts with one hour of a100-40g on the
# 5th of each month from January to November 2026, then two ledgers of that
# usage: h0 with no invoice, h10 with January to October finalized. Then
# `farm-bench` times the run that finalizes November on a copy of each
# (ledgers on /dev/shm), alternately, and prints its summary: h10 against
# h0 is what ten months of history add to a run.
set -euo pipefail
build=$(realpath "${1:?usage: bench/finalize_history.sh BUILD [ACCOUNTS] [ROUNDS]}")
n=${2:-2000}
rounds=${3:-8}
work=$(mktemp -d /dev/shm/tally-hist.XXXXXX)
trap 'rm -rf "$work"' EXIT
T="$build/tally"

awk -v n="$n" 'BEGIN {
  for (m = 1; m <= 11; m++)
    for (a = 0; a < n; a++)
      printf "{\"specversion\":\"1.0\",\"id\":\"h%05d-%02d\",\"source\":\"//hist/h%05d\"," \
             "\"type\":\"accelerator.usage\",\"subject\":\"acct-%05d\"," \
             "\"time\":\"2026-%02d-05T10:00:00Z\",\"data\":{\"instance\":\"i-%05d\"," \
             "\"sku\":\"a100-40g\",\"pricing\":\"on_demand\",\"cards\":1,\"seconds\":3600}}\n",
             a, m, a, a, m, a
}' >"$work/usage.ndjson"

"$T" --db "$work/h0.db" --key "$work/k.key" init >/dev/null
"$T" --db "$work/h0.db" --key "$work/k.key" keygen >/dev/null
"$T" --db "$work/h0.db" ingest "$work/usage.ndjson" >/dev/null
sqlite3 "$work/h0.db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null
cp "$work/h0.db" "$work/h10.db"
for m in 01 02 03 04 05 06 07 08 09 10; do
  next=$(printf %02d $((10#$m + 1)))
  TALLY_NOW=2026-$next-02T00:00:00Z "$T" --db "$work/h10.db" --key "$work/k.key" \
    invoice run --period "2026-$m" --finalize >/dev/null
done
sqlite3 "$work/h10.db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null

cat >"$work/run.sh" <<EOF
#!/bin/sh
# run.sh DB: finalizes November on a copy of DB
rm -f "$work/x.db"*
cp "\$1" "$work/x.db"
TALLY_NOW=2026-12-02T00:00:00Z "$T" --db "$work/x.db" --key "$work/k.key" \\
  invoice run --period 2026-11 --finalize >/dev/null
EOF
chmod +x "$work/run.sh"
echo "$n accounts, November finalized with 10 earlier invoices each (A) and with none (B)"
farm-bench -n "$rounds" --timeout 900 --vs "$work/run.sh $work/h0.db" -- "$work/run.sh" "$work/h10.db"
