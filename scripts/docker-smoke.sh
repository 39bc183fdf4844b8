#!/usr/bin/env bash
# Smoke-tests the image built by scripts/docker-build.sh: starts it the way
# the image says (User, Entrypoint, Cmd), waits for its HEALTHCHECK command
# to pass, scrapes /metrics on the port it exposes, and checks that the mark
# was persisted in the data volume as the non-root user.
#
#   scripts/docker-smoke.sh [image]     (default seqd:latest)
#
# With a docker engine it runs a real container. Podman builds here, but
# often cannot run containers inside a sandbox (crun refuses setrlimit), so
# with podman the script mounts the image's filesystem, copies it, and runs
# the image's own entrypoint under chroot as the image's user, in a private
# network namespace (so it cannot collide with a seqd already on the
# machine's default ports). That checks the image's contents and metadata;
# it does not check the container runtime.
#
# The image ships every command of cmd/ (seqd, seqctl, loadgen, seqd-pd),
# stripped: the script checks each is there and has no symbol table, and
# (podman) starts seqd-pd in front of the image's seqd and scrapes it.
#
# The image ships with admin authorisation on (-admin-token-file
# /run/secrets/seqd-admin-tokens): the script checks that seqd refuses to
# start without that file, mounts one, and checks that a mutating seqctl
# call needs its token.
set -euo pipefail
cd "$(dirname "$0")/.."
img=${1:-${IMAGE:-seqd}:latest}

fail() { echo "docker-smoke: FAIL: $*" >&2; exit 1; }

# Every command of cmd/ (what scripts/docker-build.sh ships).
mapfile -t bins < <(find cmd -mindepth 2 -maxdepth 2 -name '*.go' ! -name '*_test.go' -printf '%h\n' | sed 's|^cmd/||' | sort -u)
# check_bins DIR: every command is in DIR, executable and stripped.
check_bins() {
  local b f
  for b in "${bins[@]}"; do
    [ -x "$1/$b" ] || fail "$b missing from the image's /usr/local/bin"
    if command -v file >/dev/null; then
      f=$(file "$1/$b")
      [[ $f != *'not stripped'* ]] || fail "$b in the image is not stripped: $f"
    fi
  done
  echo "docker-smoke: the image ships ${bins[*]}, stripped"
}

# The admin token the image's entrypoint reads, and a token of it.
secret=/run/secrets/seqd-admin-tokens
token=docker-smoke-token-$$-$RANDOM

if docker info >/dev/null 2>&1; then
  name=seqd-smoke-$$
  tokdir=$(mktemp -d)
  echo "$token" >"$tokdir/tokens"
  chmod 600 "$tokdir/tokens"
  chown 10001 "$tokdir/tokens" 2>/dev/null || fail "cannot chown the token file to the image's user 10001 (run as root)"
  # A new volume: -init (arguments replace CMD, so repeat its -device).
  docker run -d --name "$name" -p 127.0.0.1::7070 -p 127.0.0.1::9464 -v "$tokdir/tokens:$secret:ro" "$img" -init -device 127.0.0.1:4791 >/dev/null
  trap 'docker rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$tokdir"' EXIT
  for _ in $(seq 60); do
    st=$(docker inspect --format '{{.State.Health.Status}}' "$name")
    [ "$st" = healthy ] && break
    sleep 1
  done
  [ "$st" = healthy ] || { docker logs "$name" >&2; fail "health $st"; }
  port=$(docker port "$name" 9464/tcp | head -1)
  # Read the whole body before matching: grep -q stops at the first match,
  # and under pipefail curl's write error (exit 23) would fail the pipeline.
  body=$(curl -fsS "http://$port/metrics") || fail "GET /metrics"
  grep -q '^seqd_oracle_persisted_mark' <<<"$body" || fail "no seqd_oracle_persisted_mark on /metrics"
  docker exec "$name" /usr/local/bin/seqctl version
  bindir=$(mktemp -d)
  docker cp "$name:/usr/local/bin/." "$bindir/"
  check_bins "$bindir"
  rm -rf "$bindir"
  if docker exec "$name" /usr/local/bin/seqctl set-mode spec-s0 >/dev/null 2>&1; then fail "set-mode without a token succeeded"; fi
  docker exec "$name" /usr/local/bin/seqctl -token-file "$secret" set-mode spec-s0 >/dev/null || fail "set-mode with the token failed"
  echo "docker-smoke: ok ($img, docker)"
  exit 0
