#!/usr/bin/env bash
# Runs the commands of the operator's guide so that it cannot rot.
#
#   scripts/check-guide.sh [--marked-only] [docs/operations.md]
#
# Every ```sh (or bash, shell, console) block in the guide must be preceded by a marker line:
#
#   <!-- guide: run -->             the block runs here, in order
#   <!-- guide: host NAME IP -->    the block runs, in order, on host NAME:
#                                   a network namespace of its own whose
#                                   eth0 has address IP (198.51.100.0/24 or
#                                   203.0.113.0/24), all hosts on one bridge
#   <!-- guide: skip <reason> -->   the block is shown, not run (needs an
#                                   RDMA NIC, etcd, systemd as PID 1, ...)
#   <!-- guide: file NAME -->       before a block of any language (```go,
#                                   ```go.mod, ...): the block is written,
#                                   in order, to NAME (a relative path) in
#                                   the run's current directory, as a
#                                   reader saves it before the commands
#                                   that use it
#
# A ```sh block without a marker fails the check; with --marked-only (for
# README.md, whose quick-start blocks are not a guide) it is ignored. A
# host block runs in a bash of its own on its host (`ip netns exec`):
# shell variables do not carry over, and what it starts in the background
# keeps running until the end of the check. The run blocks are
# concatenated, in order, into one bash script (set -euo pipefail; a block
# may start seqd in the background and a later one stop it) and run from
# the repository root, with the binaries of `make build` in ./bin, inside
# private network and mount namespaces: seqd's default ports cannot collide
# with anything on the machine, and /var/lib and /var/backups are empty
# tmpfs mounts, so the guide can use the paths an operator would.
# TMPDIR is a scratch directory removed at the end (`cd "$(mktemp -d)"`
# in a block leaves nothing behind).
#
# The namespaces have no network, so Go modules come from the module
# cache: before the run, the file blocks between two run blocks are
# written to a directory of their own, and where they include a go.mod,
# `go mod tidy` and `go build` run there with the network (filling the
# module cache); in the run, GOPROXY=off, so a module the prefetch did not
# fetch fails loudly.
# Needs root (or unprivileged user namespaces), unshare and ip; go for a
# guide with a go.mod file block.
set -euo pipefail
cd "$(dirname "$0")/.."
markedOnly=0
if [ "${1:-}" = --marked-only ]; then markedOnly=1; shift; fi
guide=${1:-docs/operations.md}

