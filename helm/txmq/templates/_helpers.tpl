{{/* Names ------------------------------------------------------------------------- */}}

{{- define "txmq.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-scoped base name; components append -store, -etcd, ... (kept <= 52 chars so
     StatefulSet pod names and their controller-revision labels stay within 63). */}}
{{- define "txmq.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "txmq.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels: call with (dict "ctx" $ "component" "store") */}}
{{- define "txmq.selectorLabels" -}}
app.kubernetes.io/name: {{ include "txmq.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "txmq.labels" -}}
helm.sh/chart: {{ include "txmq.chart" .ctx }}
{{ include "txmq.selectorLabels" . }}
app.kubernetes.io/part-of: txmq
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "txmq.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "txmq.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "txmq.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "txmq.analyticsImage" -}}
{{- $repo := default .Values.image.repository .Values.analytics.image.repository }}
{{- $tag := default (printf "%s-analytics" (default .Chart.AppVersion .Values.image.tag)) .Values.analytics.image.tag }}
{{- printf "%s:%s" $repo $tag }}
{{- end }}

{{/* etcd --------------------------------------------------------------------------- */}}

{{- define "txmq.etcd.headless" -}}
{{- printf "%s-etcd-headless" (include "txmq.fullname" .) }}
{{- end }}

{{/* The etcd endpoints every service gets: the in-chart etcd's client Service (only
     ready members), or the external list. */}}
{{- define "txmq.etcd.endpoints" -}}
{{- if .Values.etcd.enabled }}
{{- printf "%s-etcd.%s.svc.%s:%d" (include "txmq.fullname" .) .Release.Namespace .Values.clusterDomain (int .Values.etcd.clientPort) }}
{{- else }}
{{- required "etcd.external.endpoints is required when etcd.enabled is false" .Values.etcd.external.endpoints }}
{{- end }}
{{- end }}

{{- define "txmq.etcd.initialCluster" -}}
{{- $full := include "txmq.fullname" . }}
{{- $members := list }}
{{- $scheme := ternary "https" "http" (eq (include "txmq.etcdSecured" .) "true") }}
{{- range $i := until (int .Values.etcd.replicas) }}
{{- $members = append $members (printf "%s-etcd-%d=%s://%s-etcd-%d.%s.%s.svc.%s:%d" $full $i $scheme $full $i (include "txmq.etcd.headless" $) $.Release.Namespace $.Values.clusterDomain (int $.Values.etcd.peerPort)) }}
{{- end }}
{{- join "," $members }}
{{- end }}

{{/* Settings -> env -------------------------------------------------------------------

A value as the env var string the service parses: whole numbers without exponent (Helm
reads YAML numbers as float64, so 134217728 would print as 1.34217728e+08). */}}
{{- define "txmq.envValue" -}}
{{- if kindIs "float64" . }}
{{- if eq . (float64 (int64 .)) }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- else if kindIs "bool" . }}
{{- ternary "true" "false" . }}
{{- else }}
{{- . }}
{{- end }}
{{- end }}

{{/* The downward-API variables the computed settings refer to ($(POD_NAME) ...); they come
     first, since an env var can only refer to those before it. */}}
{{- define "txmq.podEnv" -}}
# The root filesystem is read-only: HOME is the /tmp emptyDir, for anything that writes
# under it (the RocketMQ client package the gateway imports creates ~/logs at import).
- name: HOME
  value: /tmp
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
- name: POD_IP
  valueFrom: {fieldRef: {fieldPath: status.podIP}}
{{- end }}

{{/* Every setting of one service as TXMQ_<SERVICE>_<FIELD>, in field order of values.yaml
     (sorted). Empty "chart computes" fields get their per-pod values.
     Call with (dict "ctx" $ "service" "store"); a replica of a store group with
     (dict "ctx" $ "service" "store" "group" "<group name>"): store_id is the group's name
     and replica_id the pod name. */}}
{{- define "txmq.settingsEnv" -}}
{{- $ctx := .ctx }}
{{- $service := .service }}
{{- $group := .group | default "" }}
{{- $values := index $ctx.Values $service }}
{{- $settings := $values.settings }}
{{- $prefix := printf "TXMQ_%s_" (upper $service) }}
{{- $full := include "txmq.fullname" $ctx }}
{{- $computed := dict }}
{{- $_ := set $computed "instance_id" "$(POD_NAME)" }}
{{- $_ := set $computed "etcd_endpoints" (include "txmq.etcd.endpoints" $ctx) }}
{{- $_ := set $computed "etcd_prefix" $ctx.Values.etcd.prefix }}
{{- if include "txmq.tlsOn" $ctx }}
{{- $tlsDir := trimSuffix "/" $ctx.Values.tls.mountPath }}
{{- $_ := set $computed "tls_cert_file" (printf "%s/tls.crt" $tlsDir) }}
{{- $_ := set $computed "tls_key_file" (printf "%s/tls.key" $tlsDir) }}
{{- $_ := set $computed "tls_ca_file" (printf "%s/ca.crt" $tlsDir) }}
{{- $_ := set $computed "tls_server_name" (include "txmq.tlsServerName" $ctx) }}
{{- if include "txmq.etcdSecured" $ctx }}
{{- $_ := set $computed "etcd_tls_ca_file" (printf "%s/ca.crt" $tlsDir) }}
{{- $_ := set $computed "etcd_tls_cert_file" (printf "%s/tls.crt" $tlsDir) }}
{{- $_ := set $computed "etcd_tls_key_file" (printf "%s/tls.key" $tlsDir) }}
{{- $_ := set $computed "etcd_username" (printf "txmq-%s" $service) }}
{{- if eq $service "txcheck" }}
{{- /* The txcheck services write the user book (docs/etcd.md "Who writes the user book"). */}}
{{- $_ := set $computed "auth_etcd_username" "txmq-auth" }}
{{- end }}
{{- end }}
{{- end }}
{{- /* "" never reaches a service: enforcing mutual TLS with tls.enabled (or
     security.enabled), else off. */}}
{{- $_ := set $computed "tls_mode" (ternary "enforcing" "disabled" (eq (include "txmq.tlsOn" $ctx) "true")) }}
{{- $_ := set $computed "tls_client_auth" (ternary "require" "none" (eq (include "txmq.tlsOn" $ctx) "true")) }}
{{- $authOn := include "txmq.authOn" (dict "ctx" $ctx "service" $service) }}
{{- if $authOn }}
{{- $_ := set $computed "auth_access_key" $ctx.Values.auth.accessKey }}
{{- end }}
{{- if eq $service "store" }}
{{- $_ := set $computed "store_id" (default "$(POD_NAME)" $group) }}
{{- if include "txmq.exportsShared" $ctx }}
{{- $_ := set $computed "export_dir" (include "txmq.exportsDir" $ctx) }}
{{- end }}
{{- /* The stores' own export feeds the analytics job only through the shared volume
     (analytics.exports.source store); otherwise nothing would read it. */}}
{{- $_ := set $computed "export_interval_ms" (ternary "60000" "0" (eq (include "txmq.exportsShared" $ctx) "true")) }}
{{- $_ := set $computed "advertised_address" (printf "$(POD_NAME).%s-store-headless.$(POD_NAMESPACE).svc.%s:%s" $full $ctx.Values.clusterDomain (include "txmq.envValue" $settings.port)) }}
{{- else }}
{{- $_ := set $computed "advertised_address" (printf "$(POD_IP):%s" (include "txmq.envValue" $settings.port)) }}
{{- end }}
{{- range $name := keys $settings | sortAlpha }}
{{- $value := index $settings $name }}
- name: {{ printf "%s%s" $prefix (upper $name) }}
{{- if and (eq $service "store") (eq $name "physical_memory_bytes") (eq (include "txmq.envValue" $value) "0") }}
  valueFrom:
    resourceFieldRef: {containerName: store, resource: limits.memory, divisor: "1"}
{{- else if and $group (eq $service "store") (eq $name "replica_id") (eq (toString $value) "") }}
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
{{- else if and (eq $name "auth_enabled") $authOn }}
  value: "true"
{{- else if and (hasKey $computed $name) (eq (toString $value) "") }}
  value: {{ index $computed $name | quote }}
{{- else }}
  value: {{ include "txmq.envValue" $value | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* Settings that are secrets are not values. The gateway's secret_key comes from a
     Secret the user created, gateway.auth.existingSecret (key existingSecretKey); nothing
     when none is named (the service's default, ""). Every service's auth_secret_key comes
     from auth.existingSecret, or, when auth is on, the Secret the chart generates
     (txmq.authSecret); during a key roll auth_accepted_secret_key comes from
     auth.acceptedSecret. Its etcd_password comes from the key named after the service in
     the etcd passwords' Secret (txmq.etcdAuthSecret), when there is one, and
     auth_etcd_password, the user book's etcd user's, from its key "auth", only for the
     services that write the book (txmq.writesBook). */}}
{{- define "txmq.secretEnv" -}}
{{- $v := index .ctx.Values .service }}
{{- if and (hasKey $v "auth") $v.auth.existingSecret }}
- name: {{ printf "TXMQ_%s_SECRET_KEY" (upper .service) }}
  valueFrom:
    secretKeyRef:
      name: {{ $v.auth.existingSecret | quote }}
      key: {{ required (printf "%s.auth.existingSecretKey is required with existingSecret" .service) $v.auth.existingSecretKey | quote }}
{{- end }}
{{- with include "txmq.authSecret" .ctx | fromYaml }}
- name: {{ printf "TXMQ_%s_AUTH_SECRET_KEY" (upper $.service) }}
  valueFrom:
    secretKeyRef:
      name: {{ .name | quote }}
      key: {{ .key | quote }}
{{- end }}
{{- if and .ctx.Values.auth.acceptedSecret (include "txmq.authSecret" .ctx) }}
- name: {{ printf "TXMQ_%s_AUTH_ACCEPTED_SECRET_KEY" (upper .service) }}
  valueFrom:
    secretKeyRef:
      name: {{ .ctx.Values.auth.acceptedSecret | quote }}
      key: {{ .ctx.Values.auth.acceptedSecretKey | quote }}
{{- end }}
{{- with include "txmq.etcdAuthSecret" .ctx }}
- name: {{ printf "TXMQ_%s_ETCD_PASSWORD" (upper $.service) }}
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: {{ $.service | quote }}
{{- if include "txmq.writesBook" $ }}
- name: {{ printf "TXMQ_%s_AUTH_ETCD_PASSWORD" (upper $.service) }}
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: auth
{{- end }}
{{- end }}
{{- end }}

{{/* "true" when a service writes the user book through its own etcd user, txmq-auth:
     the txcheck services on the chart's locked-down etcd, and any service whose
     settings.auth_etcd_username you set. Call with (dict "ctx" $ "service" "txcheck"). */}}
{{- define "txmq.writesBook" -}}
{{- $settings := (index .ctx.Values .service).settings }}
{{- if or $settings.auth_etcd_username (and (eq .service "txcheck") (include "txmq.etcdSecured" .ctx)) }}true{{ end }}
{{- end }}

{{/* The Secret of the services' etcd passwords (one key per service):
     etcd.auth.existingSecret, else the one the chart makes for its own locked-down etcd
     (txmq.etcdSecured); "" for none. */}}
{{- define "txmq.etcdAuthSecret" -}}
{{- if (.Values.etcd.auth | default dict).existingSecret }}
{{- .Values.etcd.auth.existingSecret }}
{{- else if include "txmq.etcdSecured" . }}
{{- include "txmq.etcdAuthSecretName" . }}
{{- end }}
{{- end }}

{{- define "txmq.etcdAuthSecretName" -}}
{{- printf "%s-etcd-auth" (include "txmq.fullname" .) }}
{{- end }}

{{/* "true" when the chart's own etcd is locked down (security.enabled): client and peer
     TLS with the release's certificate, client certificates required, etcd's auth on
     with a user per kind of service (the set-up Job, etcd/auth-job.yaml). */}}
{{- define "txmq.etcdSecured" -}}
{{- if and .Values.etcd.enabled (.Values.security | default dict).enabled }}true{{ end }}
{{- end }}

{{/* Where the etcd pods mount the release's TLS Secret. */}}
{{- define "txmq.etcdTlsDir" -}}
/etc/etcd/tls
{{- end }}

{{/* Auth of every service ---------------------------------------------------------------- */}}

{{/* "true" when a service authenticates calls: security.enabled, auth.enabled or its own
     settings.auth_enabled. Call with (dict "ctx" $ "service" "store"). */}}
{{- define "txmq.authOn" -}}
{{- $v := .ctx.Values }}
{{- if or ($v.security | default dict).enabled ($v.auth | default dict).enabled (index $v .service).settings.auth_enabled }}true{{ end }}
{{- end }}

{{/* "true" when any service authenticates calls. */}}
{{- define "txmq.authAnyOn" -}}
{{- range $service := list "store" "pull" "txcheck" "gateway" }}
{{- if include "txmq.authOn" (dict "ctx" $ "service" $service) }}true{{ end }}
{{- end }}
{{- end }}

{{/* The generated Secret of the services' secret key: <fullname>-auth. */}}
{{- define "txmq.authSecretName" -}}
{{- printf "%s-auth" (include "txmq.fullname" .) }}
{{- end }}

{{/* "true" when the chart makes that Secret: auth on and no auth.existingSecret. */}}
{{- define "txmq.authSecretGenerated" -}}
{{- if and (include "txmq.authAnyOn" .) (not .Values.auth.existingSecret) }}true{{ end }}
{{- end }}

{{/* Where auth_secret_key comes from, as YAML {name, key}: auth.existingSecret, else the
     generated Secret; "" when neither (auth off, no Secret named). */}}
{{- define "txmq.authSecret" -}}
{{- if .Values.auth.existingSecret }}
name: {{ .Values.auth.existingSecret | quote }}
key: {{ required "auth.existingSecretKey is required with auth.existingSecret" .Values.auth.existingSecretKey | quote }}
{{- else if include "txmq.authSecretGenerated" . }}
name: {{ include "txmq.authSecretName" . | quote }}
key: auth-secret-key
{{- end }}
{{- end }}

{{/* The access key a service signs its calls with: its settings.auth_access_key, else
     auth.accessKey. Call with (dict "ctx" $ "service" "store"). */}}
{{- define "txmq.accessKey" -}}
{{- default .ctx.Values.auth.accessKey (toString (index .ctx.Values .service).settings.auth_access_key) }}
{{- end }}

{{/* Env of a `txmq` command run in a pod (kubectl exec ... txmq whoami) when the service
     authenticates: the services' own identity (a super user), TXMQ_ACCESS_KEY and
     TXMQ_SECRET_KEY. Call with (dict "ctx" $ "service" "store"). */}}
{{- define "txmq.clientAuthEnv" -}}
{{- if include "txmq.authOn" . }}
{{- with include "txmq.authSecret" .ctx | fromYaml }}
- name: TXMQ_ACCESS_KEY
  value: {{ include "txmq.accessKey" $ | quote }}
- name: TXMQ_SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .name | quote }}
      key: {{ .key | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* "true" for the services that answer txmq's route look-ups (the bootstrap Service's
     pods); the gateway speaks RocketMQ's protocol instead. */}}
{{- define "txmq.answersRoutes" -}}
{{- if has . (list "store" "pull" "txcheck") }}true{{ end }}
{{- end }}

{{/* Pod pieces ------------------------------------------------------------------------ */}}

{{/* terminationGracePeriodSeconds covering preStop + shutdown_grace_ms + a margin. */}}
{{- define "txmq.terminationGrace" -}}
{{- $graceMs := int64 (include "txmq.envValue" .settings.shutdown_grace_ms) }}
{{- add (int .ctx.Values.lifecycle.preStopSleepSeconds) (div (add $graceMs 999) 1000) (int .ctx.Values.lifecycle.stopMarginSeconds) }}
{{- end }}

{{/* The three gRPC probes on port N (txmq.probePort). Call with (dict "probes" .probes "port" N),
     and "readinessService" "<name>" for a readiness probe that asks that health service name
     instead of "" (startup and liveness always ask "": serving at all). */}}
{{- define "txmq.grpcProbes" -}}
startupProbe:
  grpc: {port: {{ .port }}}
  {{- toYaml .probes.startup | nindent 2 }}
readinessProbe:
  {{- if .readinessService }}
  grpc: {port: {{ .port }}, service: {{ .readinessService | quote }}}
  {{- else }}
  grpc: {port: {{ .port }}}
  {{- end }}
  {{- toYaml .probes.readiness | nindent 2 }}
livenessProbe:
  grpc: {port: {{ .port }}}
  {{- toYaml .probes.liveness | nindent 2 }}
{{- end }}

{{/* The health service name a store reports SERVING on only while it is an in-sync copy of
     its group (a store alone: as soon as it serves); txmq.protocol.READY_HEALTH_SERVICE,
     which a chart test holds this to. */}}
{{- define "txmq.store.readyService" -}}
txmq.ready
{{- end }}

{{/* Soft anti-affinity: spread a component's pods over nodes unless affinity is given. */}}
{{- define "txmq.affinity" -}}
{{- if .affinity }}
{{- toYaml .affinity }}
{{- else }}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "txmq.selectorLabels" . | nindent 12 }}
{{- end }}
{{- end }}

