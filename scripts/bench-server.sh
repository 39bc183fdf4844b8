#!/usr/bin/env bash
# Measures the server, not the client: loadgen's lean wire-level
# generator (loadgen -engine wire) drives, for 1, 64 and 1024 flows, the
# provider's header-only echo server, a raw UDP GSO/GRO echo and seqd
# (Spec-S0, then herd; one worker: seqd's default), each pinned to SERVER_CORE while the generator
# runs on GEN_CORE, interleaved per flow count; then Redis INCR (-c 50
# -P 64) when redis-server is installed. It prints loadgen's table (with
# the server's user and kernel ns per request) and ends with one line per
# flow count:
#   seqd_mops=<a> floor_mops=<b> ratio=<a/b> flows=<n>
# where the floor is the provider's echo server at that flow count.
# About a minute with the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
FLOWS=${FLOWS:-1,64,1024}
MODES=${MODES:-spec-s0,herd}
DURATION=${DURATION:-2s}
WARMUP=${WARMUP:-500ms}
SERVER_CORE=${SERVER_CORE:-1}
GEN_CORE=${GEN_CORE:-0}
if [ "$(nproc)" -lt 2 ]; then
  SERVER_CORE=-1
  GEN_CORE=
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/seqd" ./cmd/seqd
go build -o "$tmp/loadgen" ./cmd/loadgen
args=(-engine wire -spawn -seqd "$tmp/seqd" -server-core "$SERVER_CORE" -flows "$FLOWS" -modes "$MODES"
  -duration "$DURATION" -warmup "$WARMUP" -json "$tmp/bench-server.json")
if [ "$SERVER_CORE" -ge 0 ]; then
  args+=(-seqd-cores "$SERVER_CORE")
fi
if [ -n "$GEN_CORE" ]; then
  args+=(-cores "$GEN_CORE")
fi
echo "+ loadgen ${args[*]}" >&2
# Progress (stderr) and the table (stdout) in one stream, in order: the
# table, and with it the seqd_mops lines, come last.
"$tmp/loadgen" "${args[@]}" 2>&1 | grep -v 'admin plane'
cp "$tmp/bench-server.json" "${BENCH_SERVER_JSON:-/dev/null}" 2>/dev/null || true
