#!/usr/bin/env bash
# Measures the product end to end next to the transport, in one run: the
# client library against a seqd in another process (Spec-S0 over the
# userspace provider): serial GetTimestamp latency and pipelined
# throughput with W outstanding, with the client process's CPU time per
# call; and the provider's header-only echo and raw UDP GSO/GRO echo and
# ping-pong. Interleaved ROUNDS times; medians reported. Then (unless
# SPECMISS=0) the speculation miss rate per window, without and with the
# rollover prediction (BenchmarkSpecMisses, misses/op). The last line is
#   client_rtt_us=<a> client_mops=<b> soft_mpps=<c> raw_mpps=<d> soft_rtt_us=<e> raw_rtt_us=<f> rtt_ratio=<r> rtt_ratios=<r1,r2,...> client_cpu_ns=<g> srv_cpu_ns=<s> cpu_ratio=<q> csw_per_call=<w> sys_per_call=<y> serial_cpu_ns=<h> ...
# where rtt_ratio is the median over rounds of the round's serial mean
# over the mean of its two raw ping-pongs, run just before and just after
# it (A-B-A: a drift within the round cancels, and neither side always
# runs first; rtt_ratios lists them; p50_ratio likewise for the medians,
# procs_ratio and procs_p50_ratio against the two-process ping-pong). client_cpu_ns is the client
# process's CPU time (user+system) per pipelined call, serial_cpu_ns per
# serial call; srv_cpu_ns is seqd's CPU time per pipelined call over the
# same run and cpu_ratio the median over rounds of the round's client CPU
# per call over seqd's (the pipelined run; on Linux, where seqd's CPU is
# read from /proc). seqd is not saturated by one client: its CPU per call
# includes its polling while it waits for requests, which a saturated
# server (make bench-server) does not pay. csw_per_call and sys_per_call
# are the client's context switches and provider syscalls per pipelined
# call.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
BENCHTIME=${BENCHTIME:-2s}
SPECMISS=${SPECMISS:-1}
tmp=$(mktemp -d)
seqd_pid=
cleanup() {
  if [ -n "$seqd_pid" ]; then kill "$seqd_pid" 2>/dev/null || true; wait "$seqd_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
go test -c -o "$tmp/client.test" ./client/
go test -c -o "$tmp/soft.test" ./verbs/soft/
go build -o "$tmp/seqd" ./cmd/seqd
port=$((20000 + RANDOM % 20000))
"$tmp/seqd" -device 127.0.0.1:0 -admin "127.0.0.1:$port" -metrics off -data "$tmp/data" -init >"$tmp/seqd.log" 2>&1 &
seqd_pid=$!
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done
export SEQD_BENCH_ADMIN="127.0.0.1:$port"
# The benchmarks read the server's CPU time over each run from /proc
# (srv_cpu_ns/op, and cpu_ratio: the client's CPU per call over the
# server's, same run).
export SEQD_BENCH_PID="$seqd_pid"
# field prints the value before unit on the line of benchmark b in file f.
field() { grep "^Benchmark$1-" "$2" | awk -v u="$3" '{for (i=1;i<NF;i++) if ($(i+1)==u) print $i}'; }
# pair appends to $tmp/<file> this round's GetTimestamp <unit> (divided
# by scale) over the mean of <bench>'s <bunit> in the round (its runs
# before and after GetTimestamp).
pair() {
  awk -v a="$(field GetTimestamp "$tmp/round" "$2")" -v s="$3" -v b="$(field "$4" "$tmp/round" "$5" | awk '{t += $1} END {print t / NR}')" \
    'BEGIN {printf "%.3f\n", a/s/b}' >>"$tmp/$1"
}
client() { "$tmp/client.test" -test.run '^$' -test.bench "^Benchmark$1\$" -test.benchtime "$BENCHTIME" -test.benchmem 2>/dev/null | grep '^Benchmark'; }
soft() { "$tmp/soft.test" -test.run '^$' -test.bench "^Benchmark$1\$" -test.benchtime "$BENCHTIME" -test.benchmem | grep '^Benchmark'; }
for i in $(seq "$ROUNDS"); do
  # The serial call between two runs of each raw ping-pong: on a shared
  # machine the speed changes from minute to minute, so each round's
  # ratio compares like with like (A-B-A), and the ratios' median is
  # reported.
  : >"$tmp/round"
  soft PingPongRaw | tee -a "$tmp/round"
  soft PingPongRawProcs | tee -a "$tmp/round"
  client GetTimestamp | tee -a "$tmp/round"
  soft PingPongRaw | tee -a "$tmp/round"
  soft PingPongRawProcs | tee -a "$tmp/round"
  client Pipelined | tee -a "$tmp/round"
  for b in EchoSoft EchoRaw PingPongSoft; do
    soft "$b" | tee -a "$tmp/round"
  done
  cat "$tmp/round" >>"$tmp/out"
  # GetTimestamp's mean is its ns/op; the ping-pongs report µs.
  pair ratios ns/op 1000 PingPongRaw rtt_us
  pair p50ratios p50_us 1 PingPongRaw p50_us
  pair procsratios ns/op 1000 PingPongRawProcs rtt_us
  pair procsp50ratios p50_us 1 PingPongRawProcs p50_us
done
if [ "$SPECMISS" != 0 ]; then
  "$tmp/client.test" -test.run '^$' -test.bench '^BenchmarkSpecMisses$' -test.benchtime 20000x 2>/dev/null | grep '^Benchmark'
fi
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }
metric() { field "$1" "$tmp/out" "$2" | median; }
rtt=$(metric GetTimestamp ns/op | awk '{printf "%.2f", $1/1000}')
raw=$(metric PingPongRaw rtt_us)
paired() { median <"$tmp/$1" | awk '{printf "%.2f", $1}'; }
ratio=$(paired ratios)
ratios=$(paste -sd, "$tmp/ratios")
p50=$(metric GetTimestamp p50_us)
rawp50=$(metric PingPongRaw p50_us)
p50ratio=$(paired p50ratios)
procs=$(metric PingPongRawProcs rtt_us)
procsp50=$(metric PingPongRawProcs p50_us)
procsratio=$(paired procsratios)
procsp50ratio=$(paired procsp50ratios)
echo "client_rtt_us=$rtt client_mops=$(metric Pipelined Mops) soft_mpps=$(metric EchoSoft Mops) raw_mpps=$(metric EchoRaw Mops) soft_rtt_us=$(metric PingPongSoft rtt_us) raw_rtt_us=$raw rtt_ratio=$ratio rtt_ratios=$ratios client_cpu_ns=$(metric Pipelined cpu_ns/op) srv_cpu_ns=$(metric Pipelined srv_cpu_ns/op) cpu_ratio=$(metric Pipelined cpu_ratio) csw_per_call=$(metric Pipelined csw/op) sys_per_call=$(paste -d' ' <(field Pipelined "$tmp/out" rxsys/op) <(field Pipelined "$tmp/out" txsys/op) | awk '{print $1 + $2}' | median) serial_cpu_ns=$(metric GetTimestamp cpu_ns/op) client_p50_us=$p50 raw_p50_us=$rawp50 p50_ratio=$p50ratio procs_rtt_us=$procs procs_ratio=$procsratio procs_p50_us=$procsp50 procs_p50_ratio=$procsp50ratio"