{{- define "txmq.tlsVolumeMount" -}}
{{- if include "txmq.tlsOn" . }}
- name: tls
  mountPath: {{ .Values.tls.mountPath }}
  readOnly: true
{{- end }}
{{- end }}

{{- define "txmq.tlsVolume" -}}
{{- if include "txmq.tlsOn" . }}
- name: tls
  secret:
    secretName: {{ include "txmq.tlsSecretName" . }}
    defaultMode: 0440
{{- end }}
{{- end }}

{{/* TLS of every service ----------------------------------------------------------------- */}}

{{/* "true" when tls.enabled or security.enabled. */}}
{{- define "txmq.tlsOn" -}}
{{- if or .Values.tls.enabled (.Values.security | default dict).enabled }}true{{ end }}
{{- end }}

{{/* "true" when TLS is on and the chart generates the CA and certificate: no
     tls.secretName, no tls.certManager.issuerRef, tls.generate. */}}
{{- define "txmq.tlsGenerated" -}}
{{- $tls := .Values.tls }}
{{- if and (include "txmq.tlsOn" .) (not $tls.secretName) (not ($tls.certManager.issuerRef | default dict).name) $tls.generate }}true{{ end }}
{{- end }}

{{/* The Secret with tls.crt, tls.key and ca.crt: tls.secretName, else (cert-manager issuing
     it, or the chart generating it) <fullname>-tls. */}}
{{- define "txmq.tlsSecretName" -}}
{{- if .Values.tls.secretName }}
{{- .Values.tls.secretName }}
{{- else if or (.Values.tls.certManager.issuerRef | default dict).name .Values.tls.generate }}
{{- printf "%s-tls" (include "txmq.fullname" .) }}
{{- else }}
{{- fail "TLS on (tls.enabled or security.enabled) with tls.generate false needs tls.secretName (a Secret with tls.crt, tls.key and ca.crt) or tls.certManager.issuerRef" }}
{{- end }}
{{- end }}

