#!/usr/bin/env bash
# One invoice run that finalizes every account of a prepared ledger, for
# timing with farm-bench (docs: bench/RESULTS.md, issue 15).
#
#   bench/finalize.sh BUILD SETUP WORK [out]
#
# SETUP holds bench.db and bench.key from
#   BENCH_SETUP_ONLY=1 BUILD/bench_invoice 20000 SETUP
# Each run copies bench.db to WORK (put WORK on /dev/shm to time the engine
# rather than the disk) and runs `tally invoice run --period 2026-03
# --finalize`, with `--out WORK/out` when the fourth argument is out.
set -euo pipefail
build=$1 setup=$2 work=$3 out=${4:-}
rm -rf "$work"
mkdir -p "$work"
cp "$setup/bench.db" "$work/bench.db"
args=(--db "$work/bench.db" --key "$setup/bench.key" invoice run --period 2026-03 --finalize)
[ "$out" = out ] && args+=(--out "$work/out")
TALLY_NOW=2026-04-02T00:00:00Z "$build/tally" "${args[@]}" > /dev/null
