#!/usr/bin/env bash
# Regenerates every generated file from its source (`make generate`); hack/verify-generated.sh
# runs it and fails on drift. Each step names what it writes.
#
#   1. deepcopy code for the API types            api/v1alpha1/zz_generated.deepcopy.go
#   2. CRDs and the controller's RBAC role        config/crd/bases, config/rbac/role.yaml
#   3. the rig's Karpenter instance types         test/testdata/gpu-instance-types.json
#   4. the pod-gate webhook configuration         config/webhook/manifests.yaml
#   5. the seat PriorityClass                     config/scheduling/priorityclass.yaml
#   6. the metrics reference                      docs/metrics.md
#   7. the PodGroup API and command reference     docs/reference.md
#   8. the Helm chart's copies of config/         charts/berth/files (CRDs in files/crds)
#   9. NodePool templates per GPU family          examples/nodepools
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}
gen="$(hack/build-tools.sh controller-gen)/bin/controller-gen"

"$gen" object paths=./api/...
"$gen" crd rbac:roleName=berth-controller paths=./api/... paths=./controllers/... \
  output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
go run ./hack/gen-instance-types test/testdata/gpu-instance-types.json
go run ./hack/gen-webhook config/webhook/manifests.yaml
go run ./hack/gen-priorityclass config/scheduling/priorityclass.yaml
go run ./hack/gen-metrics-doc docs/metrics.md
go run ./hack/gen-reference config/crd/bases/scheduling.berth.dev_podgroups.yaml docs/reference.md

# The Helm chart ships config/'s CRDs, RBAC rules, webhook, PriorityClass, alerts and dashboard.
mkdir -p charts/berth/files/crds charts/berth/files/rbac
cp config/crd/bases/*.yaml charts/berth/files/crds/
cp config/rbac/role.yaml config/rbac/scaler.yaml config/rbac/scaler-warm-seats.yaml config/rbac/scaler-models.yaml config/rbac/agent.yaml config/rbac/metrics-reader.yaml charts/berth/files/rbac/
cp config/webhook/manifests.yaml charts/berth/files/pod-gate-webhook.yaml
cp config/scheduling/priorityclass.yaml charts/berth/files/priorityclass.yaml
cp config/prometheus/rules.yaml charts/berth/files/prometheus-rules.yaml
cp config/grafana/berth-dashboard.json charts/berth/files/berth-dashboard.json

bin=$(mktemp -d)/berth
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./cmd/berth
for role in inference training; do
  for family in h100 h200 a100 l40s a10g l4; do
    "$bin" nodepools render --family "$family" --role "$role" --cluster-name my-cluster > "examples/nodepools/gpu-$family-$role.yaml"
  done
done
