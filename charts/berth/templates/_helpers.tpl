{{/* Common labels of every object. */}}
{{- define "berth.labels" -}}
app.kubernetes.io/name: berth
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* Selector labels of one component: (dict "ctx" $ "component" "controller"). */}}
{{- define "berth.selector" -}}
app.kubernetes.io/name: berth
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* An image reference: (dict "image" .Values.image "ctx" $): repository@digest when a digest
is set, repository:tag otherwise (tag defaults to the chart's appVersion). */}}
{{- define "berth.imageRef" -}}
{{- if .image.digest -}}
{{ .image.repository }}@{{ .image.digest }}
{{- else -}}
{{ .image.repository }}:{{ .image.tag | default .ctx.Chart.AppVersion }}
{{- end }}
{{- end }}

{{- define "berth.image" -}}
{{ include "berth.imageRef" (dict "image" .Values.image "ctx" .) }}
{{- end }}

{{- define "berth.agentImage" -}}
{{ include "berth.imageRef" (dict "image" .Values.agent.image "ctx" .) }}
{{- end }}

{{/* Restricted pod security (Pod Security Standards "restricted"). */}}
{{- define "berth.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "berth.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "berth.webhookService" -}}
{{ .Release.Name }}-webhook
{{- end }}
