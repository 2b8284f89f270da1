{{/*
Upstream drivers deployed with the proxy (upstreams.<name>; SPEC §14,
docs/kubernetes.md "Upstream drivers in the proxy's pods"). Each upstream
adds a container to the controller pod and to the node pod, beside
proxy-topology, which reaches it through an emptyDir mounted at /csi in the
upstream's container (CSI_ENDPOINT=unix:///csi/csi.sock, the kubernetes-csi
convention) and at /csi/upstreams/<name>/ in proxy-topology's; connection
<name> is rendered with that endpoint (connections-secret.yaml).
*/}}

{{/*
What neither a pod nor the connections Secret can say on its own, checked
once (config.yaml includes it; it renders nothing): an entry whose two
sides are both off would still render its connection, every call to it
UNAVAILABLE; and connections.<name> replaces the whole connection file,
so an upstreams.<name>.connection beside it would be dropped unseen.
*/}}
{{- define "proxy-topology.checkUpstreams" -}}
{{- $conns := .Values.connections | default dict -}}
{{- range $name, $u := .Values.upstreams | default dict -}}
{{- $u = $u | default dict -}}
{{- $on := 0 -}}
{{- range $side := list "controller" "node" -}}
{{- $s := index $u $side | default dict -}}
{{- if (hasKey $s "enabled" | ternary $s.enabled true) -}}{{- $on = add1 $on -}}{{- end -}}
{{- end -}}
{{- if eq $on 0 -}}
{{- fail (printf "upstreams.%s: controller.enabled and node.enabled are both false, so no container serves connection %s and every call to it would fail; enable a side or remove the entry" $name $name) -}}
{{- end -}}
{{- if and (hasKey $conns $name) $u.connection -}}
{{- fail (printf "connections.%s and upstreams.%s.connection both give connection %s: keep one (connections.%s is the whole connection file and would replace the upstream's)" $name $name $name $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The socket the upstream serves, as proxy-topology sees it. */}}
{{- define "proxy-topology.upstreamEndpoint" -}}
unix:///csi/upstreams/{{ . }}/csi.sock
{{- end -}}

{{/*
democratic-csi driver kinds and what their node container needs from the
host, as democratic-csi's own chart and image use them: iSCSI and NVMe-oF
run iscsiadm/multipath (chrooted into the host at /host) or nvme-cli
against the host's initiator state, with the host's network and IPC;
zfs-local runs the host's zfs (its zfs wrapper chroots into /host) on
both sides; NFS, SMB and Lustre clients mount from the container. The
last three kinds cannot sit behind a proxy (SPEC §1, the seed's
compatibility notes).
*/}}
{{- define "proxy-topology.dcsiKind" -}}
{{- $d := . -}}
{{- if has $d (list "freenas-iscsi" "truenas-iscsi" "freenas-api-iscsi" "synology-iscsi" "zfs-generic-iscsi") -}}iscsi
{{- else if eq $d "zfs-generic-nvmeof" -}}nvmeof
{{- else if has $d (list "zfs-local-dataset" "zfs-local-zvol") -}}zfs-local
{{- else if eq $d "local-hostpath" -}}local-hostpath
{{- else if has $d (list "freenas-nfs" "truenas-nfs" "freenas-api-nfs" "synology-nfs" "zfs-generic-nfs" "nfs-client") -}}nfs
{{- else if has $d (list "freenas-smb" "truenas-smb" "freenas-api-smb" "synology-smb" "zfs-generic-smb" "smb-client") -}}smb
{{- else if eq $d "lustre-client" -}}lustre
{{- else if has $d (list "zfs-local-ephemeral-inline" "objectivefs" "node-manual") -}}unsupported
{{- end -}}
{{- end -}}

{{/* The host directories the democratic-csi preset mounts, by volume name. */}}
{{- define "proxy-topology.dcsiHostPaths" -}}
host-root: {path: /, type: Directory, mountPath: /host, propagation: Bidirectional}
host-sys: {path: /sys, type: Directory, mountPath: /sys}
host-modules: {path: /lib/modules, type: "", mountPath: /lib/modules, readOnly: true}
host-udev: {path: /run/udev, type: "", mountPath: /run/udev}
iscsi-dir: {path: /etc/iscsi, type: Directory, mountPath: /etc/iscsi, propagation: Bidirectional}
iscsi-info: {path: /var/lib/iscsi, type: "", mountPath: /var/lib/iscsi, propagation: Bidirectional}
nvme-dir: {path: /etc/nvme, type: Directory, mountPath: /etc/nvme, propagation: Bidirectional}
{{- end -}}

{{/*
The upstreams' part of one pod, as YAML: containers, volumes (deduplicated
by name), proxyMounts (the sockets in proxy-topology's container) and the
pod-level host options. Called with a dict: ctx (the root context), side
("controller" or "node"), serveController (true when the node pod serves
the controller service: node-local mode).
*/}}
{{- define "proxy-topology.upstreamPod" -}}
{{- $ctx := .ctx -}}
{{- $side := .side -}}
{{- $node := eq $side "node" -}}
{{- $fullname := include "proxy-topology.fullname" $ctx -}}
{{- $hostPaths := include "proxy-topology.dcsiHostPaths" . | fromYaml -}}
{{- $containers := list -}}
{{- $volumes := list -}}
{{- $volNames := dict -}}
{{- $proxyMounts := list -}}
{{- $host := dict "hostNetwork" false "hostPID" false "hostIPC" false -}}
{{- range $name, $u := $ctx.Values.upstreams | default dict -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,45}[a-z0-9])?$" $name) -}}
{{- fail (printf "upstreams.%s: the name must be lower-case letters, digits and '-', starting and ending with a letter or digit, at most 47 characters (it names the connection, a container and volumes)" $name) -}}
{{- end -}}
{{- $u = $u | default dict -}}
{{- $s := index $u $side | default dict -}}
{{- if (hasKey $s "enabled" | ternary $s.enabled true) -}}
{{- $dcsi := $u.democraticCsi -}}
{{- $kind := "" -}}
{{- $env := list (dict "name" "CSI_ENDPOINT" "value" "unix:///csi/csi.sock")
  (dict "name" "NODE_NAME" "valueFrom" (dict "fieldRef" (dict "fieldPath" "spec.nodeName"))) -}}
{{- $mounts := list (dict "name" (printf "upstream-%s-socket" $name) "mountPath" "/csi") -}}
{{- $args := list -}}
{{- $image := "" -}}
{{- $sc := dict -}}
{{- $resources := dict "requests" (dict "cpu" "20m" "memory" "64Mi") -}}
{{- $hostVols := list -}}
{{- $files := $u.configFiles | default dict -}}
{{- $configPath := $u.configMountPath | default "/config" -}}
{{- if $dcsi -}}
{{- $cfg := $dcsi.driverConfig | default dict -}}
{{- if not $cfg.driver -}}
{{- fail (printf "upstreams.%s.democraticCsi.driverConfig: no driver (democratic-csi's driver config, with driver: local-hostpath, zfs-generic-iscsi, ...)" $name) -}}
{{- end -}}
{{- $kind = include "proxy-topology.dcsiKind" $cfg.driver -}}
{{- if eq $kind "" -}}
{{- fail (printf "upstreams.%s.democraticCsi.driverConfig.driver: %q is not a democratic-csi driver this chart knows" $name $cfg.driver) -}}
{{- end -}}
{{- if eq $kind "unsupported" -}}
{{- fail (printf "upstreams.%s.democraticCsi.driverConfig.driver: %s cannot run behind a proxy (it makes no volumes with CreateVolume, or its node service needs the driver config; docs/kubernetes.md)" $name $cfg.driver) -}}
{{- end -}}
{{- $files = merge (dict "driver-config-file.yaml" $cfg) $files -}}
{{- $image = $dcsi.image | default "democraticcsi/democratic-csi:v1.9.0" -}}
{{- $modes := ternary (ternary (list "node" "controller") (list "node") $.serveController) (list "controller") $node -}}
{{- $args = list (printf "--csi-version=%s" ($dcsi.csiVersion | default "1.5.0"))
  (printf "--csi-name=%s" ($dcsi.csiName | default (printf "org.democratic-csi.%s" $name)))
  (printf "--driver-config-file=%s/driver-config-file.yaml" $configPath)
  (printf "--log-level=%s" ($dcsi.logLevel | default "info")) -}}
{{- range $modes -}}
{{- $args = append $args (printf "--csi-mode=%s" .) -}}
{{- end -}}
{{- $args = append $args "--server-socket=/csi/csi.sock" -}}
{{- $env = append $env (dict "name" "CSI_NODE_ID" "valueFrom" (dict "fieldRef" (dict "fieldPath" "spec.nodeName"))) -}}
{{- $resources = dict "requests" (dict "cpu" "20m" "memory" "128Mi") -}}
{{- /* zfs-local runs zfs on both sides; the node side of every kind mounts and formats. */ -}}
{{- if or $node (eq $kind "zfs-local") -}}
{{- $sc = dict "privileged" true "allowPrivilegeEscalation" true "capabilities" (dict "add" (list "SYS_ADMIN")) -}}
{{- end -}}
{{- if eq $kind "zfs-local" -}}
{{- $hostVols = list "host-root" -}}
{{- if $node -}}{{- $hostVols = concat $hostVols (list "host-sys" "host-udev") -}}{{- end -}}
{{- end -}}
{{- if $node -}}
{{- if eq $kind "iscsi" -}}
{{- $hostVols = list "host-root" "host-sys" "host-modules" "host-udev" "iscsi-dir" "iscsi-info" -}}
{{- else if eq $kind "nvmeof" -}}
{{- $hostVols = list "host-root" "host-sys" "host-modules" "host-udev" "nvme-dir" -}}
{{- end -}}
{{- if has $kind (list "iscsi" "nvmeof") -}}
{{- $_ := set $host "hostNetwork" true -}}
{{- $_ := set $host "hostIPC" true -}}
{{- end -}}
{{- end -}}
{{- range $hv := $hostVols -}}
{{- $h := index $hostPaths $hv -}}
{{- $m := dict "name" $hv "mountPath" $h.mountPath -}}
{{- if $h.readOnly -}}{{- $_ := set $m "readOnly" true -}}{{- end -}}
{{- if and $h.propagation (or $node $sc.privileged) -}}{{- $_ := set $m "mountPropagation" $h.propagation -}}{{- end -}}
{{- $mounts = append $mounts $m -}}
{{- if not (hasKey $volNames $hv) -}}
{{- $hp := dict "path" $h.path -}}
{{- if $h.type -}}{{- $_ := set $hp "type" $h.type -}}{{- end -}}
{{- $volumes = append $volumes (dict "name" $hv "hostPath" $hp) -}}
{{- $_ := set $volNames $hv true -}}
{{- end -}}
{{- end -}}
{{- /* local-hostpath keeps its volumes in host directories, seen by both sides at the same path. */ -}}
{{- if eq $kind "local-hostpath" -}}
{{- $lh := index $cfg "local-hostpath" | default dict -}}
{{- $paths := list -}}
{{- range $p := list $lh.shareBasePath $lh.controllerBasePath -}}
{{- if and $p (not (has $p $paths)) -}}{{- $paths = append $paths $p -}}{{- end -}}
{{- end -}}
{{- if not $paths -}}
{{- fail (printf "upstreams.%s.democraticCsi.driverConfig.local-hostpath.shareBasePath: required (the host directory of the volumes)" $name) -}}
{{- end -}}
{{- range $i, $p := $paths -}}
{{- $vn := printf "upstream-%s-data%s" $name (ternary "" (toString $i) (eq $i 0)) -}}
{{- $m := dict "name" $vn "mountPath" $p -}}
{{- if $node -}}{{- $_ := set $m "mountPropagation" "Bidirectional" -}}{{- end -}}
{{- $mounts = append $mounts $m -}}
{{- $volumes = append $volumes (dict "name" $vn "hostPath" (dict "path" $p "type" "DirectoryOrCreate")) -}}
{{- $_ := set $volNames $vn true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $image = $s.image | default $u.image | default $image -}}
{{- if not $image -}}
{{- fail (printf "upstreams.%s: no image (set upstreams.%s.image, upstreams.%s.%s.image, or use the democraticCsi preset)" $name $name $name $side) -}}
{{- end -}}
{{- $args = $s.args | default $u.args | default $args -}}
{{- $args = concat $args ($u.extraArgs | default list) ($s.extraArgs | default list) -}}
{{- $env = concat $env ($u.env | default list) ($s.env | default list) -}}
{{- $resources = $s.resources | default $u.resources | default $resources -}}
{{- if $node -}}
{{- $sc = merge (dict "privileged" true) $sc -}}
{{- $mounts = append $mounts (dict "name" "kubelet-dir" "mountPath" $ctx.Values.node.kubeletHostPath "mountPropagation" "Bidirectional") -}}
{{- $mounts = append $mounts (dict "name" "dev-dir" "mountPath" "/dev") -}}
{{- if not (hasKey $volNames "dev-dir") -}}
{{- $volumes = append $volumes (dict "name" "dev-dir" "hostPath" (dict "path" "/dev" "type" "Directory")) -}}
{{- $_ := set $volNames "dev-dir" true -}}
{{- end -}}
{{- end -}}
{{- $sc = merge (deepCopy ($s.securityContext | default dict)) ($u.securityContext | default dict) $sc -}}
{{- if $files -}}
{{- $mounts = append $mounts (dict "name" (printf "upstream-%s-config" $name) "mountPath" $configPath "readOnly" true) -}}
{{- $volumes = append $volumes (dict "name" (printf "upstream-%s-config" $name) "secret" (dict "secretName" (printf "%s-upstream-%s" $fullname $name))) -}}
{{- end -}}
{{- $mounts = concat $mounts ($u.extraVolumeMounts | default list) ($s.extraVolumeMounts | default list) -}}
{{- range concat ($u.extraVolumes | default list) ($s.extraVolumes | default list) -}}
{{- if not (hasKey $volNames .name) -}}
{{- $volumes = append $volumes . -}}
{{- $_ := set $volNames .name true -}}
{{- end -}}
{{- end -}}
{{- $volumes = append $volumes (dict "name" (printf "upstream-%s-socket" $name) "emptyDir" dict) -}}
{{- $proxyMounts = append $proxyMounts (dict "name" (printf "upstream-%s-socket" $name) "mountPath" (printf "/csi/upstreams/%s" $name)) -}}
{{- range $opt := list "hostNetwork" "hostPID" "hostIPC" -}}
{{- if or (index $s $opt) (index $u $opt) -}}{{- $_ := set $host $opt true -}}{{- end -}}
{{- end -}}
{{- $c := dict "name" (printf "upstream-%s" $name) "image" $image
  "imagePullPolicy" ($s.imagePullPolicy | default $u.imagePullPolicy | default $ctx.Values.image.pullPolicy)
  "env" $env "volumeMounts" $mounts "resources" $resources -}}
{{- with ($s.command | default $u.command) -}}{{- $_ := set $c "command" . -}}{{- end -}}
{{- if $args -}}{{- $_ := set $c "args" $args -}}{{- end -}}
{{- if $sc -}}{{- $_ := set $c "securityContext" $sc -}}{{- end -}}
{{- $containers = append $containers $c -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "containers" $containers "volumes" $volumes "proxyMounts" $proxyMounts "host" $host) -}}
{{- end -}}

{{/*
The pod-level host options any upstream of the pod asks for: they apply to
every container of the pod (proxy-topology and the sidecars too).
*/}}
{{- define "proxy-topology.upstreamHostOptions" -}}
{{- if .hostNetwork }}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
{{- if .hostPID }}
hostPID: true
{{- end }}
{{- if .hostIPC }}
hostIPC: true
{{- end }}
{{- end -}}
