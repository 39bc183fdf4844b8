# seqd — see README.md.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/seqd/seqd/internal/version.Version=$(VERSION)
BIN     := bin

.PHONY: all build build-ibverbs test-ibverbs-fake test-nic-wire test test-short lint run bench bench-verbs bench-xdp bench-client bench-server bench-server-xdp bench-erpc fuzz-short clean dist dist-ibverbs docker docker-ibverbs docker-smoke check-guide check-deploy lossy soak cross storm bench-remote

all: build

build:
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

# The libibverbs provider: needs cgo and libibverbs-dev (rdma-core).
build-ibverbs:
	CGO_ENABLED=1 $(GO) build -tags ibverbs -ldflags '$(LDFLAGS)' -o $(BIN)/ibverbs/ ./cmd/...
	CGO_ENABLED=1 $(GO) vet -tags ibverbs ./verbs/ibv/

# The libibverbs provider's post, poll, GRH, async-event and batching paths
# against the fake ibv_context (verbs/ibv/fake.go): no NIC needed.
test-ibverbs-fake:
	CGO_ENABLED=1 $(GO) test -race -count=1 -tags ibverbs,ibverbs_fake ./verbs/ibv/

# The wire tests of the userspace provider against what a NIC does (root,
# ethtool and python3-scapy): GSO segments' ICRCs for their real IPv4 IDs,
# the NIC-like peer (nicwire=on) both ways, the RoCEv2 port shared by
# several queues, and seqd's server and clients against the NIC-like peer
# both ways (e2e/multihost). make test runs them too; this is the short way.
test-nic-wire:
	$(GO) test -count=1 -run 'GSOSegmentsOnTheWire|NICWire|SharedRoCEPort|ScapyVector' -v ./verbs/soft/ ./verbs/rocev2/ ./e2e/multihost/

# The public client and the command-line tools build for other systems
# (the soft provider fails at run time there): CGO_ENABLED=0, darwin and
# windows.
cross:
	for os in darwin windows; do CGO_ENABLED=0 GOOS=$$os $(GO) build -o /dev/null ./client/... ./cmd/seqctl ./cmd/loadgen || exit 1; done

# The README's test command: lint, then every test with the race detector,
# through scripts/testsummary: a line per package as it ends, the full
# output of what failed, then each skipped test with its reason (tests
# that need something missing, such as tshark, an RDMA device or etcd,
# skip and say why) and the closing line "N passed, N failed, N skipped".
# Exits non-zero on any failure or build error.
test: lint
	@mkdir -p $(BIN) && $(GO) build -o $(BIN)/testsummary ./scripts/testsummary
	./$(BIN)/testsummary $(GO) test -json -race -timeout 15m ./...

test-short:
	$(GO) test -short ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# Starts seqd with its defaults: loopback, userspace provider, Spec-S0,
# hybrid timestamps, data in ./seqd-data. -init: on a fresh checkout
# ./seqd-data does not exist yet, and seqd takes a missing data directory
# for a new deployment only when told; an existing mark is always loaded.
run: build
	./$(BIN)/seqd -init

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# Header-only UD echo through the userspace provider next to raw UDP
# GSO/GRO, and ping-pong RTT for both, measured in the same run.
bench-verbs:
	./scripts/bench-verbs.sh

# Receive paths for 28-byte RoCEv2-sized packets over veth between two
# namespaces (root): UDP recvmmsg, UDP GRO, AF_XDP copy mode (native and
# generic XDP), one sender, interleaved (docs/kernel-bypass.md).
# XDPBENCH_PERF=DIR also records a perf profile of each path.
bench-xdp:
	$(GO) test -c -o /tmp/seqd-xdpprobe.test ./verbs/soft/internal/xdpprobe/
	SEQD_XDPBENCH=1 SEQD_XDPBENCH_ROUNDS=$(or $(ROUNDS),5) SEQD_XDPBENCH_PERF=$(XDPBENCH_PERF) /tmp/seqd-xdpprobe.test -test.run '^TestReceiveRates$$' -test.v -test.timeout 15m

# The client library against an in-process seqd (serial latency, pipelined
# throughput), next to the transport's echo figures from the same run.
bench-client:
	./scripts/bench-client.sh

# The server, not the client: loadgen's wire-level generator against the
# provider's echo server, a raw UDP echo and seqd (one worker), each on the
# same core, at 1, 64 and 1024 flows, and Redis INCR; ends with one
# seqd_mops=… floor_mops=… ratio=… flows=… line per flow count
# (scripts/bench-server.sh). A benchmark: never part of make test.
bench-server:
	./scripts/bench-server.sh

