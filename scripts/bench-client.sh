#!/usr/bin/env bash
# Measures the product end to end next to the transport, in one run: the
# client library against an in-process seqd (Spec-S0 over the userspace
# provider): serial GetTimestamp latency and pipelined throughput with W
# outstanding; and the provider's header-only echo and raw UDP GSO/GRO
# echo and ping-pong. Interleaved ROUNDS times; medians reported. The last
# line is
#   client_rtt_us=<a> client_mops=<b> soft_mpps=<c> raw_mpps=<d> soft_rtt_us=<e> raw_rtt_us=<f>
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
BENCHTIME=${BENCHTIME:-2s}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/client.test" ./client/
go test -c -o "$tmp/soft.test" ./verbs/soft/
for i in $(seq "$ROUNDS"); do
  for b in GetTimestamp Pipelined; do
    "$tmp/client.test" -test.run '^$' -test.bench "^Benchmark$b\$" -test.benchtime "$BENCHTIME" -test.benchmem 2>/dev/null \
      | grep '^Benchmark' | tee -a "$tmp/out"
  done
  for b in EchoSoft EchoRaw PingPongSoft PingPongRaw; do
    "$tmp/soft.test" -test.run '^$' -test.bench "^Benchmark$b\$" -test.benchtime "$BENCHTIME" -test.benchmem \
      | grep '^Benchmark' | tee -a "$tmp/out"
  done
done
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }
metric() { grep "^Benchmark$1-" "$tmp/out" | awk -v u="$2" '{for (i=1;i<NF;i++) if ($(i+1)==u) print $i}' | median; }
rtt=$(metric GetTimestamp ns/op | awk '{printf "%.2f", $1/1000}')
echo "client_rtt_us=$rtt client_mops=$(metric Pipelined Mops) soft_mpps=$(metric EchoSoft Mops) raw_mpps=$(metric EchoRaw Mops) soft_rtt_us=$(metric PingPongSoft rtt_us) raw_rtt_us=$(metric PingPongRaw rtt_us)"
