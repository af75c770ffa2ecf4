# podmpi — see README.md. Every target is safe to run on a clean clone.
SHELL      := /bin/bash
GO         ?= go
BIN        ?= bin
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT     ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
FUZZTIME   ?= 30s
TESTFLAGS  ?=

.PHONY: all help pictures build test test-short lint vet fmt staticcheck fuzz bench e2e e2e-ompi5 e2e-intelmpi demo images images-prune image-test release clean clean-stale \
        cluster-tool cluster-build cluster-up cluster-down cluster-test cluster-bench

## all: the default: build
all: build

## help: every target with what it does (from the Makefile's ## comments)
help:
	@awk '/^## [a-z][a-z0-9-]*:/ { name = $$2; sub(/:$$/, "", name); d = $$0; sub(/^## [^:]*: */, "", d); \
	    printf "%-15s %s\n", name, d; doc = 1; next } \
	  /^##( |$$)/ && doc { d = $$0; sub(/^## ?/, "", d); printf "%-15s %s\n", "", d; next } \
	  { doc = 0 }' $(firstword $(MAKEFILE_LIST))

## pictures: render every docs/pictures/*.dot to the SVG beside it with
## Graphviz's dot (apt-get install -y graphviz); go test ./docs/ checks that
## each SVG is what its source renders
pictures:
	@command -v dot >/dev/null || { echo "pictures: no dot on PATH; apt-get install -y graphviz"; exit 1; }
	@for f in docs/pictures/*.dot; do echo "dot -Tsvg $$f -o $${f%.dot}.svg"; dot -Tsvg "$$f" -o "$${f%.dot}.svg" || exit 1; done

## build: both binaries into ./bin, laid out as the binaries-only image's
## /opt/podmpi/bin: launcher static, worker-agent (cgo for NVML) linked against
## Debian bullseye's glibc so that it starts on glibc 2.28 and later (the
## bullseye root is built once, as root, into /var/cache/podmpi; without it the
## build says loudly which glibc the binary needs). See scripts/build.sh.
build:
	GO=$(GO) VERSION=$(VERSION) COMMIT=$(COMMIT) ./scripts/build.sh $(BIN)

## test: every unit and integration test with the race detector; the
## network-namespace end-to-end tests run too when root with the tools present
## (otherwise they skip with one line saying what is missing)
test:
	$(GO) test -race -count=1 -timeout 40m $(TESTFLAGS) ./...

## test-short: unit tests only (no network namespaces, no real MPI)
test-short:
	$(GO) test -race -count=1 -short ./...

## lint: gofmt, go vet (cgo and no-cgo) and staticcheck
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint: fmt vet staticcheck

## staticcheck: staticcheck (the version STATICCHECK names, from the module proxy)
staticcheck:
	$(GO) run $(STATICCHECK) ./...

## fmt: fail, naming the files, when gofmt would change a Go file
fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

## vet: go vet with and without cgo
vet:
	$(GO) vet ./...
	CGO_ENABLED=0 $(GO) vet ./...

## fuzz: every Fuzz target in the module for FUZZTIME each (default 30s)
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for t in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //'); do \
	    echo "== $$pkg $$t ($(FUZZTIME))"; \
	    $(GO) test -run='^$$' -fuzz="^$$t$$" -fuzztime=$(FUZZTIME) $$pkg; \
	  done; \
	done

## bench: benchmarks side by side with OpenSSH (root; see BENCHMARKS.md)
bench: build
	./scripts/bench.sh

## e2e: only the multi-host end-to-end tests (root)
e2e:
	$(GO) test -race -count=1 -timeout 30m -v ./test/...

## e2e-ompi5: build (once, cached in /var/cache/podmpi) a Debian trixie root with
## Open MPI 5 and run the PRRTE end-to-end test in it (root, network for apt)
e2e-ompi5:
	./scripts/trixie-rootfs.sh
	PODMPI_E2E_OMPI5=1 $(GO) test -race -count=1 -timeout 20m -v -run TestOpenMPI5 ./test/e2e/

## e2e-intelmpi: install (once, cached in /var/cache/podmpi) Intel MPI from
## PyPI's wheels into a venv and run the Intel MPI end-to-end test (root, PyPI)
e2e-intelmpi:
	./scripts/intelmpi.sh
	PODMPI_E2E_INTELMPI=1 $(GO) test -race -count=1 -timeout 20m -v -run TestIntelMPI ./test/e2e/

## demo: the main job — a real OpenMPI allreduce across 3 worker pods (root)
demo:
	./scripts/demo.sh

## images: runtime images (podman or docker)
images: build
	./images/build.sh

## images-prune: remove superseded podmpi image tags and unused build stages
images-prune:
	./images/prune.sh

## image-test: build the images and run an MPI job across containers (root,
## podman; see images/README.md)
image-test:
	./images/test.sh

## release: VERSION=vX.Y.Z REGISTRY=host[:port]/prefix: the binaries-only
## image (amd64, arm64) and the MPI images (Open MPI and MPICH for amd64
## and arm64, Intel MPI and Horovod for amd64) pushed to REGISTRY as one
## manifest list each, with the SPDX SBOM attached to each image, and
## dist/podmpi-VERSION-linux-<arch>.tar.gz (the /opt/podmpi tree) with
## SHA256SUMS. Refuses a tree with uncommitted changes unless ALLOW_DIRTY=1;
## TLS_VERIFY=false for a plain http registry. See scripts/release.sh.
release:
	VERSION="$(VERSION)" VERSION_ORIGIN="$(origin VERSION)" REGISTRY="$(REGISTRY)" TLS_VERIFY="$(TLS_VERIFY)" ALLOW_DIRTY="$(ALLOW_DIRTY)" \
	  ./scripts/release.sh

## cluster-tool: bin/podmpi-cluster, the single-node Kubernetes of the
## cluster-* targets (test/cluster; its own Go module)
CLUSTER_TOOL := $(BIN)/podmpi-cluster
# Without cgo, as the cluster's own builds: what building the tool compiles
# (client-go, apimachinery) is then reused by the Kubernetes build. env: the
# e2e command also runs as podmpi-cluster run's argv.
CLUSTER_GO := env CGO_ENABLED=0 $(GO)
cluster-tool:
	@mkdir -p $(BIN)
	$(CLUSTER_GO) -C test/cluster build -o $(abspath $(CLUSTER_TOOL)) github.com/podmpi/podmpi/test/cluster/cmd/podmpi-cluster

## cluster-up: a single-node Kubernetes (etcd, API server, controller-manager,
## scheduler, kubelet, containerd, CNI bridge, CoreDNS) with Trainer + JobSet,
## mpi-operator, Kueue, kube-router's NetworkPolicy firewall, the restricted-v2
## admission emulation, the podmpi images and runtimes; builds side by side and
## prints each step's time; reuses what runs; the last line is
## KUBECONFIG=<path> (root; TRAINER_VERSION=v2.0.0 for the old Trainer;
## docs/cluster.md)
cluster-up: cluster-tool
	./scripts/cluster-deps.sh
	$(CLUSTER_TOOL) up

## cluster-build: build the cluster's binaries for every pin (Kubernetes,
## CoreDNS, every pinned controller) into the cache, without starting
## anything (root for the default cache in /var/cache/podmpi, or
## PODMPI_CLUSTER_CACHE)
cluster-build: cluster-tool
	$(CLUSTER_TOOL) build --all

## cluster-down: stop every daemon by PID, remove every mount, link, rule and
## state folder of the cluster (the build cache stays)
cluster-down: cluster-tool
	$(CLUSTER_TOOL) down

## cluster-test: releases this tree into the cluster's registry (make
## release, VERSION from scripts/version.sh, linux/amd64: CLUSTER_RELEASE_PLATFORMS),
## then every example on the cluster under every pinned Trainer and
## mpi-operator (under the shipped NetworkPolicy), the install manifests and
## the Helm chart, the NetworkPolicy, restricted-v2 and Kueue drills, the
## failure drills and metrics, every image pulled from the registry, then
## the leak check (root;
## starts the cluster when none runs and takes it down afterwards). up
## builds the default versions; the older pins build behind the tests, niced.
CLUSTER_RELEASE_PLATFORMS ?= linux/amd64
cluster-test: cluster-tool
	./scripts/cluster-deps.sh
	cd test/cluster && $(CLUSTER_GO) vet ./... && $(CLUSTER_GO) test -count=1 .
	@echo "== cluster-test releases for $(CLUSTER_RELEASE_PLATFORMS) only (arm64's emulated MPI images cost more than the run can spend; make release builds both)"
	PODMPI_CLUSTER_TOOL=$(abspath $(CLUSTER_TOOL)) $(CLUSTER_TOOL) run --build-behind -- bash -c '\
	  PODMPI_RELEASE_PLATFORMS=$(CLUSTER_RELEASE_PLATFORMS) PODMPI_RELEASE_COMPRESSION=zstd \
	    $(MAKE) --no-print-directory release VERSION=$$(scripts/version.sh) \
	    REGISTRY=$$PODMPI_CLUSTER_REGISTRY/podmpi TLS_VERIFY=false ALLOW_DIRTY=1 && \
	  $(CLUSTER_GO) -C test/cluster test -count=1 -timeout 50m -parallel 8 -v $(TESTFLAGS) ./e2e/'
	cd test/cluster && PODMPI_CLUSTER_TOOL=$(abspath $(CLUSTER_TOOL)) PODMPI_CLUSTER_LEAKTEST=1 \
	  $(CLUSTER_GO) test -count=1 -timeout 10m -v -run 'TestDownLeavesNothing|TestKilledRunIsCleaned' .

## cluster-bench: TrainJob phases on the cluster, podmpi vs an OpenSSH
## runtime, Open MPI and MPICH, at 2 and 4 nodes (root; the figures in
## BENCHMARKS.md; PODMPI_CLUSTER_BENCH_NODES=16,32 for more)
cluster-bench: cluster-tool
	./scripts/cluster-deps.sh
	PODMPI_CLUSTER_TOOL=$(abspath $(CLUSTER_TOOL)) PODMPI_CLUSTER_BENCH=1 $(CLUSTER_TOOL) run -- \
	  $(CLUSTER_GO) -C test/cluster test -count=1 -timeout 60m -v -run TestBench ./e2e/

## clean-stale: remove namespaces and processes left by an interrupted test run
clean-stale:
	$(GO) run ./test/harness/cmd/harness-cleanup

## clean: remove bin/
clean:
	rm -rf $(BIN) $(BIN)/../libexec
