# berth — see README.md. The two commands that do everything: `make demo` and `make test`.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
# karpenter-provider-aws v1.15.0 needs Go >= 1.26.9; the Go module proxy serves go1.27.3.
export GOTOOLCHAIN := go1.27.3
# go-nvml's cgo binding compiles NVML's header, which marks some calls deprecated; keep builds quiet.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/berth-dev/berth/internal/version.Version=$(VERSION) -X github.com/berth-dev/berth/internal/version.Commit=$(COMMIT)
BERTH   := bin/berth
# The rig's binaries and assets: built once from the Go module proxy by `make tools`, cached
# outside the repo. Computed once here (a hash of the tools modules); nothing is built by it.
TOOLS_DIR := $(shell hack/build-tools.sh --dir)
export BERTH_TOOLS_DIR := $(TOOLS_DIR)
GO_TEST_FLAGS ?= -race -shuffle=on -timeout=30m

.PHONY: all build image tools generate verify vet lint cross test test-rules test-image test-unit demo bench fuzz clean help release-dry-run

all: build

help: ## Show the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## Build bin/berth.
	go build -ldflags "$(LDFLAGS)" -o $(BERTH) ./cmd/berth

image: ## Build the berth and berth-agent image archives into bin/images without Docker (hack/image; load or push them, see docs/quickstart.md).
	go -C hack/image run . -root ../.. -out bin/images -version $(VERSION) -commit $(COMMIT)

tools: ## Build (or reuse) the rig's binaries, controller-gen and golangci-lint (hack/build-tools.sh).
	@hack/build-tools.sh >/dev/null

generate: ## Regenerate deepcopy, CRDs, RBAC, instance types, references, chart copies (hack/generate.sh).
	hack/generate.sh

vet: ## go vet and gofmt.
	go vet ./...
	go -C hack/image vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^hack/tools/')); \
		if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

lint: ## golangci-lint (.golangci.yml: layering, import aliases, function length…) and the one-vocabulary check.
	"$$(hack/build-tools.sh golangci-lint)/bin/golangci-lint" run ./...
	cd hack/image && "$$(../build-tools.sh golangci-lint)/bin/golangci-lint" run --config ../../.golangci.yml ./...
	go run ./hack/check-vocabulary

cross: ## berth builds for macOS and Linux on arm64 without cgo (agent and dev say where they cannot run); the kubectl-berth plugin for macOS and Windows too.
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 go build -o /dev/null ./cmd/berth
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -o /dev/null ./cmd/berth
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 go build -o /dev/null ./cmd/kubectl-berth
	GOOS=windows GOARCH=amd64 CGO_ENABLED=0 go build -o /dev/null ./cmd/kubectl-berth

verify: vet lint cross ## Regenerate everything and fail if a generated file changed; vet, lint, cross-build.
	hack/verify-generated.sh

test-rules: ## Check and unit-test the Prometheus alert rules with promtool (installs Debian's prometheus package if needed).
	@promtool=$$(hack/ensure-promtool.sh) && \
		$$promtool check rules config/prometheus/rules.yaml && \
		cd config/prometheus && $$promtool test rules rules_test.yaml

release-dry-run: ## The release workflow offline (hack/release-dry-run.sh): images with SPDX SBOMs, pushed to a loopback registry, signed and attested with cosign, the chart packaged with their digests pinned, pushed and signed; every signature verified offline. Output in bin/release-dry-run.
	hack/release-dry-run.sh bin/release-dry-run

test-image: ## Build both image archives and check them: entrypoint, the binary from the layers runs, berth static, every library the agent links inside its image.
	go -C hack/image test -count=1 -timeout=30m ./...

test: verify test-rules test-image tools ## Everything CI runs: verify, unit tests and rig tests (real apiserver, scheduler, kcm, kwok, Karpenter, KEDA).
	BERTH_REQUIRE_RIG=1 go test $(GO_TEST_FLAGS) ./...

test-unit: ## Unit tests only (no rig).
	go test $(GO_TEST_FLAGS) $$(go list ./... | grep -v /test/)

demo: build ## Start the local dev cluster (berth dev up) and run the demo scenario: builds what the cluster needs to come up (progress with an estimate), starts it and plays the first scenes while KEDA builds behind them.
	@hack/build-tools.sh --demo >/dev/null
	@mkdir -p bin && (hack/build-tools.sh keda-operator keda-adapter >bin/keda-build.log 2>&1 &) && \
		echo "KEDA builds in the background (~15 min cold; log bin/keda-build.log): the cluster starts it once built, the autoscale scene waits for it."
	$(BERTH) dev up --tools-dir "$(TOOLS_DIR)"
	$(BERTH) dev demo
	@echo "The dev cluster keeps running: '$(BERTH) dev status' shows it, '$(BERTH) dev down' stops it."

fuzz: tools ## Long fuzz runs, FUZZTIME each (default 5m): gang placement, the pod-gate webhook, the ledger (no GPU promised twice); then random PodGroup specs through CRD validation and random gangs through the controller on the rig, PROPERTY_ROUNDS rounds (default 20) from a random seed (short runs are in make test).
	go test ./scheduling -run='^$$' -fuzz='^FuzzPlace$$' -fuzztime=$(or $(FUZZTIME),5m)
	go test ./controllers/podgroup/gate -run='^$$' -fuzz='^FuzzGate$$' -fuzztime=$(or $(FUZZTIME),5m)
	go test ./internal/ledger -run='^$$' -fuzz='^FuzzNoGPUPromisedTwice$$' -fuzztime=$(or $(FUZZTIME),5m)
	seed=$${BERTH_PROPERTY_SEED:-$$RANDOM}; echo "property seed $$seed"; \
		for i in $$(seq 1 $(or $(PROPERTY_ROUNDS),20)); do \
			BERTH_REQUIRE_RIG=1 BERTH_PROPERTY_SEED=$$((seed + i * 7919)) go test -count=1 -run='^TestRandomPodGroupSpecs$$' ./test/integration/api || exit 1; \
		done; \
		BERTH_REQUIRE_RIG=1 BERTH_PROPERTY_SEED=$$seed BERTH_PROPERTY_ROUNDS=$(or $(PROPERTY_ROUNDS),20) go test -count=1 -timeout=60m -run='^TestRandomGangsThroughTheController$$' ./test/integration/gang

bench: tools ## Benchmarks (results in docs/benchmarks.md).
	go test -run='^$$' -bench=. -benchmem -timeout=60m ./...

clean: ## Remove build output (the tools cache stays; see hack/build-tools.sh).
	rm -rf bin
