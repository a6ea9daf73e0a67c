package rig

import berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"

// Pods' run time. kwok's own pod-complete Stage ends every Job-owned pod the moment it runs, so
// nothing can happen to a Job-based gang while it runs. The rig replaces it with three Stages:
//
//   - a pod annotated berthv1alpha1.DevRunTimeAnnotation runs that long (any owner), then exits
//     with berthv1alpha1.DevExitCodeAnnotation (default 0): Succeeded, or Failed for any other code;
//   - a pod with only the exit-code annotation exits with it as soon as it runs;
//   - a Job-owned pod with neither exits 0 at once, as kwok's Stage did.
//
// Pods of other owners without the annotations run until deleted.
//
// Deletion is what a kubelet does, not what kwok's own pod-delete Stage does (strip every
// finalizer and delete at once): a deleted pod on a node first ends — its containers report
// exit code 143 (SIGTERM) and the pod Failed — and is then deleted, keeping others' finalizers
// (the Job controller's tracking finalizer), so a Job counts a lost pod the way it does in a
// cluster, and its pod failure policy applies.

// replacedUpstreamStages are kwok's Stage files the rig's pod Stages replace.
var replacedUpstreamStages = map[string]bool{"pod-complete.yaml": true, "pod-delete.yaml": true}

// endedConditions are the conditions of a pod whose containers ended: Ready and ContainersReady
// False, every other condition kept (kwok patches status with a merge patch, which would replace
// the list, and with it, say, the DisruptionTarget condition an eviction set, which a Job's pod
// failure policy reads).
const endedConditions = `      conditions:
      {{ range .status.conditions }}{{ if and (ne .type "Ready") (ne .type "ContainersReady") }}
      - type: {{ .type | Quote }}
        status: {{ .status | Quote }}
        {{ with .reason }}reason: {{ . | Quote }}{{ end }}
        {{ with .message }}message: {{ . | Quote }}{{ end }}
        {{ with .lastTransitionTime }}lastTransitionTime: {{ . | Quote }}{{ end }}
      {{ end }}{{ end }}
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        reason: PodCompleted
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        reason: PodCompleted
        type: ContainersReady
`

// podFinishTemplate is the status a finished pod reports: every container terminated with the
// exit code from the annotation, phase from the code.
const podFinishTemplate = `    statusTemplate: |
      {{ $now := Now }}
      {{ $annotations := or .metadata.annotations dict }}
      {{ $code := or ( index $annotations "` + berthv1alpha1.DevExitCodeAnnotation + `" ) "0" }}
      {{ $reason := "Completed" }}{{ if ne $code "0" }}{{ $reason = "Error" }}{{ end }}
      {{ $root := . }}
` + endedConditions + terminatedContainers + `      phase: {{ if eq $code "0" }}Succeeded{{ else }}Failed{{ end }}
`

// terminatedContainers is every container terminated with exit code $code and reason $reason
// (template variables the status template sets before it).
const terminatedContainers = `      containerStatuses:
      {{ range $index, $item := .spec.containers }}
      - image: {{ $item.image | Quote }}
        name: {{ $item.name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: {{ $code }}
            finishedAt: {{ $now | Quote }}
            reason: {{ $reason }}
            startedAt: {{ $now | Quote }}
      {{ end }}
`

// podFinishStages are the three Stages described above, as YAML documents.
const podFinishStages = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: berth-pod-run-time
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: ["Running"]
    - key: '.metadata.annotations["` + berthv1alpha1.DevRunTimeAnnotation + `"]'
      operator: Exists
  delay:
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.annotations["` + berthv1alpha1.DevRunTimeAnnotation + `"]'
  next:
` + podFinishTemplate + `---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: berth-pod-exit-code
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: ["Running"]
    - key: '.metadata.annotations["` + berthv1alpha1.DevRunTimeAnnotation + `"]'
      operator: DoesNotExist
    - key: '.metadata.annotations["` + berthv1alpha1.DevExitCodeAnnotation + `"]'
      operator: Exists
  next:
` + podFinishTemplate + `---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-complete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: ["Running"]
    - key: '.metadata.ownerReferences.[].kind'
      operator: In
      values: ["Job"]
    - key: '.metadata.annotations["` + berthv1alpha1.DevRunTimeAnnotation + `"]'
      operator: DoesNotExist
    - key: '.metadata.annotations["` + berthv1alpha1.DevExitCodeAnnotation + `"]'
      operator: DoesNotExist
  next:
` + podFinishTemplate + `---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: berth-pod-terminate
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: Exists
    - key: '.spec.nodeName'
      operator: Exists
    - key: '.status.phase'
      operator: NotIn
      values: ["Succeeded", "Failed"]
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $code := 143 }}{{ $reason := "Error" }}
` + endedConditions + terminatedContainers + `      phase: Failed
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: Exists
    - key: '.status.phase'
      operator: In
      values: ["Succeeded", "Failed"]
  next:
    delete: true
`