for b in seqd seqctl loadgen; do
  [ -x "bin/$b" ] || { echo "check-guide: bin/$b missing: run make build" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
script=$work/guide.sh

# Extract. awk prints the script and reports skipped blocks on stderr.
awk -v script="$script" -v work="$work" -v markedOnly="$markedOnly" '
  BEGIN { marker = ""; inblock = 0; infile = 0; nrun = 0; nskip = 0; nfile = 0; group = 0; grouped = 0; bad = 0; out = script }
  /^<!-- guide: (run|host [^>]*|skip[^>]*|file [^ >]+) -->[ \t]*$/ { marker = $0; mline = NR; next }
  /^```[A-Za-z0-9._+-]*[ \t]*$/ && !inblock && !infile && marker ~ /guide: file / && mline == NR - 1 {
    name = marker; sub(/^<!-- guide: file /, "", name); sub(/ -->.*$/, "", name)
    if (name !~ /^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*$/ || name ~ /(^|\/)\.\.?(\/|$)/) {
      printf "check-guide: %s:%d: bad file marker (want a relative path of [A-Za-z0-9._-], no . or ..): %s\n", FILENAME, mline, marker > "/dev/stderr"
      bad = 1; infile = 1; gfile = "/dev/null"; next
    }
    if (!grouped) { group++; grouped = 1 }
    nfile++
    infile = 1; fname = name; marker = ""
    gfile = sprintf("%s/files/%d/%s", work, group, name)
    d = gfile; sub(/\/[^\/]*$/, "", d); system("mkdir -p \"" d "\"")
    printf "" > gfile
    printf "echo \"--- %s:%d (file %s)\"\n", FILENAME, NR, name > script
    if (name ~ /\//) { d = name; sub(/\/[^\/]*$/, "", d); printf "mkdir -p \047%s\047\n", d > script }
    printf "if [ \"$PWD\" = \"$GUIDE_ROOT\" ] || [ -e \047%s\047 ]; then echo \"check-guide: %s:%d: %s: a file block goes to a new directory, not $PWD (cd into a new directory in a run block before it)\" >&2; exit 1; fi\n", name, FILENAME, NR, name > script
    printf "cat >\047%s\047 <<\047GUIDE_FILE_EOF\047\n", name > script
    next
  }
  /^```[ \t]*$/ && infile { infile = 0; close(gfile); print "GUIDE_FILE_EOF" > script; next }
  infile {
    if ($0 == "GUIDE_FILE_EOF") { printf "check-guide: %s:%d: a file block may not contain the line GUIDE_FILE_EOF\n", FILENAME, NR > "/dev/stderr"; bad = 1 }
    print > script; print > gfile; next
  }
  /^```(sh|bash|shell|console)[ \t]*$/ && !inblock {
    if (marker == "" || mline != NR - 1) {
      inblock = 1; run = 0; marker = ""
      if (markedOnly) next
      printf "check-guide: %s:%d: ```sh block without a <!-- guide: run|host NAME IP|skip reason --> marker on the line above\n", FILENAME, NR > "/dev/stderr"
      bad = 1
      next
    }
    inblock = 1; grouped = 0
    run = (marker ~ /guide: (run|host )/)
    out = script
    if (marker ~ /guide: host /) {
      split(marker, f, /[ \t]+/) # <!-- guide: host NAME IP -->
      name = f[4]; ip = f[5]
      if (name !~ /^[a-z][a-z0-9]*$/ || length(name) > 12 || ip !~ /^(198\.51\.100|203\.0\.113)\.[0-9]+$/) {
        printf "check-guide: %s:%d: bad host marker (want NAME of [a-z0-9], at most 12, and an IP in 198.51.100.0/24 or 203.0.113.0/24): %s\n", FILENAME, mline, marker > "/dev/stderr"
        bad = 1
      }
      out = sprintf("%s/block%d.sh", work, NR)
      printf "echo \"--- %s:%d (on host %s, %s)\"\nguide_host %s %s %s\n", FILENAME, NR, name, ip, name, ip, out > script
      nrun++
    } else if (run) {
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
  inblock && run { print > out }
  END {
    if (inblock || infile) { print "check-guide: unterminated code block" > "/dev/stderr"; bad = 1 }
    printf "check-guide: %d blocks to run, %d files, %d skipped\n", nrun, nfile, nskip > "/dev/stderr"
    exit bad
  }
' "$guide"
[ -s "$script" ] || { echo "check-guide: nothing to run in $guide" >&2; exit 1; }

# Prefetch, with the network: every file group with a go.mod, as the
# guide's reader would build it.
for mod in "$work"/files/*/go.mod; do
  [ -e "$mod" ] || continue
  command -v go >/dev/null || { echo "check-guide: go needed for the go.mod file blocks of $guide" >&2; exit 1; }
  echo "check-guide: fetching the modules of $(sed -n 's/^module //p' "$mod") (go mod tidy, go build)" >&2
  if ! (cd "$(dirname "$mod")" && GOWORK=off go mod tidy && GOWORK=off go build -o /dev/null .); then
    echo "check-guide: FAIL: go mod tidy or go build failed for a go.mod file block of $guide" >&2
    exit 1
  fi
done
mkdir "$work/tmp"

# Run. The wrapper stops whatever the guide left running in the background.
cat >"$work/wrap.sh" <<'WRAP'
set -euo pipefail
export GOPROXY=off GOWORK=off
GUIDE_ROOT=$PWD # the checkout: file blocks may not write into it
ip link set lo up
mount -t tmpfs tmpfs /var/lib
mount -t tmpfs tmpfs /var/backups 2>/dev/null || { mkdir -p /var/backups && mount -t tmpfs tmpfs /var/backups; }
# The hosts' namespaces are private to this mount namespace.
mkdir -p /run/netns && mount -t tmpfs tmpfs /run/netns
guide_hosts() { ip netns list 2>/dev/null | awk '/^guide-/ { print $1 }'; }
cleanup() {
  local rc=$? p ns i
  set +x
  echo "check-guide: cleanup (exit $rc)"
  if [ "$rc" != 0 ]; then
    # The logs the guide's processes write under /var/lib (a tmpfs of
    # this run's own): their last lines, while the processes still run.
    for f in /var/lib/*.log; do
      [ -f "$f" ] || continue
      echo "check-guide: the last lines of $f:"
      tail -n 15 "$f" | cut -c1-400
    done
  fi
  for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
  for ns in $(guide_hosts); do for p in $(ip netns pids "$ns"); do kill "$p" 2>/dev/null || true; done; done
  # Up to 10 s to stop on SIGTERM; whatever is left is named and killed.
  for i in $(seq 50); do [ -z "$(jobs -pr)" ] && break; sleep 0.2; done
  if [ -n "$(jobs -pr)" ]; then
    echo "check-guide: still running 10s after SIGTERM (killed):" >&2
    jobs -lr >&2
    for p in $(jobs -pr); do kill -9 "$p" 2>/dev/null || true; done
  fi
  for ns in $(guide_hosts); do for p in $(ip netns pids "$ns"); do kill -9 "$p" 2>/dev/null || true; done; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
# guide_host NAME IP FILE: run FILE on host NAME, created at its first use.
guide_host() {
  local ns=guide-$1
  if ! guide_hosts | grep -qx "$ns"; then
    ip link show br-guide >/dev/null 2>&1 || { ip link add br-guide type bridge && ip link set br-guide up; }
    ip netns add "$ns"
    ip link add "gh-$1" type veth peer name eth0 netns "$ns"
    ip link set "gh-$1" master br-guide up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$2/24" dev eth0
    ip -n "$ns" link set eth0 up
  fi
  ip netns exec "$ns" bash -euo pipefail -x "$3"
}
set -x
WRAP
unshare_flags=(-m -n)
[ "$(id -u)" = 0 ] || unshare_flags=(-r -m -n)
# The run's output goes to the terminal and to a file: on a failure, the
# lines before the cleanup are shown again at the end, where a log's tail
# (CI's) shows them.
if ! timeout "${GUIDE_TIMEOUT:-300}" env TMPDIR="$work/tmp" unshare "${unshare_flags[@]}" bash -c "cat '$work/wrap.sh' '$script' > '$work/all.sh'; exec bash '$work/all.sh'" 2>&1 | tee "$work/run.log"; then
  echo "check-guide: FAIL: a command in $guide failed; the last lines of its trace before the cleanup:" >&2
  sed '/^check-guide: cleanup (exit /,$d' "$work/run.log" | tail -n 40 >&2
  echo "check-guide: FAIL: a command in $guide failed (the trace above)" >&2
  exit 1
fi
echo "check-guide: ok: every run block of $guide passed"
