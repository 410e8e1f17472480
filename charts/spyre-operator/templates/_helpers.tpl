{{/* The chart's name (nameOverride wins). */}}
{{- define "spyre-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the prefix of every object this chart creates. */}}
{{- define "spyre-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "spyre-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "spyre-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "spyre-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "spyre-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: spyre-serving
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "spyre-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "spyre-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "spyre-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
The namespaces to watch: an empty list means every namespace (rbac.mode=cluster). The
schema already ties the list to the mode; this repeats the check so the message is plain.
*/}}
{{- define "spyre-operator.watchNamespaces" -}}
{{- if eq .Values.rbac.mode "namespaced" }}
{{- if not .Values.watchNamespaces }}
{{- fail "watchNamespaces: rbac.mode=namespaced needs at least one namespace to watch" }}
{{- end }}
{{- toJson .Values.watchNamespaces }}
{{- else }}
{{- if .Values.watchNamespaces }}
{{- fail "watchNamespaces: must be empty with rbac.mode=cluster (the operator watches every namespace); set rbac.mode=namespaced to watch only these" }}
{{- end }}
{{- toJson list }}
{{- end }}
{{- end }}

{{/* The webhook's Service, ValidatingWebhookConfiguration, roles and Certificate. */}}
{{- define "spyre-operator.webhookName" -}}
{{- printf "%s-webhook" (include "spyre-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "spyre-operator.webhookCertManager" -}}
{{- if and .Values.webhook.enabled (eq .Values.webhook.certificates.source "cert-manager") }}true{{ end }}
{{- end }}

{{- define "spyre-operator.webhookServiceCA" -}}
{{- if and .Values.webhook.enabled (eq .Values.webhook.certificates.source "openshift-service-ca") }}true{{ end }}
{{- end }}

{{/* Someone else (cert-manager, OpenShift's service CA) issues the webhook's certificate
into the Secret <webhook>-tls, mounted into the operator pod, and injects the caBundle. */}}
{{- define "spyre-operator.webhookCertsMounted" -}}
{{- if or (include "spyre-operator.webhookCertManager" .) (include "spyre-operator.webhookServiceCA" .) }}true{{ end }}
{{- end }}

{{/* The `helm test` objects: not the operator's selector labels, so never taken for it. */}}
{{- define "spyre-operator.testLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: test
app.kubernetes.io/part-of: spyre-serving
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
