#!/usr/bin/env bash
# Drives loadgen -verify against a spawned seqd in every mode while the
# userspace provider injects faults (loss 1e-3, 1e-2, 1e-1, reordering,
# duplication) on the clients' and the server's transmits, and prints one
# table: throughput and p99 per fault setting per mode, and the verifier's
# violations. Exits non-zero if any run reports a violation or fails.
#
#   scripts/lossy.sh [DURATION]      (default 3s measured per mode and rate)
#
# Env: LOSSY_MODES (default spec-s0,herd,atomics), LOSSY_CLIENTS (2),
# LOSSY_FAULTS (space-separated provider option sets; "none" = clean).
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-3s}
modes=${LOSSY_MODES:-spec-s0,herd,atomics}
clients=${LOSSY_CLIENTS:-2}
faults=${LOSSY_FAULTS:-"none loss=0.001 loss=0.01 loss=0.1 reorder=0.05 dup=0.05 loss=0.01,dup=0.01,reorder=0.01"}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CGO_ENABLED=0 go build -o "$tmp/" ./cmd/seqd ./cmd/loadgen

rc=0
printf '%-34s %-8s %10s %10s %10s %11s\n' faults mode "Mops/s" "p50 µs" "p99 µs" violations >"$tmp/table"
for f in $faults; do
  opts=$f
  [ "$f" = none ] && opts=
  set +e
  "$tmp/loadgen" -spawn -seqd-binary "$tmp/seqd" -modes "$modes" -clients "$clients" \
    -provider-opts "$opts" -duration "$dur" -warmup 500ms -echo=-1ns -verify -quiet >"$tmp/out" 2>"$tmp/err"
  code=$?
  set -e
  viol=$(sed -n 's/^verification: .*, \([0-9]*\) violations.*/\1/p' "$tmp/out")
  if [ "$code" -ne 0 ] || [ -z "$viol" ] || [ "$viol" != 0 ]; then
    echo "== faults=$f: loadgen exit $code, violations '${viol:-?}'" >&2
    cat "$tmp/out" "$tmp/err" >&2
    rc=1
  fi
  # Table rows: mode clients window Mops/s p50 p90 p99 ...
  awk -v f="$f" -v v="${viol:-?}" '$1 ~ /^(spec-s0|herd|atomics)$/ {
      printf "%-34s %-8s %10s %10s %10s %11s\n", f, $1, $4, $5, $7, v }' "$tmp/out" >>"$tmp/table"
done
echo "loadgen -spawn -modes $modes -clients $clients -duration $dur -verify, faults injected by the soft provider on every transmit (clients and seqd):"
cat "$tmp/table"
exit $rc