# The eRPC mode's experiments (issue 30, thesis chapter 6), each a ratio
# to a reference from the same run: serial latency against spec-s0 and a
# raw UDP ping-pong (Table 6.1), loss 1e-6..1e-2 and 30% both ways
# (Table 6.3), and Timely's rates with no bottleneck; prints the tables
# (scripts/bench-erpc.sh; ROUNDS, BENCHTIME, PARTS). Never part of make test.
bench-erpc:
	./scripts/bench-erpc.sh

# Only the AF_XDP half of bench-server: seqd over veth on the UDP socket
# and on AF_XDP (xdp=), same run (scripts/bench-server-xdp.sh; root).
bench-server-xdp:
	./scripts/bench-server-xdp.sh

# loadgen -verify in every mode under injected loss (1e-3..1e-1),
# reordering and duplication: throughput and p99 per rate per mode
# (scripts/lossy.sh); fails on any violation. LOSSY_DURATION per point.
lossy:
	./scripts/lossy.sh $(LOSSY_DURATION)

# The soak: the seqd binary under paced mixed-mode load for DURATION with
# mode switches, loss bursts and kill -9 restarts, all verified; reports
# violations, calls served, seqd's RSS and goroutines (e2e/soak_test.go).
DURATION ?= 10m
soak:
	SEQD_SOAK=$(DURATION) $(GO) test -count=1 -run '^TestSoak$$' -v -timeout 0 ./e2e/

# The multi-host rig's 1,000-session connect storms: seqd restarted with
# kill -9, and an HA leader killed, with 1,000 sessions on four other
# hosts (network namespaces; needs root and etcd). Prints RIG lines with
# the recovery times (e2e/multihost). make test runs the restart storm;
# the HA one runs only here (SEQD_RIG_STORM=1) and in CI on its own: it
# needs the machine to itself.
storm:
	SEQD_RIG_STORM=1 $(GO) test -count=1 -run 'Storm1000' -v -timeout 20m ./e2e/multihost/

# loadgen against a seqd on another host (network namespace) next to a
# seqd on loopback, in the same run (needs root): the RIG loadgen line.
bench-remote:
	$(GO) test -count=1 -run '^TestLoadgenRemoteVsLoopback$$' -v ./e2e/multihost/

# Each fuzz target for a short time (CI).
fuzz-short:
	./scripts/fuzz-short.sh $(FUZZTIME)

# The binaries the images ship: every command of cmd/ (seqd, seqctl,
# loadgen, seqd-pd), stripped of the symbol table and DWARF (-s -w) and of
# the build machine's paths (-trimpath). Stack traces and pprof still name
# functions and lines (Go keeps its own line tables); a debugger needs
# `make build`'s unstripped binaries.
DIST_LDFLAGS := $(LDFLAGS) -s -w
dist:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(DIST_LDFLAGS)' -o $(BIN)/dist/ ./cmd/...

dist-ibverbs:
	CGO_ENABLED=1 $(GO) build -trimpath -tags ibverbs -ldflags '$(DIST_LDFLAGS)' -o $(BIN)/dist-ibverbs/ ./cmd/...

# The container image (Dockerfile, FROM scratch: pulls nothing) from the
# static, stripped binaries, with docker or else podman
# (scripts/docker-build.sh).
docker: dist
	VERSION=$(VERSION) ./scripts/docker-build.sh default

# The libibverbs image (Dockerfile.ibverbs): pulls debian:bookworm-slim and
# rdma-core packages, so it needs registry access; not built in CI.
docker-ibverbs: dist-ibverbs
	VERSION=$(VERSION) ./scripts/docker-build.sh ibverbs

# Starts the image's entrypoint and checks its HEALTHCHECK, /metrics, the
# data volume, and that it ships every command of cmd/, stripped
# (scripts/docker-smoke.sh).
docker-smoke:
	./scripts/docker-smoke.sh

# Runs every command of the operator's guide (docs/operations.md), and the
# README's marked blocks (multi-host, HA, the PD program), against seqd in
# private namespaces (scripts/check-guide.sh); the PD programs build from
# their go.mod with go mod tidy (the newest PD client and the 2022 one).
check-guide: build
	./scripts/check-guide.sh docs/operations.md
	./scripts/check-guide.sh --marked-only README.md

# The deployment files: alert rules (promtool), the systemd unit, the
# example config and the dashboard against a running seqd (deploy/).
check-deploy:
	promtool check rules deploy/prometheus/seqd-alerts.yml
	promtool test rules deploy/prometheus/seqd-alerts_test.yml
	$(GO) test -count=1 ./deploy/

clean:
	rm -rf $(BIN)
