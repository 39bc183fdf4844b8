#!/usr/bin/env bash
# Runs every native fuzz target for a short time (default 10s each).
# New interesting inputs are not minimized (-fuzzminimizetime 0): in a
# short run, the deadline can fall during a minimization, which the Go
# fuzzing engine reports as a failure ("context deadline exceeded") with
# no failing input; such a run is retried once. A real failure writes a
# failing input under testdata/fuzz and is reported as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-10s}
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "== $pkg $f"
    for attempt in 1 2; do
      if out=$(go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" -fuzzminimizetime 0 "$pkg" 2>&1); then
        echo "$out" | tail -3
        break
      fi
      echo "$out"
      if [ "$attempt" = 1 ] && grep -q 'context deadline exceeded' <<<"$out" && ! grep -q 'Failing input written' <<<"$out"; then
        echo "fuzz-short: $f hit the fuzzing engine's deadline flake; retrying once"
        continue
      fi
      exit 1
    done
  done
done
