{{/*
EC2 settings per GPU product: instance family and root volume (p-families hold the biggest
models). Keep in step with internal/nodepools (a Go test compares the rendered objects).
*/}}
{{- define "berth.gpuFamilies" -}}
h100: {family: p5, rootVolume: 500Gi}
h200: {family: p5e, rootVolume: 500Gi}
a100: {family: p4d, rootVolume: 500Gi}
l40s: {family: g6e, rootVolume: 200Gi}
a10g: {family: g5, rootVolume: 200Gi}
l4: {family: g6, rootVolume: 200Gi}
{{- end -}}

{{/* Disruption defaults per role. */}}
{{- define "berth.nodePoolRoles" -}}
inference: {consolidateAfter: 1h, expireAfter: 720h, terminationGracePeriod: 1h0m0s, weight: 20, capacityTypes: [on-demand], gpuLimit: 64}
training: {consolidateAfter: 4h, expireAfter: Never, weight: 10, capacityTypes: [spot, on-demand], gpuLimit: 128}
{{- end -}}