fi

command -v podman >/dev/null || fail "no docker engine and no podman"
P=(podman --storage-driver "${PODMAN_STORAGE_DRIVER:-vfs}")
inspect() { "${P[@]}" image inspect --format "$1" "$img"; }
mapfile -t entry < <(inspect '{{range .Config.Entrypoint}}{{.}}{{"\n"}}{{end}}')
mapfile -t cmd < <(inspect '{{range .Config.Cmd}}{{.}}{{"\n"}}{{end}}')
mapfile -t health < <(inspect '{{if .Config.Healthcheck}}{{range .Config.Healthcheck.Test}}{{.}}{{"\n"}}{{end}}{{end}}')
user=$(inspect '{{.Config.User}}')
[ ${#entry[@]} -gt 0 ] || fail "image has no ENTRYPOINT"
[ "${health[0]:-}" = CMD ] || fail "image has no exec-form HEALTHCHECK (got '${health[*]:-}'; podman needs --format docker)"
case $user in ""|0|0:*|root|root:*) fail "image runs as root (User '$user')" ;; esac
[[ " ${entry[*]} ${cmd[*]} " == *' 0.0.0.0:7070 '* ]] || fail "entrypoint does not bind the admin port on 0.0.0.0"
[[ " ${entry[*]} " == *" -admin-token-file $secret "* ]] || fail "entrypoint does not read the admin token file $secret"
[[ " ${entry[*]} " != *' -admin-insecure-no-auth '* ]] || fail "entrypoint turns admin authorisation off"

root=$(mktemp -d)
mnt=$("${P[@]}" image mount "$img")
trap '"${P[@]}" image unmount "$img" >/dev/null 2>&1 || true; rm -rf "$root"' EXIT
cp -a "$mnt/." "$root/"
"${P[@]}" image unmount "$img" >/dev/null
check_bins "$root/usr/local/bin"
grep -q '^seqd:' "$root/etc/passwd" || fail "no seqd user in /etc/passwd"

# One shell in a private network namespace: start seqd, wait for the
# healthcheck, scrape, stop.
unshare -n bash -s -- "$root" "$user" "$secret" "$token" "${#entry[@]}" "${entry[@]}" "${cmd[@]}" -- "${health[@]:1}" <<'SH'
set -euo pipefail
root=$1 user=$2 secret=$3 token=$4 n=$5
shift 5
argv=()
while [ "$1" != -- ]; do argv+=("$1"); shift; done
shift
hc=("$@")
ip link set lo up
# No token file mounted: seqd refuses to start, naming it.
if chroot --userspec="$user" "$root" "${argv[@]}" -init >"$root/seqd.log" 2>&1; then
  echo "docker-smoke: FAIL: seqd started without its admin token file" >&2; exit 1
fi
grep -q -- "$secret" "$root/seqd.log" || { cat "$root/seqd.log" >&2; echo "docker-smoke: FAIL: the refusal does not name $secret" >&2; exit 1; }
echo "docker-smoke: refused to start without $secret"
mkdir -p "$root$(dirname "$secret")"
echo "$token" >"$root$secret"
chmod 600 "$root$secret"
chown "${user%%:*}" "$root$secret"
# The image's data directory holds no mark: without -init seqd must refuse
# it (a lost volume is not a fresh start), naming the path and -init.
if chroot --userspec="$user" "$root" "${argv[@]}" >"$root/seqd.log" 2>&1; then
  echo "docker-smoke: FAIL: seqd started on an empty data volume without -init" >&2; exit 1
fi
grep -q -- '/var/lib/seqd.*-init' "$root/seqd.log" || { cat "$root/seqd.log" >&2; echo "docker-smoke: FAIL: the refusal does not name the path and -init" >&2; exit 1; }
echo "docker-smoke: refused the empty volume without -init"
chroot --userspec="$user" "$root" "${argv[@]}" -init >"$root/seqd.log" 2>&1 &
pid=$!
ok=
for _ in $(seq 50); do
  if chroot --userspec="$user" "$root" "${hc[@]}" >/dev/null 2>&1; then ok=1; break; fi
  sleep 0.2
done
if [ -z "$ok" ]; then cat "$root/seqd.log" >&2; kill "$pid" 2>/dev/null; echo "docker-smoke: FAIL: healthcheck never passed" >&2; exit 1; fi
echo "docker-smoke: healthcheck passed: ${hc[*]}"
if command -v curl >/dev/null; then
  body=$(curl -fsS http://127.0.0.1:9464/metrics) || { echo "docker-smoke: FAIL: GET /metrics" >&2; exit 1; }
  grep -q '^seqd_oracle_persisted_mark' <<<"$body" || { echo "docker-smoke: FAIL: no seqd_oracle_persisted_mark on /metrics" >&2; exit 1; }
  echo "docker-smoke: /metrics on 9464 ok"
fi
chroot --userspec="$user" "$root" /usr/local/bin/seqctl status >/dev/null
chroot --userspec="$user" "$root" /usr/local/bin/seqctl version
if chroot --userspec="$user" "$root" /usr/local/bin/seqctl set-mode spec-s0 >/dev/null 2>&1; then
  echo "docker-smoke: FAIL: set-mode without a token succeeded" >&2; exit 1
fi
chroot --userspec="$user" "$root" /usr/local/bin/seqctl -token-file "$secret" set-mode spec-s0 >/dev/null || { echo "docker-smoke: FAIL: set-mode with the token failed" >&2; exit 1; }
echo "docker-smoke: set-mode needs the admin token"
# seqd-pd in front of it: ranges need mode fasst.
chroot --userspec="$user" "$root" /usr/local/bin/seqctl -token-file "$secret" set-mode fasst >/dev/null
chroot --userspec="$user" "$root" /usr/local/bin/seqd-pd -admin 127.0.0.1:7070 -listen 127.0.0.1:3379 -metrics 127.0.0.1:9465 >"$root/seqd-pd.log" 2>&1 &
pd=$!
ok=
for _ in $(seq 50); do
  if grep -q 'seqd-pd serving' "$root/seqd-pd.log"; then ok=1; break; fi
  sleep 0.2
done
if [ -z "$ok" ]; then cat "$root/seqd-pd.log" >&2; kill "$pid" "$pd" 2>/dev/null; echo "docker-smoke: FAIL: seqd-pd never served" >&2; exit 1; fi
if command -v curl >/dev/null; then
  body=$(curl -fsS http://127.0.0.1:9465/metrics) || { echo "docker-smoke: FAIL: GET seqd-pd /metrics" >&2; exit 1; }
  grep -q '^seqd_pd_tso_requests_total' <<<"$body" || { echo "docker-smoke: FAIL: no seqd_pd_tso_requests_total on seqd-pd's /metrics" >&2; exit 1; }
fi
kill -TERM "$pd"
wait "$pd" || { cat "$root/seqd-pd.log" >&2; echo "docker-smoke: FAIL: seqd-pd exited non-zero on SIGTERM" >&2; exit 1; }
echo "docker-smoke: seqd-pd served in front of seqd (mode fasst)"
kill -TERM "$pid"
wait "$pid" || { cat "$root/seqd.log" >&2; echo "docker-smoke: FAIL: seqd exited non-zero on SIGTERM" >&2; exit 1; }
SH
owner=$(find "$root/var/lib/seqd" -type f -printf '%u\n' | sort -u)
[ -n "$owner" ] || fail "nothing persisted in /var/lib/seqd"
[ "$owner" = "${user%%:*}" ] || [ "$owner" = seqd ] || fail "data files owned by '$owner', want $user"
echo "docker-smoke: ok ($img, podman image run under chroot as $user; the container runtime itself was not exercised)"
