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
{{- toYaml $cfg -}}
{{- end -}}
