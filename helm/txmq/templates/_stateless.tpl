{{/* Deployment, Service and PodDisruptionBudget of a stateless service (pull, txcheck,
     gateway). Call with (dict "ctx" $ "service" "pull"). */}}

{{- define "txmq.stateless.deployment" -}}
{{- $ctx := .ctx }}
{{- $service := .service }}
{{- $v := index $ctx.Values $service }}
{{- $full := include "txmq.fullname" $ctx }}
{{- $port := int (include "txmq.envValue" $v.settings.port) }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $full }}-{{ $service }}
  labels:
    {{- include "txmq.labels" (dict "ctx" $ctx "component" $service) | nindent 4 }}
spec:
  {{- if not (and (hasKey $v "autoscaling") $v.autoscaling.enabled) }}
  replicas: {{ $v.replicas }}
  {{- end }}
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 0
      maxSurge: 1
  selector:
    matchLabels:
      {{- include "txmq.selectorLabels" (dict "ctx" $ctx "component" $service) | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "txmq.labels" (dict "ctx" $ctx "component" $service) | nindent 8 }}
        {{- if include "txmq.answersRoutes" $service }}
        # Selected by the bootstrap Service.
        txmq.io/route: "true"
        {{- end }}
        {{- with $v.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- $annotations := merge (dict) ($v.podAnnotations | default dict) (include "txmq.metricsAnnotations" (dict "settings" $v.settings) | fromYaml) }}
      {{- with $annotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "txmq.serviceAccountName" $ctx }}
      automountServiceAccountToken: false
      # Service links would put TXMQ_{{ upper $service }}_PORT=tcp://... into the environment,
      # which is also the name of a setting.
      enableServiceLinks: false
      terminationGracePeriodSeconds: {{ include "txmq.terminationGrace" (dict "ctx" $ctx "settings" $v.settings) }}
      securityContext:
        {{- toYaml $ctx.Values.podSecurityContext | nindent 8 }}
      {{- with $ctx.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      affinity:
        {{- include "txmq.affinity" (dict "ctx" $ctx "component" $service "affinity" $v.affinity) | trim | nindent 8 }}
      {{- with $v.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: {{ $service }}
          image: {{ include "txmq.image" $ctx }}
          imagePullPolicy: {{ $ctx.Values.image.pullPolicy }}
          args: [{{ $service }}]
          env:
            {{- include "txmq.podEnv" $ctx | trim | nindent 12 }}
            {{- include "txmq.settingsEnv" (dict "ctx" $ctx "service" $service) | trim | nindent 12 }}
            {{- with include "txmq.secretEnv" (dict "ctx" $ctx "service" $service) }}
            {{- . | trim | nindent 12 }}
            {{- end }}
            {{- with include "txmq.clientTlsEnv" $ctx }}
            {{- . | trim | nindent 12 }}
            {{- end }}
            {{- with include "txmq.clientAuthEnv" (dict "ctx" $ctx "service" $service) }}
            {{- . | trim | nindent 12 }}
            {{- end }}
            {{- with $v.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: grpc
              containerPort: {{ $port }}
              protocol: TCP
            {{- with include "txmq.tlsPort" (dict "ctx" $ctx "service" $service) }}
            - name: grpc-tls
              containerPort: {{ . }}
              protocol: TCP
            {{- end }}
            {{- with include "txmq.metricsPort" (dict "settings" $v.settings) }}
            - name: metrics
              containerPort: {{ . }}
              protocol: TCP
            {{- end }}
            {{- with include "txmq.extraPorts" (dict "ctx" $ctx "service" $service) }}
            {{- . | trim | nindent 12 }}
            {{- end }}
          {{- include "txmq.grpcProbes" (dict "probes" $v.probes "port" (include "txmq.probePort" (dict "ctx" $ctx "service" $service))) | trim | nindent 10 }}
          lifecycle:
            preStop:
              exec:
                command: ["sleep", "{{ $ctx.Values.lifecycle.preStopSleepSeconds }}"]
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $ctx.Values.containerSecurityContext | nindent 12 }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            {{- if include "txmq.tlsOn" $ctx }}
            {{- include "txmq.tlsVolumeMount" $ctx | trim | nindent 12 }}
            {{- end }}
      volumes:
        - name: tmp
          emptyDir:
            sizeLimit: {{ $ctx.Values.tmpVolume.sizeLimit }}
        {{- if include "txmq.tlsOn" $ctx }}
        {{- include "txmq.tlsVolume" $ctx | trim | nindent 8 }}
        {{- end }}
{{- end }}

{{- define "txmq.stateless.service" -}}
{{- $ctx := .ctx }}
{{- $service := .service }}
{{- $v := index $ctx.Values $service }}
{{- $port := int (include "txmq.envValue" $v.settings.port) }}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "txmq.fullname" $ctx }}-{{ $service }}
  labels:
    {{- include "txmq.labels" (dict "ctx" $ctx "component" $service) | nindent 4 }}
  {{- with $v.service.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- $external := ne $v.service.type "ClusterIP" }}
spec:
  type: {{ $v.service.type }}
  {{- if and $external $v.service.externalTrafficPolicy }}
  externalTrafficPolicy: {{ $v.service.externalTrafficPolicy }}
  {{- end }}
  {{- if eq $v.service.type "LoadBalancer" }}
  {{- with $v.service.loadBalancerSourceRanges }}
  loadBalancerSourceRanges:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- end }}
  selector:
    {{- include "txmq.selectorLabels" (dict "ctx" $ctx "component" $service) | nindent 4 }}
  ports:
    - name: grpc
      port: {{ $port }}
      targetPort: grpc
      protocol: TCP
      {{- if and $external (gt (int $v.service.nodePort) 0) }}
      nodePort: {{ int $v.service.nodePort }}
      {{- end }}
    {{- with include "txmq.tlsPort" (dict "ctx" $ctx "service" $service) }}
    - name: grpc-tls
      port: {{ . }}
      targetPort: grpc-tls
      protocol: TCP
      {{- if and $external (gt (int $v.service.tlsNodePort) 0) }}
      nodePort: {{ int $v.service.tlsNodePort }}
      {{- end }}
    {{- end }}
    {{- $plain := int (include "txmq.envValue" $v.settings.plaintext_port) }}
    {{- if gt $plain 0 }}
    # tls_mode permissive: the same services in plaintext, while clients move to TLS.
    - name: grpc-plain
      port: {{ $plain }}
      targetPort: grpc-plain
      protocol: TCP
    {{- end }}
{{- end }}

{{- define "txmq.stateless.pdb" -}}
{{- $ctx := .ctx }}
{{- $service := .service }}
{{- $v := index $ctx.Values $service }}
{{- if $v.pdb.enabled }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "txmq.fullname" $ctx }}-{{ $service }}
  labels:
    {{- include "txmq.labels" (dict "ctx" $ctx "component" $service) | nindent 4 }}
spec:
  maxUnavailable: {{ $v.pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "txmq.selectorLabels" (dict "ctx" $ctx "component" $service) | nindent 6 }}
{{- end }}
{{- end }}