{{/* The DNS names of the release's certificate (generated or cert-manager's), as JSON:
     the name internal calls check, every Service (store, pull, txcheck, gateway,
     bootstrap, the stores' headless Service) in each spelling, each store pod's own name
     (which it advertises), with a locked-down etcd (txmq.etcdSecured) its client Service
     and members, localhost (a `txmq` command run in a pod) and tls.extraDnsNames. */}}
{{- define "txmq.tlsDnsNames" -}}
{{- $full := include "txmq.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $domain := .Values.clusterDomain }}
{{- $names := list (include "txmq.tlsServerName" .) }}
{{- range $service := list "store" "pull" "txcheck" "gateway" "bootstrap" "store-headless" }}
{{- $svc := printf "%s-%s" $full $service }}
{{- $names = concat $names (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns $domain)) }}
{{- end }}
{{- $names = append $names (printf "*.%s-store-headless.%s.svc.%s" $full $ns $domain) }}
{{- if include "txmq.etcdSecured" . }}
{{- $svc := printf "%s-etcd" $full }}
{{- $names = concat $names (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns $domain)) }}
{{- $names = append $names (printf "*.%s.%s.svc.%s" (include "txmq.etcd.headless" .) $ns $domain) }}
{{- end }}
{{- $names = concat $names (list "localhost") (.Values.tls.extraDnsNames | default list) }}
{{- $names | uniq | toJson }}
{{- end }}

