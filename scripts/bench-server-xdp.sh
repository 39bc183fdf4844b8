#!/usr/bin/env bash
# The AF_XDP half of make bench-server (issue 31 item 2): seqd over a veth
# pair between two network namespaces, receiving through the UDP socket
# (the soft provider's default) and through AF_XDP (-provider-opts
# xdp=vb, copy mode: veth has no zero-copy), taking turns within each
# round, driven by loadgen's wire generator (-engine wire) from the other
# namespace at 1, 64 and 1,024 flows. Needs root (namespaces, XDP).
# Prints per round and flow count:
#   xdp_mops=<a> udp_mops=<b> xdp_over_udp=<a/b> flows=<n>
# and, with ROUNDS > 1, the medians. The AF_XDP echo floor is not
# measured: loadgen starts its floor servers in its own namespace
# (see docs/kernel-bypass.md).
set -euo pipefail
cd "$(dirname "$0")/.."
FLOWS=${FLOWS:-1,64,1024}
ROUNDS=${ROUNDS:-3}
MODE=${XDP_MODE:-spec-s0}
DURATION=${DURATION:-2s}
WARMUP=${WARMUP:-500ms}
SERVER_CORE=${SERVER_CORE:-1}
GEN_CORE=${GEN_CORE:-0}
# pin CORE: the taskset prefix that pins to CORE (none for "" or -1).
pin() { if [ -n "$1" ] && [ "$1" -ge 0 ]; then echo "taskset -c $1"; fi; }
if [ "$(id -u)" -ne 0 ]; then
  echo "bench-server-xdp: needs root (network namespaces, XDP); skipped" >&2
  exit 0
fi
tmp=$(mktemp -d)
[ -n "${KEEP:-}" ] && echo "bench-server-xdp: files in $tmp" >&2
ns=seqdrig-$$-bx
nsA=${ns}a
nsB=${ns}b
cleanup() {
  for p in $(ip netns pids "$nsB" 2>/dev/null) $(ip netns pids "$nsA" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
  ip netns del "$nsA" 2>/dev/null || true
  ip netns del "$nsB" 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/seqd" ./cmd/seqd
go build -o "$tmp/loadgen" ./cmd/loadgen
ip netns add "$nsA"
ip netns add "$nsB"
ip -n "$nsA" link add va type veth peer name vb netns "$nsB"
ip -n "$nsA" addr add 198.51.100.1/24 dev va
ip -n "$nsB" addr add 198.51.100.2/24 dev vb
for n in "$nsA" "$nsB"; do ip -n "$n" link set lo up; done
ip -n "$nsA" link set va up
ip -n "$nsB" link set vb up
# The generator's flows come from 10.77.0.1 on, one address each (local
# to nsA, routed back to it from nsB).
ip -n "$nsA" route add local 10.77.0.0/16 dev lo
ip -n "$nsB" route add 10.77.0.0/16 via 198.51.100.1

# run_one PATH: starts seqd in nsB (PATH udp or xdp), drives it from nsA,
# stops it; loadgen's seqd_mops lines go to $tmp/PATH.out.
run_one() {
  local path=$1 opts=()
  [ "$path" = xdp ] && opts=(-provider-opts xdp=vb)
  rm -rf "$tmp/data"
  ip netns exec "$nsB" $(pin "$SERVER_CORE") "$tmp/seqd" -device 198.51.100.2:4791 -admin 198.51.100.2:7070 \
    -metrics 198.51.100.2:9090 -data "$tmp/data" -init -mode "$MODE" -peer-max-recv -1 -admin-insecure-no-auth "${opts[@]}" \
    >"$tmp/seqd.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do
    if grep -q "serving\|listening\|admin" "$tmp/seqd.log" 2>/dev/null; then break; fi
    sleep 0.1
  done
  sleep 0.5
  ip netns exec "$nsA" ${GEN_WRAP:-} $(pin "$GEN_CORE") "$tmp/loadgen" -engine wire -admin 198.51.100.2:7070 -insecure \
    -device 198.51.100.1:0 -wire-source 10.77.0.1 -server-pid "$pid" -modes "$MODE" -flows "$FLOWS" -duration "$DURATION" \
    -warmup "$WARMUP" -no-floors -no-redis -echo -1s 2>&1 | grep -v 'admin plane' >"$tmp/$path.out" || true
  ip netns exec "$nsA" curl -s http://198.51.100.2:9090/metrics >"$tmp/$path.metrics" 2>/dev/null || true
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  grep -h "AF_XDP receive" "$tmp/seqd.log" | head -1 >&2 || true
}

echo "=== AF_XDP vs UDP socket, seqd over veth ($MODE, load average: $(cut -d' ' -f1-3 /proc/loadavg))"
for r in $(seq "$ROUNDS"); do
  # Alternate the order, so that neither path always runs first.
  order="udp xdp"
  [ $((r % 2)) -eq 0 ] && order="xdp udp"
  for p in $order; do run_one "$p"; done
  cat "$tmp/udp.out" "$tmp/xdp.out" >>"$tmp/all.out"
  for f in ${FLOWS//,/ }; do
    u=$(grep '^seqd_mops=' "$tmp/udp.out" | grep " flows=$f\b" | head -1 | sed 's/seqd_mops=\([^ ]*\).*/\1/')
    x=$(grep '^seqd_mops=' "$tmp/xdp.out" | grep " flows=$f\b" | head -1 | sed 's/seqd_mops=\([^ ]*\).*/\1/')
    if [ -z "$u" ] || [ -z "$x" ]; then
      echo "round $r flows=$f: no result (udp '$u' xdp '$x'); loadgen said:" >&2
      tail -5 "$tmp/udp.out" "$tmp/xdp.out" >&2
      continue
    fi
    echo "xdp_mops=$x udp_mops=$u xdp_over_udp=$(awk -v a="$x" -v b="$u" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }') flows=$f round=$r" | tee -a "$tmp/ratios"
  done
done
echo "=== median over $ROUNDS rounds (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
sed 's/[a-z_]*=//g' "$tmp/ratios" | awk '
  { n = $4; x[n] = x[n] " " $1; u[n] = u[n] " " $2; r[n] = r[n] " " $3; if (!(n in seen)) { seen[n] = 1; order[++k] = n } }
  function median(str,   a, m, i, j, t) {
    m = split(str, a, " ")
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
  }
  END { for (i = 1; i <= k; i++) { n = order[i]; printf "xdp_mops=%.3f udp_mops=%.3f xdp_over_udp=%.2f flows=%s rounds=%d\n", median(x[n]), median(u[n]), median(r[n]), n, split(r[n], z, " ") } }'
