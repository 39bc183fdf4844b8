#!/usr/bin/env bash
# Measures the server, not the client: loadgen's lean wire-level
# generator (loadgen -engine wire) drives, for 1, 64 and 1024 flows, the
# provider's header-only echo server, a raw UDP GSO/GRO echo and seqd
# (Spec-S0, then herd; one worker: seqd's default), each pinned to SERVER_CORE while the generator
# runs on GEN_CORE, interleaved per flow count in SLICES slices each
# (default 4: the servers take turns, DURATION/SLICES at a time, so that
# a slow phase of the machine weighs on each alike); then Redis INCR (-c 50
# -P 64) when redis-server is installed. It prints loadgen's table (with
# the server's user and kernel ns per request) and ends with one line per
# flow count:
#   seqd_mops=<a> floor_mops=<b> ratio=<a/b> flows=<n>
# where the floor is the provider's echo server at that flow count.
# ROUNDS (default 3) repeats the whole run: on a shared machine the speed
# of both servers moves by tens of percent within seconds, so each round's
# ratio is taken within the round, and the last lines give, per flow
# count, the median over rounds of seqd's Mops, the floor's and the
# ratio (rounds=<k> ratios=<r1,r2,...> says what they came from). About
# 45 s a round.
#
# VARIANTS compares seqd configurations: space-separated, each a
# comma-separated list of seqd flags name=value, e.g.
#   VARIANTS="spec-s0-recv=per-session spec-s0-recv=shared" MODES=spec-s0
# Each round then runs loadgen once per variant, in turn (in reverse order
# every other round, so that a drift of the machine's speed weighs on
# each alike), the spawned seqd taking the variant's flags from SEQD_*
# variables (it inherits loadgen's environment); every seqd_mops line is
# followed by variant=<v>, and the last lines give, per flow count and
# variant after the first, the median over rounds of its Mops over the
# first variant's (mops_ratio), and of its ratio to the echo floor over
# the first variant's (floor_ratio, which cancels a change of the
# machine's speed between the two runs):
#   variant=<v> vs=<first> flows=<n> mops_ratio=<r> floor_ratio=<f> rounds=<k> mops_ratios=<r1,...>
set -euo pipefail
cd "$(dirname "$0")/.."
FLOWS=${FLOWS:-1,64,1024}
ROUNDS=${ROUNDS:-3}
MODES=${MODES:-spec-s0,herd}
DURATION=${DURATION:-2s}
SLICES=${SLICES:-4}
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
args=(-engine wire -spawn -seqd-binary "$tmp/seqd" -server-core "$SERVER_CORE" -flows "$FLOWS" -modes "$MODES"
  -duration "$DURATION" -warmup "$WARMUP" -slices "$SLICES" -json-file "$tmp/bench-server.json")
if [ "$SERVER_CORE" -ge 0 ]; then
  args+=(-seqd-cores "$SERVER_CORE")
fi
if [ -n "$GEN_CORE" ]; then
  args+=(-cores "$GEN_CORE")
