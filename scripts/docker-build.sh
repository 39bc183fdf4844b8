#!/usr/bin/env bash
# Builds the seqd container image from binaries already built on the host.
#
#   scripts/docker-build.sh [default|ibverbs]
#
# default: Dockerfile (FROM scratch; needs `make dist` first). Pulls
#          nothing, so it builds with no registry access.
# ibverbs: Dockerfile.ibverbs (debian:bookworm-slim + rdma-core; needs
#          `make dist-ibverbs` first, and registry and mirror access).
#
# The image ships every command of cmd/ (seqd, seqctl, loadgen, seqd-pd),
# built stripped (-s -w) and with -trimpath by `make dist`: the script
# refuses a missing or unstripped one.
#
# The engine is docker when `docker info` answers, else podman. Podman runs
# with the storage driver $PODMAN_STORAGE_DRIVER (default vfs, which works
# everywhere, nested containers included) and --format docker, since the OCI
# image format has no HEALTHCHECK. IMAGE (default seqd) and VERSION name the
# image: IMAGE:VERSION and IMAGE:latest (IMAGE:ibverbs for the variant).
set -euo pipefail
cd "$(dirname "$0")/.."

variant=${1:-default}
IMAGE=${IMAGE:-seqd}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
tag=$(printf '%s' "$VERSION" | tr -c 'A-Za-z0-9_.-' '-')
seqd_uid=10001

case $variant in
default) dockerfile=Dockerfile bindir=bin/dist make=dist tags=("$IMAGE:$tag" "$IMAGE:latest") ;;
ibverbs) dockerfile=Dockerfile.ibverbs bindir=bin/dist-ibverbs make=dist-ibverbs tags=("$IMAGE:$tag-ibverbs" "$IMAGE:ibverbs") ;;
*) echo "usage: $0 [default|ibverbs]" >&2; exit 2 ;;
esac

if docker info >/dev/null 2>&1; then
  engine=(docker)
  fmt=()
elif command -v podman >/dev/null; then
  engine=(podman --storage-driver "${PODMAN_STORAGE_DRIVER:-vfs}")
  fmt=(--format docker)
else
  echo "docker-build: no working docker engine (docker info failed) and no podman" >&2
  exit 1
fi

# Every command of cmd/.
mapfile -t bins < <(find cmd -mindepth 2 -maxdepth 2 -name '*.go' ! -name '*_test.go' -printf '%h\n' | sed 's|^cmd/||' | sort -u)
[ ${#bins[@]} -gt 0 ] || { echo "docker-build: no commands under cmd/" >&2; exit 1; }
for b in "${bins[@]}"; do
  if [ ! -x "$bindir/$b" ]; then
    echo "docker-build: $bindir/$b missing: run make $make first" >&2
    exit 1
  fi
  if command -v file >/dev/null; then
    f=$(file "$bindir/$b")
    if [[ $f == *'not stripped'* ]]; then
      echo "docker-build: $bindir/$b is not stripped (make $make builds with -ldflags '-s -w' -trimpath)" >&2
      exit 1
    fi
    # The scratch image has no libc: refuse dynamically linked binaries.
    if [ "$variant" = default ] && [[ $f != *'statically linked'* ]]; then
      echo "docker-build: $bindir/$b is not statically linked (build with CGO_ENABLED=0)" >&2
      exit 1
    fi
  fi
done

# The build context: only what the image needs (a few MB, not the repo).
ctx=bin/image
rm -rf "$ctx"
mkdir -p "$ctx/rootfs/usr/local/bin" "$ctx/rootfs/etc/ssl/certs" "$ctx/data"
for b in "${bins[@]}"; do cp "$bindir/$b" "$ctx/rootfs/usr/local/bin/"; done
ca=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
if [ ! -s "$ca" ]; then
  echo "docker-build: no CA bundle at $ca (install ca-certificates or set CA_BUNDLE)" >&2
  exit 1
fi
cp "$ca" "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
cat >"$ctx/rootfs/etc/passwd" <<PASSWD
root:x:0:0:root:/root:/sbin/nologin
seqd:x:$seqd_uid:$seqd_uid:seqd:/var/lib/seqd:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
PASSWD
cat >"$ctx/rootfs/etc/group" <<GROUP
root:x:0:
seqd:x:$seqd_uid:
nogroup:x:65534:
GROUP

targs=()
for t in "${tags[@]}"; do targs+=(-t "$t"); done
echo "docker-build: ${engine[*]} build -f $dockerfile ${targs[*]} $ctx"
"${engine[@]}" build "${fmt[@]}" -f "$dockerfile" --build-arg "VERSION=$VERSION" "${targs[@]}" "$ctx"
"${engine[@]}" image inspect --format '{{.Config.User}} {{.Config.Entrypoint}} {{.Config.ExposedPorts}} {{.Config.Volumes}}' "${tags[0]}"
echo "docker-build: ${tags[0]}: $("${engine[@]}" image inspect --format '{{.Size}}' "${tags[0]}") bytes; binaries: $(cd "$bindir" && du -cb "${bins[@]}" | tail -1 | cut -f1) bytes (${bins[*]})"
