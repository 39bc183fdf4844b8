#!/usr/bin/env bash
# The eRPC mode's experiments (issue 30; thesis chapter 6), each figure a
# ratio to a reference measured in the same run, ROUNDS rounds, medians
# reported:
#
#  1. Latency (Table 6.1): serial GetTimestamp (client BenchmarkGetTimestamp,
#     as make bench-client runs it) against a seqd in mode erpc and one
#     in spec-s0 (two seqd processes, userspace provider, loopback), and
#     the raw UDP ping-pong in one process (PingPongRaw) and between two
#     (PingPongRawProcs). Each round runs raw, then both modes (their
#     order alternating by round), then raw again (A-B-A): a ratio is the
#     mode's median (p99) over the mean of the round's two raw runs, or
#     over spec-s0's in the same round.
#  2. Loss (Table 6.3): client BenchmarkERPCLoss, loss 1e-6..1e-2 and
#     0.3 injected on every transmit of seqd and of the client; each
#     rate's throughput over the mean of the lossless runs just before
#     and after it (same round), p99, request packets resent per 1,000
#     calls, violations (unique, increasing, at-most-once at the client
#     and at the server: must be 0; the benchmark fails otherwise).
#  3. No false congestion: client BenchmarkERPCTimely, congestion
#     control off and on over loopback with no bottleneck: throughput
#     on/off, Timely's samples and updates, how many samples lowered a
#     session's rate, the lowest rate and the rate histogram (the
#     samples by the rate they left). In one process (the server's 2
#     workers and the client on the same 2 cores), and "procs": client
#     BenchmarkERPCTimelyProcs on core 0 against a seqd in mode erpc
#     with one worker on core 1, as eRPC's client and server ran.
#  4. Factor analysis, the client's side (Table 6.2): client
#     BenchmarkERPCFactors, pipelined, congestion control off, on, and
#     on with each optimization off in turn (the clock read once per
#     engine step, Timely's T_low bypass, the wheel bypass): Mops as a
#     ratio to cc=on in the same round; and the server's side: erpc
#     BenchmarkBatchFactors, its burst path with zero-copy receive and
#     preallocated answers each off in turn, as a ratio to all on.
#  5. Sessions (§6.5.3; PARTS=sessions, not run by default): a seqd in
#     mode erpc with one worker on core 1, loadgen's wire generator on
#     core 0: SESSIONS session endpoints of C credits each (CREDITS),
#     from SOURCES client addresses, with C requests in flight over all
#     of them (as one session of C credits has: the sessions take turns),
#     with the echo floors at the same flows, then with INFLIGHT. Per
#     point: Mops, its ratio to the provider's echo, p50/p99/p99.99, what
#     admitting them took and seqd's resident memory per session; then
#     the Connect refused one step past the credit limit. Each point's
#     Mops is also given over the one-session point's of the same run.
#  6. Incast (Table 6.4; PARTS=incast, not run by default; root): the
#     multi-host rig's TestERPCIncast, INCAST_CLIENTS (20,50,100) clients
#     of mode erpc on 4 hosts into one seqd whose link is a tc tbf of
#     INCAST_MBIT (20 Mbit/s), congestion control off then on, with a
#     latency probe: the clients' p50/p99, the probe's, throughput,
#     retransmissions, and what went through the bottleneck and what it dropped.
#
#   scripts/bench-erpc.sh        Env: ROUNDS (3), BENCHTIME (1s),
#                                PARTS ("latency loss timely factors"),
#                                for sessions: SESSIONS, CREDITS,
#                                SOURCES, INFLIGHT, DURATION; for
#                                incast: INCAST_CLIENTS, INCAST_MBIT,
#                                DURATION (5s)
#
# A run that fails (a violation, or a transport that broke) is left out
# of the medians and its message printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
BENCHTIME=${BENCHTIME:-1s}
PARTS=${PARTS:-"latency loss timely factors"}
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
go test -c -o "$tmp/client.test" ./client/
go test -c -o "$tmp/soft.test" ./verbs/soft/
go test -c -o "$tmp/erpc.test" ./erpc/
go build -o "$tmp/seqd" ./cmd/seqd

