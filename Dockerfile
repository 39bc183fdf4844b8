# seqd container image: the static seqd, seqctl, loadgen and seqd-pd
# (CGO_ENABLED=0, userspace RoCEv2-over-UDP provider; stripped with
# -ldflags '-s -w' and built with -trimpath) on an empty base.
#
# Build it with `make docker`, not `docker build .`: the Makefile runs
# `make dist` on the host (bin/dist/: every command of cmd/, stripped),
# then scripts/docker-build.sh stages a small
# build context (bin/image/: the binaries, the host's CA bundle, a minimal
# passwd/group with a non-root seqd user, an empty data directory) and
# builds this file with docker, or with podman where no docker engine
# answers. Nothing is pulled: the image builds with no registry access.
#
# Run it (see docs/operations.md, "Container"), with an admin token file:
#
#   umask 077; head -c 32 /dev/urandom | base64 > admin-tokens
#   sudo chown 10001 admin-tokens      # the image's seqd user reads it (0600)
#   docker run -d --name seqd -v seqd-data:/var/lib/seqd \
#     -v "$PWD/admin-tokens:/run/secrets/seqd-admin-tokens:ro" \
#     -p 7070:7070 -p 9464:9464 -p 4791:4791/udp \
#     seqd:latest -init -device <container or host IPv4>:4791
#
# The admin plane listens on 0.0.0.0 with authorisation ON: mutating calls
# (seqctl advance, set-mode, transfer-leader) need a bearer token of
# /run/secrets/seqd-admin-tokens (seqctl -token-file), and seqd does not
# start without that file (a Docker or Compose secret of that name works
# too). To run without a credential, which lets anyone who reaches port 7070
# move the counter, append -admin-insecure-no-auth.
#
# -init is for a new volume only: without it seqd refuses a data directory
# with no mark file (a lost or unmounted volume is not a fresh start). Once
# the volume holds a mark, recreate the container without -init.
#
# The admin (gRPC) and metrics listeners bind 0.0.0.0 here; seqd's own
# defaults are loopback, which is useless inside a container. The soft
# provider's address is its RoCEv2 GID, which peers must reach: CMD
# defaults it to 127.0.0.1:4791 (reachable only from inside the
# container, e.g. `docker exec seqd loadgen`); operators pass the address
# clients reach, either directly (-device 192.0.2.10:4791 with host
# networking) or by listening on every address and advertising one:
#   -device 0.0.0.0:4791 -provider-opts advertise=<pod or host IPv4>
FROM scratch

ARG VERSION=dev
LABEL org.opencontainers.image.title="seqd" \
      org.opencontainers.image.description="seqd sequencer / timestamp oracle (userspace RoCEv2 provider)" \
      org.opencontainers.image.source="https://github.com/seqd/seqd" \
      org.opencontainers.image.version="${VERSION}"

# /etc/passwd, /etc/group, /etc/ssl/certs/ca-certificates.crt and
# /usr/local/bin/{seqd,seqctl,loadgen,seqd-pd}. seqd-pd (the PD-compatible
# TSO front end) runs from the same image with --entrypoint
# /usr/local/bin/seqd-pd (docs/operations.md, "Container").
COPY rootfs/ /
# The data directory, owned by the seqd user (uid/gid 10001).
COPY --chown=10001:10001 data/ /var/lib/seqd/

USER 10001:10001
WORKDIR /var/lib/seqd
VOLUME ["/var/lib/seqd"]

# 4791/udp: data plane (RoCEv2); 7070: admin gRPC; 9464: Prometheus /metrics.
EXPOSE 4791/udp 7070/tcp 9464/tcp

# seqctl exits 0 only when the admin plane reports SERVING.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/seqctl", "-admin", "127.0.0.1:7070", "-timeout", "2s", "health"]

# Flags after the image name on `docker run` are appended to ENTRYPOINT and
# replace CMD; a flag given twice takes its last value.
ENTRYPOINT ["/usr/local/bin/seqd", "-data", "/var/lib/seqd", "-admin", "0.0.0.0:7070", "-metrics", "0.0.0.0:9464", "-admin-token-file", "/run/secrets/seqd-admin-tokens"]
CMD ["-device", "127.0.0.1:4791"]