{{/* The one name the services check each other's certificates against (pull, txcheck and
     gateway pods are dialled by their IPs, which no certificate names). */}}
{{- define "txmq.tlsServerName" -}}
{{- printf "%s-bootstrap.%s.svc.%s" (include "txmq.fullname" .) .Release.Namespace .Values.clusterDomain }}
{{- end }}

{{/* A service's tls_mode as the service will see it. Call with (dict "ctx" $ "service" "store"). */}}
{{- define "txmq.tlsMode" -}}
{{- $mode := toString (index .ctx.Values .service).settings.tls_mode }}
{{- if $mode }}{{ $mode }}{{ else }}{{ ternary "enforcing" "disabled" (eq (include "txmq.tlsOn" .ctx) "true") }}{{ end }}
{{- end }}

{{/* The port the gRPC probes ask: the service port, or with TLS on it, probe_port (plaintext,
     health only: Kubernetes' gRPC probes do not speak TLS). Call with (dict "ctx" $ "service" "store"). */}}
{{- define "txmq.probePort" -}}
{{- $settings := (index .ctx.Values .service).settings }}
{{- if eq (include "txmq.tlsMode" .) "disabled" }}
{{- int (include "txmq.envValue" $settings.port) }}
{{- else }}
{{- $probe := int (include "txmq.envValue" $settings.probe_port) }}
{{- if le $probe 0 }}
{{- fail (printf "%s.settings.probe_port must be a port (not %d) with TLS on: Kubernetes' gRPC probes cannot speak TLS" .service $probe) }}
{{- end }}
{{- $probe }}
{{- end }}
{{- end }}

