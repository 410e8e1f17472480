{{/*
What the kopf framework itself reads cluster-wide (kopf/_core/reactor/observation.py):
CustomResourceDefinitions to notice the SpyreModel CRD being (re)installed, and, when it
watches a list of namespaces, the namespaces (to notice them appear and go). Read-only.
*/}}
{{- define "spyre-operator.frameworkRules" -}}
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
{{- if eq .Values.rbac.mode "namespaced" }}
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list, watch]
{{- end }}
{{- end }}

{{/*
The nodes, read-only: the Spyre cards they have for pods, which spec.autoscaling's maximum
is checked against (status.autoscaling). Not in a namespace, so in both modes' ClusterRole.
*/}}
{{- define "spyre-operator.nodeRules" -}}
- apiGroups: [""]
  resources: [nodes]
  verbs: [list, watch]
{{- end }}

{{/*
What the operator does in a watched namespace: exactly the calls of kopf and of
spyre_operator.reconcile (tests/chart/test_rbac.py checks each one as this identity).
*/}}
{{- define "spyre-operator.operatorRules" -}}
- apiGroups: [serving.spyre.dev]
  resources: [spyremodels, spyrecaches]
  verbs: [get, list, watch]
- apiGroups: [serving.spyre.dev]
  resources: [spyrecaches]
  verbs: [create, delete]
- apiGroups: [serving.spyre.dev]
  resources: [spyremodels/status, spyrecaches/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [list, watch, create]
# delete: a pull Job that failed and is still queued is deleted to be tried again.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [list, watch, create, patch]
- apiGroups: [""]
  resources: [services]
  verbs: [list, watch, create, patch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, watch, create, patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch]
# Pods' logs: a running compile's progress (operator.progressSeconds) and each serving
# pod's start-up report (did it start from the cache?), read once.
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
# KEDA's ScaledObject of a SpyreModel with spec.autoscaling: read (a 404 without KEDA says
# it is not installed), server-side applied, deleted when spec.autoscaling goes.
- apiGroups: [keda.sh]
  resources: [scaledobjects]
  verbs: [get, create, patch, delete]
# spec.routing: the InferencePool and the HTTPRoute read (a 404 without the CRDs says
# they are not installed), server-side applied, deleted when spec.routing goes (the
# endpoint picker's objects are the pool's: the garbage collector deletes them); the named
# Gateway read; the picker's ServiceAccount and its RoleBinding to the picker ClusterRole
# (bind: that one ClusterRole only).
- apiGroups: [inference.networking.k8s.io]
  resources: [inferencepools]
  verbs: [get, create, patch, delete]
- apiGroups: [gateway.networking.k8s.io]
  resources: [httproutes]
  verbs: [get, create, patch, delete]
- apiGroups: [gateway.networking.k8s.io]
  resources: [gateways]
  verbs: [get]
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [create, patch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [rolebindings]
  verbs: [create, patch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [clusterroles]
  verbs: [bind]
  resourceNames: [{{ include "spyre-operator.fullname" . }}-endpoint-picker]
{{- end }}

{{/*
What an endpoint picker of spec.routing reads in its namespace (the operator binds it
there): the serving pods and their InferencePool (and the inference extension's
objectives, which it watches when their CRD is installed).
*/}}
{{- define "spyre-operator.pickerRules" -}}
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
- apiGroups: [inference.networking.k8s.io]
  resources: [inferencepools]
  verbs: [get, list, watch]
- apiGroups: [inference.networking.x-k8s.io]
  resources: [inferenceobjectives, inferencemodelrewrites]
  verbs: [get, list, watch]
{{- end }}