fi
VARIANTS=${VARIANTS:-}
read -r -a variants <<<"$VARIANTS"
echo "+ loadgen ${args[*]} (ROUNDS=$ROUNDS${VARIANTS:+ VARIANTS=\"$VARIANTS\"})" >&2
# venv prints, for a variant name=value,name=value, the SEQD_* variables
# that set those flags.
venv() {
  local kv
  IFS=, read -r -a kv <<<"$1"
  for f in "${kv[@]}"; do
    local name=${f%%=*}
    name=${name#-}
    name=${name//-/_}
    echo "SEQD_${name^^}=${f#*=}"
  done
}
for r in $(seq "$ROUNDS"); do
  if [ "${#variants[@]}" -eq 0 ]; then
    echo "=== round $r of $ROUNDS"
    # Progress (stderr) and the table (stdout) in one stream, in order: the
    # table, and with it the seqd_mops lines, come last.
    "$tmp/loadgen" "${args[@]}" 2>&1 | grep -v 'admin plane' | tee "$tmp/round$r"
    cp "$tmp/bench-server.json" "${BENCH_SERVER_JSON:-/dev/null}" 2>/dev/null || true
    continue
  fi
  order=("${!variants[@]}")
  if [ $((r % 2)) -eq 0 ]; then
    order=()
    for ((i = ${#variants[@]} - 1; i >= 0; i--)); do order+=("$i"); done
  fi
  for i in "${order[@]}"; do
    v=${variants[$i]}
    echo "=== round $r of $ROUNDS, variant $v"
    mapfile -t envs < <(venv "$v")
    env "${envs[@]}" "$tmp/loadgen" "${args[@]}" 2>&1 | grep -v 'admin plane' |
      sed "/^seqd_mops=/s/\$/ variant=$v/" | tee "$tmp/round$r.v$i"
  done
done
if [ "${#variants[@]}" -gt 0 ]; then
  echo "=== variants over $ROUNDS rounds, each against ${variants[0]}"
  # seqd_mops=a floor_mops=b ratio=c flows=n variant=v lines: per round,
  # variant and flow count, then the medians of the per-round ratios.
  for r in $(seq "$ROUNDS"); do
    for i in "${!variants[@]}"; do
      v=${variants[$i]}
      grep '^seqd_mops=' "$tmp/round$r.v$i" | sed 's/[a-z_]*=//g' | awk -v r="$r" -v i="$i" -v name="$v" '{ print r, i, $4, $1, $3, name }'
    done
  done | awk '
    { mops[$1, $2, $3] = $4; fr[$1, $2, $3] = $5; name[$2] = $6; if (!($3 in seen)) { seen[$3] = 1; order[++k] = $3 }; if ($2 > nv) nv = $2; if ($1 > nr) nr = $1 }
    function median(str,   a, m, i, j, t) {
      m = split(str, a, " ")
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
      return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
    }
    END {
      for (v = 0; v <= nv; v++) for (i = 1; i <= k; i++) {
        n = order[i]; s = ""; f = ""
        for (r = 1; r <= nr; r++) { s = s " " mops[r, v, n]; f = f " " fr[r, v, n] }
        printf "seqd_mops=%.3f ratio=%.2f flows=%s variant=%s (medians over %d rounds)\n", median(s), median(f), n, name[v], nr
      }
      for (v = 1; v <= nv; v++) for (i = 1; i <= k; i++) {
        n = order[i]; mr = ""; frr = ""; rs = ""
        for (r = 1; r <= nr; r++) {
          if (mops[r, 0, n] > 0 && fr[r, 0, n] > 0) {
            x = mops[r, v, n] / mops[r, 0, n]; mr = mr " " x; frr = frr " " fr[r, v, n] / fr[r, 0, n]
            rs = rs (rs == "" ? "" : ",") sprintf("%.2f", x)
          }
        }
        if (mr == "") continue
        printf "variant=%s vs=%s flows=%s mops_ratio=%.2f floor_ratio=%.2f rounds=%d mops_ratios=%s\n", name[v], name[0], n, median(mr), median(frr), split(mr, tmp, " "), rs
      }
    }'
elif [ "$ROUNDS" -gt 1 ]; then
  echo "=== median over $ROUNDS rounds"
  # seqd_mops=a floor_mops=b ratio=c flows=n lines of every round.
  cat "$tmp"/round* | grep '^seqd_mops=' | sed 's/[a-z_]*=//g' | awk '
    { n = $4; s[n] = s[n] " " $1; f[n] = f[n] " " $2; r[n] = r[n] " " $3; if (!(n in seen)) { seen[n] = 1; order[++k] = n } }
    function median(str,   a, m, i, j, t) {
      m = split(str, a, " ")
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
      return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
    }
    END {
      for (i = 1; i <= k; i++) {
        n = order[i]; rs = r[n]; gsub(/^ /, "", rs); gsub(/ /, ",", rs)
        printf "seqd_mops=%.3f floor_mops=%.3f ratio=%.2f flows=%s rounds=%d ratios=%s\n", median(s[n]), median(f[n]), median(r[n]), n, split(r[n], x, " "), rs
      }
    }'
fi
# The AF_XDP half (issue 31): seqd over veth between two namespaces, on
# the UDP socket and on AF_XDP, in turn, from the same run. XDP=0 skips
# it; it needs root (it says so and skips without).
if [ "${XDP:-1}" != 0 ]; then
  ROUNDS="$ROUNDS" FLOWS="$FLOWS" DURATION="$DURATION" WARMUP="$WARMUP" SERVER_CORE="$SERVER_CORE" GEN_CORE="${GEN_CORE:-0}" \
    ./scripts/bench-server-xdp.sh
fi
