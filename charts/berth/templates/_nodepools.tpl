{{/*
EC2 settings per GPU product: instance family, root volume (p-families hold the biggest
models) and the GPUs of the family's smallest size (a DRA pool's node limit). Keep in step with
internal/nodepools and internal/gpu (a Go test compares the rendered objects).
*/}}
{{- define "berth.gpuFamilies" -}}
h100: {family: p5, rootVolume: 500Gi, minGPUs: 8}
h200: {family: p5e, rootVolume: 500Gi, minGPUs: 8}
a100: {family: p4d, rootVolume: 500Gi, minGPUs: 8}
l40s: {family: g6e, rootVolume: 200Gi, minGPUs: 1}
a10g: {family: g5, rootVolume: 200Gi, minGPUs: 1}
l4: {family: g6, rootVolume: 200Gi, minGPUs: 1}
{{- end -}}

{{/* Disruption defaults per role. */}}
{{- define "berth.nodePoolRoles" -}}
inference: {consolidateAfter: 1h, expireAfter: 720h, terminationGracePeriod: 1h0m0s, weight: 20, capacityTypes: [on-demand], gpuLimit: 64}
training: {consolidateAfter: 4h, expireAfter: Never, weight: 10, capacityTypes: [spot, on-demand], gpuLimit: 128}
{{- end -}}
