{{/*
Names, labels and the pod pieces shared by the exporter and the watchdog.
*/}}

{{- define "volcano-monitor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Resource name prefix: the release name, plus the chart name unless the release already holds it. */}}
{{- define "volcano-monitor.fullname" -}}
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

{{/* <fullname>-<component>, kept within 63 characters (a Service name is a DNS label). */}}
{{- define "volcano-monitor.componentName" -}}
{{- printf "%s-%s" (include "volcano-monitor.fullname" .ctx | trunc (int (sub 62 (len .component)))) .component }}
{{- end }}

{{- define "volcano-monitor.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
{{ include "volcano-monitor.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: volcano-monitor
{{- end }}

{{/* Selector labels; `component` is exporter, watchdog, rules or dashboards. */}}
{{- define "volcano-monitor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "volcano-monitor.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "volcano-monitor.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "volcano-monitor.exporter.serviceAccountName" -}}
{{- if .Values.exporter.serviceAccount.create }}
{{- default (include "volcano-monitor.componentName" (dict "ctx" . "component" "exporter")) .Values.exporter.serviceAccount.name }}
{{- else }}
{{- required "exporter.serviceAccount.name is required when exporter.serviceAccount.create is false" .Values.exporter.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The exporter's Service: <fullname>-exporter, or the headless <fullname>-exporter-headless when sharded
(a Service cannot switch between headless and not: each mode has its own). */}}
{{- define "volcano-monitor.exporter.serviceName" -}}
{{- include "volcano-monitor.componentName" (dict "ctx" . "component" (ternary "exporter-headless" "exporter" .Values.exporter.sharding.enabled)) }}
{{- end }}

{{- define "volcano-monitor.watchdog.serviceAccountName" -}}
{{- if .Values.watchdog.serviceAccount.create }}
{{- default (include "volcano-monitor.componentName" (dict "ctx" . "component" "watchdog")) .Values.watchdog.serviceAccount.name }}
{{- else }}
{{- required "watchdog.serviceAccount.name is required when watchdog.serviceAccount.create is false" .Values.watchdog.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The pod spec fields every pod of the chart shares. */}}
{{- define "volcano-monitor.podCommon" -}}
# Service links would add <SERVICE>_PORT-style variables; the watchdog reads every VOLCANO_WATCHDOG_*
# variable as a setting and refuses unknown ones, so a Service named volcano-watchdog would stop it.
enableServiceLinks: false
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Scheduling fields of one component's pods: pass (dict "values" .Values.<component>). */}}
{{- define "volcano-monitor.podScheduling" -}}
{{- with .values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The watchdog's storage, checked: "sqlite" or "postgresql", with the rules each one needs. */}}
{{- define "volcano-monitor.watchdog.databaseType" -}}
{{- $db := .Values.watchdog.database }}
{{- if eq $db.type "sqlite" }}
{{- if gt (int .Values.watchdog.replicas) 1 }}
{{- fail (printf "watchdog.replicas is %v but SQLite allows one writer: set watchdog.replicas=1, or watchdog.database.type=postgresql for several replicas" .Values.watchdog.replicas) }}
{{- end }}
{{- else if eq $db.type "postgresql" }}
{{- if and (not $db.existingSecret) (not $db.url) }}
{{- fail "watchdog.database.type is postgresql: set watchdog.database.existingSecret (a Secret holding the URL) or watchdog.database.url" }}
{{- end }}
{{- else }}
{{- fail (printf "watchdog.database.type must be sqlite or postgresql, not %q" $db.type) }}
{{- end }}
{{- $db.type }}
{{- end }}

{{/* "true" when the watchdog's capability controller is on, so that its ClusterRole grants `patch` on
Queues (its only use): `capability.enabled` in the config the chart renders (watchdog.config), overridden
as in the watchdog by a VOLCANO_WATCHDOG_CAPABILITY__ENABLED value in watchdog.extraEnv; or
watchdog.rbac.patchQueues, for what the chart cannot see (watchdog.existingConfigSecret, a variable from a
Secret). Truth as the watchdog reads it: 1, true, yes, on, t, y. */}}
{{- define "volcano-monitor.watchdog.capabilityEnabled" -}}
{{- $w := .Values.watchdog }}
{{- $truthy := list "1" "true" "yes" "on" "t" "y" }}
{{- $enabled := false }}
{{- if not $w.existingConfigSecret }}
{{- $capability := get ($w.config | default dict) "capability" }}
{{- if kindIs "map" $capability }}
{{- $enabled = has (get $capability "enabled" | toString | lower) $truthy }}
{{- end }}
{{- end }}
{{- range $w.extraEnv }}
{{- if and (eq .name "VOLCANO_WATCHDOG_CAPABILITY__ENABLED") (hasKey . "value") }}
{{- $enabled = has (.value | toString | lower) $truthy }}
{{- end }}
{{- end }}
{{- if or $enabled $w.rbac.patchQueues }}true{{ end }}
{{- end }}

{{/* "true" when the watchdog's OOM auto scale-up is on, so that its ClusterRole grants `create` on Volcano
Jobs (its only use): `oom_scale_up.enabled` in the config the chart renders, overridden by a
VOLCANO_WATCHDOG_OOM_SCALE_UP__ENABLED value in watchdog.extraEnv; or watchdog.rbac.createJobs, for what
the chart cannot see. Truth as the watchdog reads it: 1, true, yes, on, t, y. */}}
{{- define "volcano-monitor.watchdog.oomScaleUpEnabled" -}}
{{- $w := .Values.watchdog }}
{{- $truthy := list "1" "true" "yes" "on" "t" "y" }}
{{- $enabled := false }}
{{- if not $w.existingConfigSecret }}
{{- $section := get ($w.config | default dict) "oom_scale_up" }}
{{- if kindIs "map" $section }}
{{- $enabled = has (get $section "enabled" | toString | lower) $truthy }}
{{- end }}
{{- end }}
{{- range $w.extraEnv }}
{{- if and (eq .name "VOLCANO_WATCHDOG_OOM_SCALE_UP__ENABLED") (hasKey . "value") }}
{{- $enabled = has (.value | toString | lower) $truthy }}
{{- end }}
{{- end }}
{{- if or $enabled $w.rbac.createJobs }}true{{ end }}
{{- end }}

{{/* "true" when the watchdog's GPU idle abort action is on, so that its ClusterRole grants `create` on
Volcano Commands (its only use): `gpu_idle.abort.enabled` in watchdog.config, overridden as in the watchdog
by a VOLCANO_WATCHDOG_GPU_IDLE__ABORT__ENABLED value in watchdog.extraEnv; or watchdog.rbac.createCommands
for what the chart cannot see. Truth as the watchdog reads it: 1, true, yes, on, t, y. */}}
{{- define "volcano-monitor.watchdog.gpuIdleAbortEnabled" -}}
{{- $w := .Values.watchdog }}
{{- $truthy := list "1" "true" "yes" "on" "t" "y" }}
{{- $enabled := false }}
{{- if not $w.existingConfigSecret }}
{{- $gpuIdle := get ($w.config | default dict) "gpu_idle" }}
{{- if kindIs "map" $gpuIdle }}
{{- $abort := get $gpuIdle "abort" }}
{{- if kindIs "map" $abort }}
{{- $enabled = has (get $abort "enabled" | toString | lower) $truthy }}
{{- end }}
{{- end }}
{{- end }}
{{- range $w.extraEnv }}
{{- if and (eq .name "VOLCANO_WATCHDOG_GPU_IDLE__ABORT__ENABLED") (hasKey . "value") }}
{{- $enabled = has (.value | toString | lower) $truthy }}
{{- end }}
{{- end }}
{{- if or $enabled $w.rbac.createCommands }}true{{ end }}
{{- end }}

{{/* "true" when the watchdog authorizes readers with Kubernetes RBAC (`auth.mode: kubernetes`), so that its
ClusterRole grants `create` on TokenReviews and SubjectAccessReviews (asking the API server who a caller is
and what it may list): `auth.mode` in watchdog.config, overridden as in the watchdog by a
VOLCANO_WATCHDOG_AUTH__MODE value in watchdog.extraEnv; or watchdog.rbac.createReviews for what the chart
cannot see. */}}
{{- define "volcano-monitor.watchdog.kubernetesAuth" -}}
{{- $w := .Values.watchdog }}
{{- $mode := "" }}
{{- if not $w.existingConfigSecret }}
{{- $auth := get ($w.config | default dict) "auth" }}
{{- if kindIs "map" $auth }}
{{- $mode = get $auth "mode" | toString }}
{{- end }}
{{- end }}
{{- range $w.extraEnv }}
{{- if and (eq .name "VOLCANO_WATCHDOG_AUTH__MODE") (hasKey . "value") }}
{{- $mode = .value | toString }}
{{- end }}
{{- end }}
{{- if or (eq $mode "kubernetes") $w.rbac.createReviews }}true{{ end }}
{{- end }}

{{/* Where the SQLite file lives; the Dockerfile's WORKDIR is the same directory. */}}
{{- define "volcano-monitor.watchdog.dataDir" -}}
/var/lib/volcano-watchdog
{{- end }}

{{/* Environment shared by the watchdog's migrate init container and its main container. */}}
{{- define "volcano-monitor.watchdog.baseEnv" -}}
- name: VOLCANO_WATCHDOG_CONFIG
  value: /etc/volcano-watchdog/config.yaml
- name: VOLCANO_WATCHDOG_LOG_LEVEL
  value: {{ .Values.watchdog.logLevel | quote }}
{{- if eq (include "volcano-monitor.watchdog.databaseType" .) "sqlite" }}
- name: VOLCANO_WATCHDOG_DATABASE_URL
  value: {{ printf "sqlite:///%s/watchdog.db" (include "volcano-monitor.watchdog.dataDir" .) | quote }}
{{- else }}
- name: VOLCANO_WATCHDOG_DATABASE_URL
  valueFrom:
    secretKeyRef:
      {{- if .Values.watchdog.database.existingSecret }}
      name: {{ .Values.watchdog.database.existingSecret }}
      key: {{ .Values.watchdog.database.existingSecretKey }}
      {{- else }}
      name: {{ include "volcano-monitor.componentName" (dict "ctx" . "component" "watchdog-database") }}
      key: url
      {{- end }}
{{- end }}
{{- with .Values.watchdog.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Volume mounts shared by the watchdog's containers. */}}
{{- define "volcano-monitor.watchdog.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
- name: config
  mountPath: /etc/volcano-watchdog
  readOnly: true
{{- if eq (include "volcano-monitor.watchdog.databaseType" .) "sqlite" }}
- name: data
  mountPath: {{ include "volcano-monitor.watchdog.dataDir" . }}
{{- end }}
{{- end }}