{{/* containerPorts beyond grpc, grpc-tls and metrics: the probe port and, with tls_mode
     permissive, the plaintext port. Call with (dict "ctx" $ "service" "store"). */}}
{{- define "txmq.extraPorts" -}}
{{- $settings := (index .ctx.Values .service).settings }}
{{- $port := int (include "txmq.envValue" $settings.port) }}
{{- $seen := list $port }}
{{- with include "txmq.metricsPort" (dict "settings" $settings) }}{{ $seen = append $seen (int .) }}{{ end }}
{{- with include "txmq.tlsPort" . }}{{ $seen = append $seen (int .) }}{{ end }}
{{- range $name := list "probe_port" "plaintext_port" }}
{{- $p := int (include "txmq.envValue" (index $settings $name)) }}
{{- if gt $p 0 }}
{{- if has $p $seen }}
{{- fail (printf "%s.settings.%s (%d) must differ from the pod's other ports" $.service $name $p) }}
{{- end }}
{{- $seen = append $seen $p }}
- name: {{ ternary "probe" "grpc-plain" (eq $name "probe_port") }}
  containerPort: {{ $p }}
  protocol: TCP
{{- end }}
{{- end }}
{{- end }}

{{/* Env of a `txmq` command run in a pod (kubectl exec ... txmq topic list): the client
     TLS files, with tls.enabled. */}}
{{- define "txmq.clientTlsEnv" -}}
{{- if include "txmq.tlsOn" . }}
{{- $dir := trimSuffix "/" .Values.tls.mountPath }}
- name: TXMQ_TLS_CA_FILE
  value: {{ printf "%s/ca.crt" $dir | quote }}
