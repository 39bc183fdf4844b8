#!/usr/bin/env bash
# Runs the commands of the operator's guide so that it cannot rot.
#
#   scripts/check-guide.sh [docs/operations.md]
#
# Every ```sh (or bash, shell, console) block in the guide must be preceded by a marker line:
#
#   <!-- guide: run -->             the block runs here, in order
#   <!-- guide: skip <reason> -->   the block is shown, not run (needs an
#                                   RDMA NIC, etcd, systemd as PID 1, ...)
#
# A ```sh block without a marker fails the check. The run blocks are
# concatenated, in order, into one bash script (set -euo pipefail; a block
# may start seqd in the background and a later one stop it) and run from
# the repository root, with the binaries of `make build` in ./bin, inside
# private network and mount namespaces: seqd's default ports cannot collide
# with anything on the machine, and /var/lib and /var/backups are empty
# tmpfs mounts, so the guide can use the paths an operator would.
# Needs root (or unprivileged user namespaces), unshare and ip.
set -euo pipefail
cd "$(dirname "$0")/.."
guide=${1:-docs/operations.md}

for b in seqd seqctl loadgen; do
  [ -x "bin/$b" ] || { echo "check-guide: bin/$b missing: run make build" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
script=$work/guide.sh

# Extract. awk prints the script and reports skipped blocks on stderr.
awk -v script="$script" '
  BEGIN { marker = ""; inblock = 0; nrun = 0; nskip = 0; bad = 0 }
  /^<!-- guide: (run|skip[^>]*) -->[ \t]*$/ { marker = $0; mline = NR; next }
  /^```(sh|bash|shell|console)[ \t]*$/ && !inblock {
    if (marker == "" || mline != NR - 1) {
      printf "check-guide: %s:%d: ```sh block without a <!-- guide: run|skip reason --> marker on the line above\n", FILENAME, NR > "/dev/stderr"
      bad = 1
    }
    inblock = 1
    run = (marker ~ /guide: run/)
    if (run) {
      nrun++
      printf "echo \"--- %s:%d\"\n", FILENAME, NR > script
    } else if (marker != "") {
      nskip++
      reason = marker; sub(/^<!-- guide: skip[ \t]*/, "", reason); sub(/[ \t]*-->.*$/, "", reason)
      if (reason == "") { printf "check-guide: %s:%d: skip marker without a reason\n", FILENAME, NR > "/dev/stderr"; bad = 1 }
      printf "check-guide: skip %s:%d: %s\n", FILENAME, NR, reason > "/dev/stderr"
    }
    marker = ""
    next
  }
  /^```/ && inblock { inblock = 0; next }
  inblock && run { print > script }
  END {
    if (inblock) { print "check-guide: unterminated code block" > "/dev/stderr"; bad = 1 }
    printf "check-guide: %d blocks to run, %d skipped\n", nrun, nskip > "/dev/stderr"
    exit bad
  }
' "$guide"
[ -s "$script" ] || { echo "check-guide: nothing to run in $guide" >&2; exit 1; }

# Run. The wrapper stops whatever the guide left running in the background.
cat >"$work/wrap.sh" <<'WRAP'
set -euo pipefail
ip link set lo up
mount -t tmpfs tmpfs /var/lib
mount -t tmpfs tmpfs /var/backups 2>/dev/null || { mkdir -p /var/backups && mount -t tmpfs tmpfs /var/backups; }
cleanup() { local p; for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
set -x
WRAP
unshare_flags=(-m -n)
[ "$(id -u)" = 0 ] || unshare_flags=(-r -m -n)
if ! timeout "${GUIDE_TIMEOUT:-300}" unshare "${unshare_flags[@]}" bash -c "cat '$work/wrap.sh' '$script' > '$work/all.sh'; exec bash '$work/all.sh'"; then
  echo "check-guide: FAIL: a command in $guide failed (see the trace above)" >&2
  exit 1
fi
echo "check-guide: ok: every run block of $guide passed"
