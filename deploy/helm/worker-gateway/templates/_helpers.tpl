{{/* The chart's name. */}}
{{- define "worker-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The full name of the release's objects. */}}
{{- define "worker-gateway.fullname" -}}
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

{{- define "worker-gateway.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "worker-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of one component (gateway, worker, migration). */}}
{{- define "worker-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "worker-gateway.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "worker-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "worker-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "worker-gateway.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The database URLs, from the Secret: the gateway and the migration Job both use them. */}}
{{- define "worker-gateway.databaseEnv" -}}
- name: GATEWAY_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.existingSecret }}
      key: {{ .Values.database.urlKey }}
{{- if .Values.database.listenUrlKey }}
- name: GATEWAY_LISTEN_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.existingSecret }}
      key: {{ .Values.database.listenUrlKey }}
{{- end }}
{{- end }}

{{/* The grace period must outlast the preStop sleep and the drain. */}}
{{- define "worker-gateway.checkGrace" -}}
{{- $g := .Values.gateway }}
{{- $needed := add (int $g.preStopSleepSeconds) (int $g.drainSeconds) 10 }}
{{- if le (int $g.terminationGracePeriodSeconds) (int $needed) }}
{{- fail (printf "gateway.terminationGracePeriodSeconds (%d) must be longer than preStopSleepSeconds + drainSeconds + 10 (%d): Kubernetes would kill the gateway mid-drain" (int $g.terminationGracePeriodSeconds) (int $needed)) }}
{{- end }}
{{- end }}