# seqd MODE [flags...] starts a seqd in MODE; addr is its admin address.
seqd() { # MODE [flags...]: a data directory and a log of its own each
  local port=$((20000 + RANDOM % 20000))
  "$tmp/seqd" -mode "$1" -device 127.0.0.1:0 -admin "127.0.0.1:$port" -metrics off -data "$tmp/data-$1-$port" -init "${@:2}" >"$tmp/seqd-$1-$port.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
  addr="127.0.0.1:$port"
}
# val FILE NAME UNIT prints the value before UNIT on the line of
# benchmark NAME (without Benchmark and the -GOMAXPROCS suffix) in FILE.
val() {
  awk -v n="Benchmark$2" -v u="$3" '{name = $1; sub(/-[0-9]+$/, "", name)} name == n {for (i = 2; i < NF; i++) if ($(i+1) == u) print $i}' "$1"
}
median() { awk '$1 != "-" && $1 != ""' | sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "-"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
mean() { awk '{t += $1} END {if (NR) print t / NR}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "" || b == "" || b == 0) print "-"; else printf "%.3f\n", a / b}'; }
fmt() { awk -v x="$1" -v f="$2" 'BEGIN {if (x == "-" || x == "") print "-"; else printf f "\n", x}'; }
bench() { # BINARY REGEX [args...]: the benchmark lines (stdout only: seqd's logs go to stderr)
  local bin=$1 re=$2
  shift 2
  "$tmp/$bin.test" -test.run '^$' -test.bench "$re" -test.benchtime "$BENCHTIME" -test.benchmem "$@" 2>/dev/null >"$tmp/raw" || true
  # A failed benchmark prints --- FAIL and its message: keep them.
  grep -A3 -- '--- FAIL' "$tmp/raw" | grep -v '^Benchmark.*INFO\|^20[0-9][0-9]/' >>"$tmp/failures" || true
  grep '^Benchmark' "$tmp/raw" || true
}

if [[ " $PARTS " == *" latency "* ]]; then
  seqd spec-s0
  s0=$addr
  seqd erpc
  er=$addr
  : >"$tmp/lat"
  for i in $(seq "$ROUNDS"); do
    r="$tmp/lat-$i"
    : >"$r"
    bench soft '^BenchmarkPingPongRaw$' | tee -a "$r"
    bench soft '^BenchmarkPingPongRawProcs$' | tee -a "$r"
    order="spec-s0 erpc"
    [ $((i % 2)) = 0 ] && order="erpc spec-s0"
    for m in $order; do
      addr=$s0
      [ "$m" = erpc ] && addr=$er
      SEQD_BENCH_ADMIN=$addr bench client '^BenchmarkGetTimestamp$' | sed "s/^BenchmarkGetTimestamp/BenchmarkGetTimestamp\/$m/" | tee -a "$r"
    done
    bench soft '^BenchmarkPingPongRaw$' | tee -a "$r"
    bench soft '^BenchmarkPingPongRawProcs$' | tee -a "$r"
    for q in p50 p99; do
      raw=$(val "$r" PingPongRaw "${q}_us" | mean)
      procs=$(val "$r" PingPongRawProcs "${q}_us" | mean)
      e=$(val "$r" GetTimestamp/erpc "${q}_us")
      s=$(val "$r" GetTimestamp/spec-s0 "${q}_us")
      echo "$q $e $s $raw $procs $(ratio "$e" "$raw") $(ratio "$e" "$procs") $(ratio "$e" "$s") $(ratio "$s" "$raw")" >>"$tmp/lat"
    done
  done
  col() { awk -v q="$1" -v c="$2" '$1 == q {print $c}' "$tmp/lat" | median; }
  echo
  echo "Table 6.1 (latency, µs; ratios: median over $ROUNDS rounds of the round's ratio)"
  echo "| | erpc | spec-s0 | raw UDP ping-pong, 1 process | raw, 2 processes | erpc / raw | erpc / raw 2 procs | erpc / spec-s0 | spec-s0 / raw |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for q in p50 p99; do
    echo "| $q | $(fmt "$(col $q 2)" %.1f) | $(fmt "$(col $q 3)" %.1f) | $(fmt "$(col $q 4)" %.1f) | $(fmt "$(col $q 5)" %.1f) | $(col $q 6) | $(col $q 7) | $(col $q 8) | $(col $q 9) |"
  done
  rounds() { awk -v q="$1" -v c="$2" '$1 == q {print $c}' "$tmp/lat" | paste -sd, -; }
  echo "per round: erpc/spec-s0 p50 $(rounds p50 8), p99 $(rounds p99 8); erpc/raw p50 $(rounds p50 6), p99 $(rounds p99 6)"
  for m in erpc spec-s0; do
    echo "$m per serial call (medians): context switches $(cat "$tmp"/lat-* | val /dev/stdin "GetTimestamp/$m" csw/op | median), receive syscalls $(cat "$tmp"/lat-* | val /dev/stdin "GetTimestamp/$m" rxsys/op | median), client CPU ns $(cat "$tmp"/lat-* | val /dev/stdin "GetTimestamp/$m" cpu_ns/op | median)"
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  pids=()
fi

if [[ " $PARTS " == *" loss "* ]]; then
  : >"$tmp/loss"
  points="1e-06 1e-05 0.0001 0.001 0.01 0.3"
  for i in $(seq "$ROUNDS"); do
    r="$tmp/loss-$i"
    bench client '^BenchmarkERPCLoss$' | tee "$r"
    # The references: loss=0/ref0 .. ref6, one between each two loss
    # rates; each rate's ratio is to the mean of its two neighbours.
    k=0
    for p in $points; do
      ref=$( (val "$r" "ERPCLoss/loss=0/ref$k" Mops; val "$r" "ERPCLoss/loss=0/ref$((k + 1))" Mops) | mean)
      m=$(val "$r" "ERPCLoss/loss=$p" Mops)
      v=$(val "$r" "ERPCLoss/loss=$p" violations)
      echo "$p ${m:--} ${ref:--} $(ratio "$m" "$ref") $(val "$r" "ERPCLoss/loss=$p" p99_us) $(val "$r" "ERPCLoss/loss=$p" retx/kcall) ${v:-failed}" >>"$tmp/loss"
      k=$((k + 1))
    done
    for k in 0 1 2 3 4 5 6; do
      echo "0 $(val "$r" "ERPCLoss/loss=0/ref$k" Mops) - - $(val "$r" "ERPCLoss/loss=0/ref$k" p99_us) $(val "$r" "ERPCLoss/loss=0/ref$k" retx/kcall) $(val "$r" "ERPCLoss/loss=0/ref$k" violations)" >>"$tmp/loss"
    done
  done
  col() { awk -v p="$1" -v c="$2" '$1 == p && $c != "-" && $c != "" {print $c}' "$tmp/loss" | median; }
  viol() { awk -v p="$1" '$1 == p {if ($7 == "failed" || $7 == "") m++; else t += $7} END {print t + 0 (m ? " (" m " runs failed)" : "")}' "$tmp/loss"; }
  echo
  echo "Table 6.3 (loss both ways; medians over $ROUNDS rounds; each rate's reference: the lossless runs just before and after it)"
  echo "| loss | Mops | lossless Mops (its neighbours) | throughput / lossless | p99 µs | resent / 1k calls | violations |"
  echo "|---|---|---|---|---|---|---|"
  for p in 0 $points; do
    echo "| $p | $(fmt "$(col $p 2)" %.3f) | $(fmt "$(col $p 3)" %.3f) | $(col $p 4) | $(fmt "$(col $p 5)" %.0f) | $(fmt "$(col $p 6)" %.2f) | $(viol $p) |"
  done
  echo "per round, throughput / lossless: $(for p in $points; do echo -n "$p: $(awk -v p="$p" '$1 == p {print $4}' "$tmp/loss" | paste -sd, -); "; done)"
fi

if [[ " $PARTS " == *" timely "* ]]; then
  : >"$tmp/timely"
  # The server of "procs": one worker, pinned to core 1 (seqd -cores).
  seqd erpc -workers 1 -cores 1
  procs=$addr
  for i in $(seq "$ROUNDS"); do
    bench client '^BenchmarkERPCTimely$' | tee "$tmp/timely-$i"
    { SEQD_BENCH_ADMIN=$procs taskset -c 0 "$tmp/client.test" -test.run '^$' -test.bench '^BenchmarkERPCTimelyProcs$' \
      -test.benchtime "$BENCHTIME" 2>/dev/null || true; } | grep '^Benchmark' |
      sed 's/^BenchmarkERPCTimelyProcs/BenchmarkERPCTimely\/procs/' | tee -a "$tmp/timely-$i"
    cat "$tmp/timely-$i" >>"$tmp/timely"
    for l in pipelined serial procs; do
      ratio "$(val "$tmp/timely-$i" "ERPCTimely/$l/cc=on" Mops)" "$(val "$tmp/timely-$i" "ERPCTimely/$l/cc=off" Mops)" >>"$tmp/timely-ratio-$l"
    done
  done
  on() { fmt "$(val "$tmp/timely" "ERPCTimely/$1/cc=on" "$2" | median)" %.4g; }
  echo
  echo "No false congestion (CC on, loopback, no bottleneck; medians over $ROUNDS rounds)"
  echo "| load | CC on / off Mops | RTT samples | bypassed (< T_low) | updates | samples ≥ T_low | samples that lowered the rate | lowest rate / line | at line rate | 50-100 % | 10-50 % | 1-10 % | < 1 % of line |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  for l in pipelined serial procs; do
    echo "| $l | $(median <"$tmp/timely-ratio-$l") | $(on $l samples) | $(on $l bypassed) | $(on $l updates) | $(on $l above_Tlow) | $(on $l lowered) | $(on $l min_rate_frac) | $(on $l rate_line_%) % | $(on $l rate_50-100_%) % | $(on $l rate_10-50_%) % | $(on $l rate_1-10_%) % | $(on $l rate_lt1_%) % |"
  done
  echo "(pipelined: 2 sessions of 8 credits kept full; serial: 1 session, one call at a time; both in one process with a server of 2 workers. procs: 16 callers on 2 sessions, client on core 0, seqd with one worker on core 1. Rate histogram: the samples by the rate they left)"
fi
if [[ " $PARTS " == *" factors "* ]]; then
  variants="cc=off cc=off/batched_clock=off cc=on/batched_clock=off cc=on/timely_bypass=off cc=on/wheel_bypass=off"
  : >"$tmp/factors"
  : >"$tmp/sfactors"
  for i in $(seq "$ROUNDS"); do
    bench client '^BenchmarkERPCFactors$' | tee "$tmp/factors-$i"
    cat "$tmp/factors-$i" >>"$tmp/factors"
    ref=$(val "$tmp/factors-$i" "ERPCFactors/cc=on" Mops)
    for v in $variants; do
      ratio "$(val "$tmp/factors-$i" "ERPCFactors/$v" Mops)" "$ref" >>"$tmp/factor-${v//\//_}"
    done
    bench erpc '^BenchmarkBatchFactors$' | tee "$tmp/sfactors-$i"
    cat "$tmp/sfactors-$i" >>"$tmp/sfactors"
    ref=$(val "$tmp/sfactors-$i" "BatchFactors/all_on" Mops)
    for v in zero_copy=off prealloc=off; do
      ratio "$(val "$tmp/sfactors-$i" "BatchFactors/$v" Mops)" "$ref" >>"$tmp/sfactor-$v"
    done
  done
  echo
  echo "Factor analysis, client side (Table 6.2; pipelined, 2 sessions of 8 credits, loopback; medians over $ROUNDS rounds)"
  echo "| variant | Mops | / cc=on, same round |"
  echo "|---|---|---|"
  echo "| cc=on (every optimization) | $(fmt "$(val "$tmp/factors" ERPCFactors/cc=on Mops | median)" %.3f) | 1 |"
  for v in $variants; do
    echo "| $v | $(fmt "$(val "$tmp/factors" "ERPCFactors/$v" Mops | median)" %.3f) | $(median <"$tmp/factor-${v//\//_}") |"
  done
  echo
  echo "Factor analysis, server side (Table 6.2; the burst path on a null device, 32 flows of 8 fresh requests, one core; medians over $ROUNDS rounds)"
  echo "| variant | Mops | / every optimization, same round | bytes allocated per request |"
  echo "|---|---|---|---|"
  echo "| every optimization | $(fmt "$(val "$tmp/sfactors" BatchFactors/all_on Mops | median)" %.3f) | 1 | $(val "$tmp/sfactors" BatchFactors/all_on B/op | median) B |"
  for v in zero_copy=off prealloc=off; do
    echo "| $v | $(fmt "$(val "$tmp/sfactors" "BatchFactors/$v" Mops | median)" %.3f) | $(median <"$tmp/sfactor-$v") | $(val "$tmp/sfactors" "BatchFactors/$v" B/op | median) B |"
  done
fi
if [[ " $PARTS " == *" sessions "* ]]; then
  SESSIONS=${SESSIONS:-"1 100 1000 5000 20000"}
  CREDITS=${CREDITS:-"1 8 32"}
  SOURCES=${SOURCES:-16}
  INFLIGHT=${INFLIGHT:-256}
  DURATION=${DURATION:-2s}
  go build -o "$tmp/loadgen" ./cmd/loadgen
  # budget: one worker's posted receives admit 32768 - 32768/8 credits
  # (erpc.DefaultRecvQueue); the socket's receive buffer must hold them
  # too (about 2.2 KB each, as the kernel charges a small datagram; it
  # grants twice what is asked).
  budget=28672
  max=0
  for n in $SESSIONS; do [ "$n" -gt "$max" ] && max=$n; done
  echo
  echo "Sessions (§6.5.3): one erpc worker on core 1, the wire generator on core 0, sessions from $SOURCES client addresses"
  echo "| credits C | sessions | in flight | Mops | / 1 session, same run | / provider echo, same flows | seqd CPU ns/req | generator busy | p50 µs | p99 µs | p99.99 µs | lost | violations | admitted in | sessions/s | seqd RSS per session |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  for c in $CREDITS; do
    fit=$((budget / c))
    rcvbuf=$(( budget * 1200 + (4 << 20) )) # so that the posted receives are the limit
    port=$((20000 + RANDOM % 20000))
    taskset -c 1 "$tmp/seqd" -mode erpc -workers 1 -device 127.0.0.1:0 -admin "127.0.0.1:$port" -metrics off -data "$tmp/data-sessions-$c" -init \
      -provider-opts "rcvbuf=$rcvbuf" -max-clients $(( (max > fit ? max : fit) + 64 )) -max-window "$c" -max-session-recv -1 \
      -peer-max-sessions -1 -peer-max-recv -1 -peer-connect-rate -1 -identity-max-sessions -1 -identity-max-recv -1 -identity-connect-rate -1 \
      >"$tmp/seqd-sessions-$c.log" 2>&1 &
    spid=$!
    pids+=("$spid")
    for _ in $(seq 100); do
      (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
      sleep 0.1
    done
    ns=""
    for n in $SESSIONS; do [ "$n" -le "$fit" ] && ns="$ns,$n"; done
    ns=${ns#,}
    # A session has 8 slots (spec.ERPCSlots): at most 8 requests in flight
    # whatever its credits.
    slots=$((c < 8 ? c : 8))
    for inflight in "$slots" "$INFLIGHT"; do
      [ "$inflight" = "$slots" ] || [ "$INFLIGHT" -gt "$slots" ] || continue
      floors=-no-floors # the floors at C in flight: the same generator, flows and kernel path, no session state
      [ "$inflight" = "$slots" ] && floors=-server-core=1
      "$tmp/loadgen" -engine wire -modes erpc -admin "127.0.0.1:$port" -flows "$ns" -flow-window "$c" -inflight "$inflight" \
        -wire-sources "$SOURCES" "$floors" -no-redis -server-pid "$spid" -cores 0 -duration "$DURATION" -warmup 500ms -quiet \
        -json-file "$tmp/sessions.json" >"$tmp/sessions.out" 2>&1 || { echo "loadgen failed (C=$c, in flight $inflight):"; tail -5 "$tmp/sessions.out"; continue; }
      python3 - "$tmp/sessions.json" "$c" "$inflight" "$slots" <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
rows = [w for w in rep.get("wire") or [] if w["server"] == "seqd"]
one = next((w["mops"] for w in rows if w["flows"] == 1), 0)
for w in rows:
    rel = "%.3f" % (w["mops"] / one) if one else "-"
    adm = w.get("admit_seconds", 0)
    rate = "%.0f" % (w["flows"] / adm) if adm else "-"
    # RSS growth is Go's heap too: meaningful only for many sessions.
    mem = "%.0f B" % w["server_bytes_per_flow"] if w.get("server_bytes_per_flow") and w["flows"] >= 1000 else "-"
    cpu = w.get("server_user_ns_per_req", 0) + w.get("server_sys_ns_per_req", 0)
    echo = "%.3f" % w["of_provider_echo"] if w.get("of_provider_echo") else "-"
    print("| %s | %d | %d | %.3f | %s | %s | %.0f | %.0f%% | %.1f | %.1f | %.1f | %d | %d | %.3f s | %s | %s |" % (sys.argv[2], w["flows"], min(int(sys.argv[3]), w["flows"] * int(sys.argv[4])),
        w["mops"], rel, echo, cpu, 100 * w.get("gen_busy", 0), w["p50_us"], w["p99_us"], w["p9999_us"], w["lost"], w["violations"], adm, rate, mem))
PY
    done
    # One step past the credit limit: the Connect that does not fit is refused.
    over=$((fit + 16))
    if "$tmp/loadgen" -engine wire -modes erpc -admin "127.0.0.1:$port" -flows "$over" -flow-window "$c" -wire-sources "$SOURCES" \
      -no-floors -no-redis -duration 200ms -warmup 100ms -quiet >"$tmp/refused.out" 2>&1; then
      echo "C=$c: $over sessions were all admitted, past the credit limit of $fit"
    else
      echo "C=$c, $over sessions (limit $fit): $(grep -o 'desc = .*' "$tmp/refused.out" | head -1)"
    fi
    kill "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
  done
fi
if [ -s "$tmp/failures" ]; then
  echo
  echo "failed runs (left out of the medians):"
  cat "$tmp/failures"
fi

if [[ " $PARTS " == *" incast "* ]]; then
  echo
  echo "Incast (Table 6.4): ${INCAST_CLIENTS:-20,50,100} clients into one seqd behind a tbf of ${INCAST_MBIT:-20} Mbit/s, $ROUNDS rounds"
  for i in $(seq "$ROUNDS"); do
    SEQD_RIG_INCAST=1 SEQD_RIG_INCAST_CLIENTS=${INCAST_CLIENTS:-20,50,100} SEQD_RIG_INCAST_MBIT=${INCAST_MBIT:-20} \
      SEQD_RIG_INCAST_DURATION=${DURATION:-5s} go test -count=1 -run '^TestERPCIncast$' -v -timeout 30m ./e2e/multihost/ 2>&1 |
      grep -E 'RIG incast|--- FAIL|incast_test.go' | sed 's/^ *//' | tee -a "$tmp/incast"
  done
  echo
  echo "| clients | CC | p50 µs | p99 µs | probe p50 µs | probe p99 µs | Mops | retransmits | pkts through the bottleneck | dropped pkts |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  for n in $(echo "${INCAST_CLIENTS:-20,50,100}" | tr , ' '); do
    for cc in false true; do
      f() { grep "RIG incast clients=$n cc=$cc " "$tmp/incast" | grep -o " $1=[0-9.]*" | cut -d= -f2 | median; }
      echo "| $n | $([ $cc = true ] && echo on || echo off) | $(f p50_us) | $(f p99_us) | $(f probe_p50_us) | $(f probe_p99_us) | $(f Mops) | $(f retransmits) | $(f through_pkts) | $(f dropped_pkts) |"
    done
  done
  echo "(medians over rounds; p50/p99: the median over the 4 client hosts' loadgen runs)"
fi
