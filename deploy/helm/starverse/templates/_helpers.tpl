{{/* Names and labels shared by every template. */}}
{{- define "starverse.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "starverse.labels" -}}
app.kubernetes.io/name: starverse
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "starverse.selector" -}}
app.kubernetes.io/name: starverse
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
The environment of every platform process: plain settings from .Values.env, then the secrets
from existing Secrets, one key each (the database and Redis URLs, Stripe's keys, the metrics
token). The `app` Secret is added whole by envFrom.
*/}}
{{- define "starverse.env" -}}
{{- /* production settings refuse to start without it: tenant egress would reach the nodes */ -}}
{{- $_ := required "env.CLUSTER_NODE_CIDR is required: the nodes' addresses, closed to tenant pods" .Values.env.CLUSTER_NODE_CIDR -}}
{{- range $name, $value := .Values.env }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- if .Values.postgresql.cloudnativepg.enabled }}
- name: DATABASE_URL
  valueFrom: {secretKeyRef: {name: {{ printf "%s-app" .Values.postgresql.cloudnativepg.name }}, key: uri}}
{{- else }}
- name: DATABASE_URL
  valueFrom: {secretKeyRef: {name: {{ .Values.secrets.database.name }}, key: {{ .Values.secrets.database.key }}}}
{{- end }}
- name: REDIS_URL
  valueFrom: {secretKeyRef: {name: {{ .Values.secrets.redis.name }}, key: {{ .Values.secrets.redis.key }}}}
- name: STRIPE_SECRET_KEY
  valueFrom: {secretKeyRef: {name: {{ .Values.secrets.stripe.name }}, key: {{ .Values.secrets.stripe.secretKeyKey }}}}
- name: STRIPE_WEBHOOK_SECRET
  valueFrom: {secretKeyRef: {name: {{ .Values.secrets.stripe.name }}, key: {{ .Values.secrets.stripe.webhookSecretKey }}}}
{{- if .Values.secrets.metrics.name }}
- name: METRICS_TOKEN
  valueFrom: {secretKeyRef: {name: {{ .Values.secrets.metrics.name }}, key: {{ .Values.secrets.metrics.key }}}}
{{- end }}
{{- if .Values.nodeAgent.enabled }}
- name: NODE_BOOTSTRAP_TOKEN
  valueFrom: {secretKeyRef: {name: {{ .Values.secrets.nodeBootstrap.name }}, key: {{ .Values.secrets.nodeBootstrap.key }}}}
{{- end }}
- name: KUBE_WORKER_SERVICE_ACCOUNT
  value: {{ printf "%s/starverse-worker" .Release.Namespace | quote }}
- name: KUBE_TERMINAL_SERVICE_ACCOUNT
  value: {{ printf "%s/starverse-terminal" .Release.Namespace | quote }}
{{- end -}}

{{- define "starverse.envFrom" -}}
- secretRef: {name: {{ .Values.secrets.app }}}
{{- end -}}

{{/* The containers' common hardening: the image runs as uid 10001. */}}
{{- define "starverse.securityContext" -}}
allowPrivilegeEscalation: false
runAsNonRoot: true
runAsUser: 10001
capabilities: {drop: [ALL]}
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/* The claim that holds MEDIA_ROOT: the operator's existing one or the chart's. */}}
{{- define "starverse.mediaClaim" -}}
{{ .Values.media.persistence.existingClaim | default "starverse-media" }}
{{- end -}}

{{/* MEDIA_ROOT and its volume, for the web pods and the worker (empty when off). */}}
{{- define "starverse.mediaEnv" -}}
{{- if .Values.media.persistence.enabled }}
- {name: MEDIA_ROOT, value: {{ .Values.media.mountPath | quote }}}
{{- end }}
{{- end -}}

{{- define "starverse.mediaMount" -}}
{{- if .Values.media.persistence.enabled }}
- {name: media, mountPath: {{ .Values.media.mountPath | quote }}}
{{- end }}
{{- end -}}

{{- define "starverse.mediaVolume" -}}
{{- if .Values.media.persistence.enabled }}
- name: media
  persistentVolumeClaim: {claimName: {{ include "starverse.mediaClaim" . }}}
{{- end }}
{{- end -}}
