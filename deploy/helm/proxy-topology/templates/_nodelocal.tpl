{{/*
The node-local mode (nodeLocal.enabled; SPEC §12, docs/kubernetes.md):
the node DaemonSet serves the controller service too (--mode=all,
proxy.nodeLocal: true in the main config) with the external-provisioner
and the csi-snapshotter beside it in --node-deployment mode, and mounts
nodeLocal.dataPath, the node's disk for node-local connections. The
controller Deployment must be off (controller.enabled: false): two
provisioners would both act on every claim.
*/}}

{{/* "true" in node-local mode; fails when the controller is on too. */}}
{{- define "proxy-topology.nodeLocal" -}}
{{- $nl := .Values.nodeLocal | default dict -}}
{{- if $nl.enabled -}}
{{- if .Values.controller.enabled -}}
{{- fail "nodeLocal.enabled: true needs controller.enabled: false (the node plugins are the controllers; a central provisioner would act on every claim too)" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{/* The node plugin container's mounts for node-local data. */}}
{{- define "proxy-topology.nodeLocalMounts" -}}
{{- if include "proxy-topology.nodeLocal" . }}
- name: node-local-data
  mountPath: {{ .Values.nodeLocal.dataPath }}
{{- end }}
{{- end -}}

{{/* The node plugin container's env in node-local mode. */}}
{{- define "proxy-topology.nodeLocalEnv" -}}
{{- if include "proxy-topology.nodeLocal" . }}
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
{{- end }}
{{- end -}}

{{/* The node pod's volumes in node-local mode. */}}
{{- define "proxy-topology.nodeLocalVolumes" -}}
{{- if include "proxy-topology.nodeLocal" . }}
- name: node-local-data
  hostPath:
    path: {{ .Values.nodeLocal.dataPath }}
    type: DirectoryOrCreate
{{- end }}
{{- end -}}

{{/* The sidecars that make each node the controller of its own disk. */}}
{{- define "proxy-topology.nodeLocalContainers" -}}
{{- if include "proxy-topology.nodeLocal" . }}
{{- $nl := .Values.nodeLocal }}
{{- $prov := list "--csi-address=/run/csi/csi.sock" "--timeout=120s" "--extra-create-metadata"
  "--feature-gates=Topology=true" "--strict-topology=true" "--immediate-topology=false"
  "--node-deployment=true" "--node-deployment-immediate-binding=true" }}
{{- if .Values.csiDriver.storageCapacity }}
{{- $prov = concat $prov (list "--enable-capacity" "--capacity-ownerref-level=1") }}
{{- end }}
- name: csi-provisioner
  image: {{ $nl.externalProvisioner.image }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args:
  {{- include "proxy-topology.args" (dict "args" $prov "extra" $nl.externalProvisioner.extraArgs) | nindent 2 }}
  env:
  - name: NODE_NAME
    valueFrom:
      fieldRef:
        fieldPath: spec.nodeName
  - name: NAMESPACE
    valueFrom:
      fieldRef:
        fieldPath: metadata.namespace
  - name: POD_NAME
    valueFrom:
      fieldRef:
        fieldPath: metadata.name
  {{- include "proxy-topology.securityContext" (dict "base" $.Values.node.securityContext "over" $nl.externalProvisioner.securityContext) | nindent 2 }}
  {{- with $nl.externalProvisioner.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
  - name: socket-dir
    mountPath: /run/csi
{{- if $nl.externalSnapshotter.enabled }}
- name: csi-snapshotter
  image: {{ $nl.externalSnapshotter.image }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args:
  {{- include "proxy-topology.args" (dict "extra" $nl.externalSnapshotter.extraArgs "args" (list
    "--csi-address=/run/csi/csi.sock" "--timeout=120s" "--node-deployment=true")) | nindent 2 }}
  env:
  - name: NODE_NAME
    valueFrom:
      fieldRef:
        fieldPath: spec.nodeName
  {{- include "proxy-topology.securityContext" (dict "base" $.Values.node.securityContext "over" $nl.externalSnapshotter.securityContext) | nindent 2 }}
  {{- with $nl.externalSnapshotter.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
  - name: socket-dir
    mountPath: /run/csi
{{- end }}
{{- end }}
{{- end -}}