- name: TXMQ_TLS_CERT_FILE
  value: {{ printf "%s/tls.crt" $dir | quote }}
- name: TXMQ_TLS_KEY_FILE
  value: {{ printf "%s/tls.key" $dir | quote }}
- name: TXMQ_TLS_SERVER_NAME
  value: {{ include "txmq.tlsServerName" . | quote }}
{{- end }}
{{- end }}

{{/* "true" when store, pull and txcheck get NetworkPolicies: networkPolicy.enabled and
     networkPolicy.services.enabled (null: security.enabled). */}}
{{- define "txmq.servicePoliciesOn" -}}
{{- $np := .Values.networkPolicy }}
{{- $on := ($np.services | default dict).enabled }}
{{- if kindIs "invalid" $on }}
{{- $on = (.Values.security | default dict).enabled }}
{{- end }}
{{- if and $np.enabled $on }}true{{ end }}
{{- end }}

{{/* Analytics exports ------------------------------------------------------------------ */}}

{{- define "txmq.exportsClaim" -}}
{{- default (printf "%s-exports" (include "txmq.fullname" .)) .Values.analytics.exports.existingClaim }}
{{- end }}

{{/* "true" when the stores export into the volume shared with the analytics job. */}}
{{- define "txmq.exportsShared" -}}
{{- if and .Values.analytics.enabled (eq .Values.analytics.exports.source "store") }}true{{ end }}
{{- end }}

