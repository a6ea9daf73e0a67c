{{/* The prefix of every object's name: fullnameOverride, or the release's name. */}}
{{- define "berth.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- end }}

{{/* The app.kubernetes.io/name label: nameOverride, or berth. */}}
{{- define "berth.name" -}}
{{- default "berth" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/* Common labels of every object. */}}
{{- define "berth.labels" -}}
app.kubernetes.io/name: {{ include "berth.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component: (dict "ctx" $ "component" "controller"). */}}
{{- define "berth.selector" -}}
app.kubernetes.io/name: {{ include "berth.name" .ctx }}
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
{{- $d := dict "runAsNonRoot" true "runAsUser" 65532 "runAsGroup" 65532 "seccompProfile" (dict "type" "RuntimeDefault") }}
{{- toYaml (mergeOverwrite $d (deepCopy (.Values.podSecurityContext | default dict))) }}
{{- end }}

{{/* The restricted defaults, with containerSecurityContext's fields over them (an SELinux type,
a platform's required profile). */}}
{{- define "berth.containerSecurityContext" -}}
{{- $d := dict "allowPrivilegeEscalation" false "readOnlyRootFilesystem" true "runAsNonRoot" true "capabilities" (dict "drop" (list "ALL")) "seccompProfile" (dict "type" "RuntimeDefault") }}
{{- toYaml (mergeOverwrite $d (deepCopy (.Values.containerSecurityContext | default dict))) }}
{{- end }}

{{- define "berth.webhookService" -}}
{{ include "berth.fullname" . }}-webhook
{{- end }}

{{/* A component's ServiceAccount name: (dict "ctx" $ "component" "controller" "sa" .Values.controller.serviceAccount). */}}
{{- define "berth.serviceAccountName" -}}
{{- if .sa.create -}}
{{ default (printf "%s-%s" (include "berth.fullname" .ctx) .component) .sa.name }}
{{- else -}}
{{ required (printf "%s.serviceAccount.name is required when %s.serviceAccount.create is false" .component .component) .sa.name }}
{{- end -}}
{{- end }}

{{/* A component's extra pod labels and annotations: (dict "ctx" $ "c" .Values.controller). Goes
under the pod template's metadata, after its labels. */}}
{{- define "berth.podMetadata" -}}
labels:
  {{- include "berth.labels" .ctx | nindent 2 }}
  app.kubernetes.io/component: {{ .component }}
  {{- with .c.podLabels }}{{ toYaml . | nindent 2 }}{{ end }}
{{- with .c.podAnnotations }}
annotations: {{ toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* A component's --log-level and extra arguments: (dict "c" .Values.controller). */}}
{{- define "berth.extraArgs" -}}
- --log-level={{ .c.logLevel }}
{{- range .c.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* NodePools and EC2NodeClasses outlive the release (helm uninstall, a family renamed):
deleting a NodePool makes Karpenter drain every node it launched. */}}
{{- define "berth.keepOnUninstall" -}}
{{- if .Values.nodePools.keepOnUninstall -}}
annotations:
  {{- include "berth.keepAnnotations" . | nindent 2 }}
{{- end -}}
{{- end }}

{{/* What keeps an object through helm uninstall and an Argo CD prune (which ignores Helm's
resource policy). */}}
{{- define "berth.keepAnnotations" -}}
helm.sh/resource-policy: keep
argocd.argoproj.io/sync-options: Prune=false
{{- end }}

{{/* Where the alerts' runbook links point: monitoring.prometheusRule.runbookBaseURL, or the
runbooks of the installed version in berth's repository. */}}
{{- define "berth.runbookBase" -}}
{{- with .Values.monitoring.prometheusRule.runbookBaseURL }}{{ trimSuffix "/" . }}/{{ else }}https://github.com/berth-dev/berth/blob/v{{ trimPrefix "v" .Chart.AppVersion }}/docs/runbooks/{{ end }}
{{- end }}

{{/* How the chart's monitors scrape secure metrics: HTTPS (the components' certificates are
self-signed) with the token of the chart's metrics-reader ServiceAccount. */}}
{{- define "berth.metricsAuth" -}}
{{- if .Values.monitoring.secureMetrics -}}
scheme: https
tlsConfig:
  insecureSkipVerify: true
authorization:
  type: Bearer
  credentials:
    name: {{ include "berth.fullname" . }}-metrics-reader
    key: token
{{- end }}
{{- end }}

{{/* Labels of a ServiceMonitor, PodMonitor or PrometheusRule: release=monitoring.prometheusRelease
(what kube-prometheus-stack's Prometheus selects by), monitoring.additionalLabels and the object's
own, which win: (dict "m" .Values.monitoring "own" <labels>). */}}
{{- define "berth.monitoringLabels" -}}
{{- $release := dict }}
{{- with .m.prometheusRelease }}{{ $release = dict "release" . }}{{ end }}
{{- with merge (dict) (.own | default dict) (.m.additionalLabels | default dict) $release }}{{ toYaml . }}{{ end }}
{{- end }}

{{/* Scrape settings of a monitor endpoint from monitoring.serviceMonitor. */}}
{{- define "berth.scrapeSettings" -}}
interval: {{ .interval }}
{{- with .scrapeTimeout }}
scrapeTimeout: {{ . }}
{{- end }}
{{- with .metricRelabelings }}
metricRelabelings: {{ toYaml . | nindent 0 }}
{{- end }}
{{- end }}

{{/* A workload's volumes: its own (a list, possibly empty) and <component>.extraVolumes:
(dict "own" <list> "extra" .Values.<component>.extraVolumes). Renders the key only when there
are any. */}}
{{- define "berth.volumes" -}}
{{- $all := concat (.own | default list) (.extra | default list) }}
{{- with $all }}
volumes: {{ toYaml . | nindent 0 }}
{{- end }}
{{- end }}

{{/* A container's volume mounts, as berth.volumes: (dict "own" <list> "extra" <list>). */}}
{{- define "berth.volumeMounts" -}}
{{- $all := concat (.own | default list) (.extra | default list) }}
{{- with $all }}
volumeMounts: {{ toYaml . | nindent 0 }}
{{- end }}
{{- end }}

{{/* The controller's ports as a dict (metrics, health, webhook). On the pod network the values'
ports; under controller.hostNetwork the ports are the node's, where Karpenter (8080, 8081, 8443)
and Kueue (8080, 8081, 9443) listen too when they run on the host network: a port left at its
pod-network default (8080, 8081, 9443) moves to berth's own (9340, 9341, 9342). */}}
{{- define "berth.controllerPorts" -}}
{{- $c := .Values.controller }}
{{- $p := dict "metrics" (int $c.metricsPort) "health" (int $c.healthPort) "webhook" (int .Values.webhook.port) }}
{{- if $c.hostNetwork }}
{{- if eq $p.metrics 8080 }}{{ $_ := set $p "metrics" 9340 }}{{ end }}
{{- if eq $p.health 8081 }}{{ $_ := set $p "health" 9341 }}{{ end }}
{{- if eq $p.webhook 9443 }}{{ $_ := set $p "webhook" 9342 }}{{ end }}
{{- end }}
{{- toYaml $p }}
{{- end }}

{{/* A probe: the chart's handler and timings, with <component>.<probe>'s timings over them:
(dict "handler" <dict> "defaults" <dict> "timings" .Values.<component>.<probe>). The handler is
always the chart's (the schema admits timings only). */}}
{{- define "berth.probe" -}}
{{- /* set, not merge: merge would take an explicit 0 (initialDelaySeconds: 0) for unset */ -}}
{{- $p := deepCopy .defaults }}
{{- range $k, $v := (.timings | default dict) }}{{ $_ := set $p $k $v }}{{ end }}
{{- range $k, $v := .handler }}{{ $_ := set $p $k $v }}{{ end }}
{{- toYaml $p }}
{{- end }}
