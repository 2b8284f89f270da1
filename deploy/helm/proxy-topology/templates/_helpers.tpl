{{/* Name prefix of every object: the release name, or release-chart. */}}
{{- define "proxy-topology.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "proxy-topology.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* Selector labels of a component (pass a dict with ctx and component). */}}
{{- define "proxy-topology.selector" -}}
app.kubernetes.io/name: {{ .ctx.Chart.Name }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "proxy-topology.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The socket directory on the host for the node plugin. */}}
{{- define "proxy-topology.pluginDir" -}}
{{ .Values.node.kubeletHostPath }}/plugins/{{ .Values.csiDriver.name }}
{{- end -}}

{{/* The main config with csiName taken from csiDriver.name. */}}
{{- define "proxy-topology.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $_ := set $cfg "csiName" .Values.csiDriver.name -}}
{{- if .Values.csiDriver.attachRequired -}}
{{- $_ := set (default dict $cfg.proxy) "controllerPublish" true -}}
{{- end -}}
{{- if include "proxy-topology.nodeLocal" . -}}
{{- $_ := set (default dict $cfg.proxy) "nodeLocal" true -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/*
A container's args: the chart's flags (.args), then the user's extraArgs
(.extra). A chart flag whose name (the part before "=") the user also gives
is left out, so extraArgs adds flags and may replace the chart's, and the
seed's values, which repeat the topology flags, render each flag once.
*/}}
{{- define "proxy-topology.args" -}}
{{- $names := dict -}}
{{- range .extra -}}
{{- $_ := set $names (regexReplaceAll "=.*$" (toString .) "") true -}}
{{- end -}}
{{- $out := list -}}
{{- range .args -}}
{{- if not (hasKey $names (regexReplaceAll "=.*$" . "")) -}}
{{- $out = append $out . -}}
{{- end -}}
{{- end -}}
{{- range .extra -}}
{{- $out = append $out . -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/*
"true" when .list (extraVolumes or extraVolumeMounts) has an entry named
.name or mounted at .path: the user's entry then replaces the chart's.
*/}}
{{- define "proxy-topology.has" -}}
{{- range .list -}}
{{- if or (eq (toString .name) $.name) (and $.path (eq (toString (.mountPath | default "")) $.path)) -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/*
A container's securityContext: .base (the component's default, e.g.
controller.securityContext) with each key of .over (the container's own
securityContext value) replacing the base's key of that name, so a user
sets one field (readOnlyRootFilesystem: false) or removes one (null)
without restating the rest. Rendered at the indentation of a container key.
*/}}
{{- define "proxy-topology.securityContext" -}}
{{- $sc := deepCopy (.base | default dict) -}}
{{- range $k, $v := (.over | default dict) -}}
{{- $_ := set $sc $k $v -}}
{{- end -}}
{{- with $sc -}}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end -}}
{{- end -}}