{{/* "true" when the analytics job mounts the exports volume (source store or remote). */}}
{{- define "txmq.exportsVolume" -}}
{{- if and .Values.analytics.enabled (ne .Values.analytics.exports.source "none") }}true{{ end }}
{{- end }}

{{- define "txmq.exportsDir" -}}
{{- printf "%s/exports" (trimSuffix "/" .Values.analytics.exports.mountPath) }}
{{- end }}

{{- define "txmq.exportsAccessModes" -}}
{{- $e := .Values.analytics.exports }}
{{- if $e.accessModes }}
{{- toYaml $e.accessModes }}
{{- else if eq $e.source "store" }}
- ReadWriteMany
{{- else }}
- ReadWriteOnce
{{- end }}
{{- end }}

{{/* Metrics ------------------------------------------------------------------------------ */}}

{{/* The metrics port of a service's settings, or "" when metrics are off (-1). */}}
{{- define "txmq.metricsPort" -}}
{{- if hasKey .settings "metrics_port" }}
{{- $port := int (include "txmq.envValue" .settings.metrics_port) }}
{{- if gt $port 0 }}{{ $port }}{{ end }}
{{- end }}
{{- end }}

{{/* TLS ---------------------------------------------------------------------------------- */}}

{{/* The TLS port of a service's settings (the gateway's tls_port), or "" when it serves no
     TLS (-1, or no such setting). Fails when the port cannot work in a pod: without the
     mounted Secret (the schema refuses that too), or on a port the pod already uses.
     Call with (dict "ctx" $ "service" "gateway"). */}}
{{- define "txmq.tlsPort" -}}
{{- $settings := (index .ctx.Values .service).settings }}
{{- if hasKey $settings "tls_port" }}
{{- $port := int (include "txmq.envValue" $settings.tls_port) }}
{{- if ge $port 0 }}
{{- if not (include "txmq.tlsOn" .ctx) }}
{{- fail (printf "%s.settings.tls_port needs tls.enabled (the certificate from tls.secretName, tls.certManager.issuerRef or generated) or security.enabled" .service) }}
{{- end }}
{{- if eq $port 0 }}
{{- fail (printf "%s.settings.tls_port must be a fixed port (a Service and containerPort need one), not 0" .service) }}
{{- end }}
{{- if eq $port (int (include "txmq.envValue" $settings.port)) }}
{{- fail (printf "%s.settings.tls_port must differ from %s.settings.port" .service .service) }}
{{- end }}
{{- if eq (toString $port) (include "txmq.metricsPort" (dict "settings" $settings)) }}
{{- fail (printf "%s.settings.tls_port must differ from %s.settings.metrics_port" .service .service) }}
{{- end }}
{{- $port }}
{{- end }}
{{- end }}
{{- end }}

{{- define "txmq.metricsAnnotations" -}}
{{- with include "txmq.metricsPort" . }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ . | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end }}
