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
# The rig's binaries and assets (built once from the Go module proxy, cached outside the repo).
TOOLS_DIR = $(shell hack/build-tools.sh)
GO_TEST_FLAGS ?= -race -shuffle=on -timeout=30m

.PHONY: all build tools generate verify vet test test-rules test-unit test-rig demo bench clean help

all: build

help: ## Show the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## Build bin/berth.
	go build -ldflags "$(LDFLAGS)" -o $(BERTH) ./cmd/berth

tools: ## Build (or reuse) the rig's binaries: etcd, kube-*, kwok, karpenter-kwok, KEDA, controller-gen.
	@hack/build-tools.sh >/dev/null

generate: tools ## Regenerate deepcopy, CRDs, RBAC and the rig's instance types.
	"$(TOOLS_DIR)/bin/controller-gen" object paths=./api/...
	"$(TOOLS_DIR)/bin/controller-gen" crd rbac:roleName=berth-controller paths=./api/... paths=./controllers/... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	go run ./hack/gen-instance-types test/testdata/gpu-instance-types.json
	go run ./hack/gen-webhook config/webhook/manifests.yaml
	go run ./hack/gen-priorityclass config/scheduling/priorityclass.yaml
	go run ./hack/gen-metrics-doc docs/metrics.md
	go run ./hack/gen-reference config/crd/bases/scheduling.berth.dev_podgroups.yaml docs/reference.md
	@# The Helm chart ships config/'s CRDs, RBAC rules, webhook, PriorityClass, alerts and dashboard.
	mkdir -p charts/berth/crds charts/berth/files/rbac
	cp config/crd/bases/*.yaml charts/berth/crds/
	cp config/rbac/role.yaml config/rbac/scaler.yaml config/rbac/agent.yaml charts/berth/files/rbac/
	cp config/webhook/manifests.yaml charts/berth/files/pod-gate-webhook.yaml
	cp config/scheduling/priorityclass.yaml charts/berth/files/priorityclass.yaml
	cp config/prometheus/rules.yaml charts/berth/files/prometheus-rules.yaml
	cp config/grafana/berth-dashboard.json charts/berth/files/berth-dashboard.json
	go build -o bin/berth ./cmd/berth && for r in inference training; do for f in h100 h200 a100 l40s a10g l4; do \
		bin/berth nodepools render --family $$f --role $$r --cluster-name my-cluster > examples/nodepools/gpu-$$f-$$r.yaml; done; done

vet: ## go vet and gofmt.
	go vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^hack/tools/')); \
		if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

verify: tools vet ## Regenerate everything and fail if a generated file changed.
	hack/verify-generated.sh

test-rules: ## Check and unit-test the Prometheus alert rules with promtool (installs Debian's prometheus package if needed).
	@promtool=$$(hack/ensure-promtool.sh) && \
		$$promtool check rules config/prometheus/rules.yaml && \
		cd config/prometheus && $$promtool test rules rules_test.yaml

test: verify test-rules ## Everything CI runs: verify, unit tests and rig tests (real apiserver, scheduler, kcm, kwok, Karpenter).
	BERTH_TOOLS_DIR="$(TOOLS_DIR)" BERTH_REQUIRE_RIG=1 go test $(GO_TEST_FLAGS) ./...

test-unit: ## Unit tests only (no rig).
	go test $(GO_TEST_FLAGS) $$(go list ./... | grep -v /test/)

demo: build tools ## Start the local dev cluster (berth dev up) and run the demo scenario.
	$(BERTH) dev up --tools-dir "$(TOOLS_DIR)"
	$(BERTH) dev demo
	@echo "The dev cluster keeps running: '$(BERTH) dev status' shows it, '$(BERTH) dev down' stops it."

bench: tools ## Benchmarks (results in docs/benchmarks.md).
	BERTH_TOOLS_DIR="$(TOOLS_DIR)" go test -run='^$$' -bench=. -benchmem -timeout=60m ./...

clean: ## Remove build output (the tools cache stays; see hack/build-tools.sh).
	rm -rf bin
