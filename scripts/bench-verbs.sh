#!/usr/bin/env bash
# Measures the userspace verbs provider against raw UDP in one run:
#   - header-only UD SEND_WITH_IMM echo (64-packet batches, 256 in flight)
#     through verbs/soft, and the same exchange of 28-byte datagrams over
#     raw UDP sockets with GSO and GRO;
#   - ping-pong round-trip time for both.
# The benchmarks are interleaved ROUNDS times and the median of each is
# reported, because these machines are shared and noisy. The last line is
#   soft_mpps=<x> raw_mpps=<y> soft_rtt_us=<a> raw_rtt_us=<b>
# where mpps is millions of request/response round trips per second.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-7}
BENCHTIME=${BENCHTIME:-2s}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/soft.test" ./verbs/soft/
for i in $(seq "$ROUNDS"); do
  for b in EchoSoft EchoRaw PingPongSoft PingPongRaw; do
    "$tmp/soft.test" -test.run '^$' -test.bench "^Benchmark$b\$" -test.benchtime "$BENCHTIME" -test.benchmem \
      | grep '^Benchmark' | tee -a "$tmp/out"
  done
done
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }
metric() { grep "^Benchmark$1-" "$tmp/out" | awk -v u="$2" '{for (i=1;i<NF;i++) if ($(i+1)==u) print $i}' | median; }
echo "soft_mpps=$(metric EchoSoft Mops) raw_mpps=$(metric EchoRaw Mops) soft_rtt_us=$(metric PingPongSoft rtt_us) raw_rtt_us=$(metric PingPongRaw rtt_us)"
