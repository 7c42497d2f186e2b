{{/* The stores' layout ---------------------------------------------------------------------

store.groups.replicas 1: one StatefulSet <fullname>-store whose pods are each a store of
their own (store_id = pod name): the layout of the chart before store groups.
store.groups.replicas > 1: store.groups.count StatefulSets <fullname>-store-g<i>, one per
replicated store group (store_id = the StatefulSet's name, replica_id = the pod name).

"txmq.store.layout" checks the values (failing the render with the reason) and returns, as
YAML for fromYaml:
  grouped: true|false
  statefulSets: [{name, replicas, group}]   (group "" in the unreplicated layout)
  minInSync: <int>                          (store.settings.min_in_sync) */}}
{{- define "txmq.store.layout" -}}
{{- $v := .Values.store }}
{{- $g := $v.groups }}
{{- $full := include "txmq.fullname" . }}
{{- $count := int $g.count }}
{{- $replicas := int $g.replicas }}
{{- $minInSync := int (include "txmq.envValue" $v.settings.min_in_sync) }}
{{- if lt $count 1 }}
{{- fail (printf "store.groups.count must be at least 1 (got %d)" $count) }}
{{- end }}
{{- if lt $replicas 1 }}
{{- fail (printf "store.groups.replicas must be at least 1 (got %d)" $replicas) }}
{{- end }}
{{- $sets := list }}
{{- if eq $replicas 1 }}
{{- /* store.replicas, when set, is what it was before store groups: the number of stores. */}}
{{- $stores := $count }}
{{- if not (kindIs "invalid" $v.replicas) }}
{{- $stores = int $v.replicas }}
{{- end }}
{{- $sets = append $sets (dict "name" (printf "%s-store" $full) "replicas" $stores "group" "") }}
{{- else }}
{{- if not (kindIs "invalid" $v.replicas) }}
{{- fail (printf "store.replicas (%v) is the number of unreplicated stores; with store.groups.replicas %d set store.groups.count (the number of store groups) instead and leave store.replicas unset (null)" $v.replicas $replicas) }}
{{- end }}
{{- if gt $minInSync $replicas }}
{{- fail (printf "store.settings.min_in_sync (%d) is more than store.groups.replicas (%d): a group refuses every write while fewer than min_in_sync replicas are in sync, so it could never accept one" $minInSync $replicas) }}
{{- end }}
{{- if $v.settings.store_id }}
{{- fail (printf "store.settings.store_id must be empty with store.groups.replicas %d: the chart names each group (%s-store-g<i>)" $replicas $full) }}
{{- end }}
{{- if $v.settings.replica_id }}
{{- fail (printf "store.settings.replica_id must be empty with store.groups.replicas %d: each replica's id is its pod name (unique in its group, stable across restarts)" $replicas) }}
{{- end }}
{{- /* export_interval_ms "" is computed: on (60000) exactly when the exports are shared. */}}
{{- $exportMs := ternary 60000 (int64 (include "txmq.envValue" $v.settings.export_interval_ms)) (eq (toString $v.settings.export_interval_ms) "") }}
{{- if and (include "txmq.exportsShared" .) (gt $exportMs 0) }}
{{- fail (printf "analytics.exports.source=store with store.groups.replicas %d: every replica of a group would export the group's data into the shared volume, so the analytics job would count it %d times; set analytics.exports.source=remote (the job snapshots each group's leader over gRPC), or none, or store.settings.export_interval_ms=0" $replicas $replicas) }}
{{- end }}
{{- range $i := until $count }}
{{- $name := printf "%s-store-g%d" $full $i }}
{{- $sets = append $sets (dict "name" $name "replicas" $replicas "group" $name) }}
{{- end }}
{{- end }}
{{- dict "grouped" (gt $replicas 1) "statefulSets" $sets "minInSync" $minInSync | toYaml }}
{{- end }}

{{/* Selector labels of the store pods, and of one group's pods when group is set.
     Call with (dict "ctx" $ "group" "<group name or empty>"). */}}
{{- define "txmq.store.selectorLabels" -}}
{{ include "txmq.selectorLabels" (dict "ctx" .ctx "component" "store") }}
{{- with .group }}
txmq.io/store-group: {{ . }}
{{- end }}
{{- end }}

{{/* The store pods' affinity. Unreplicated layout, or store.groups.antiAffinity none:
     store.affinity, or by default a soft spread of every store pod over nodes. A group
     with antiAffinity required or preferred: store.affinity (nodeAffinity, podAffinity
     and podAntiAffinity terms kept) plus one podAntiAffinity term keeping the group's
     pods apart on store.groups.topologyKey. Call with (dict "ctx" $ "group" "<name>"). */}}
{{- define "txmq.store.affinity" -}}
{{- $v := .ctx.Values.store }}
{{- $mode := $v.groups.antiAffinity }}
{{- if or (not .group) (eq $mode "none") }}
{{- include "txmq.affinity" (dict "ctx" .ctx "component" "store" "affinity" $v.affinity) }}
{{- else }}
{{- $term := dict "topologyKey" $v.groups.topologyKey "labelSelector" (dict "matchLabels" (include "txmq.store.selectorLabels" . | fromYaml)) }}
{{- $affinity := deepCopy ($v.affinity | default dict) }}
{{- $anti := get $affinity "podAntiAffinity" | default dict }}
{{- if eq $mode "required" }}
{{- $key := "requiredDuringSchedulingIgnoredDuringExecution" }}
{{- $_ := set $anti $key (append (get $anti $key | default list) $term) }}
{{- else if eq $mode "preferred" }}
{{- $key := "preferredDuringSchedulingIgnoredDuringExecution" }}
{{- $_ := set $anti $key (append (get $anti $key | default list) (dict "weight" 100 "podAffinityTerm" $term)) }}
{{- else }}
{{- fail (printf "store.groups.antiAffinity must be required, preferred or none (got %v)" $mode) }}
{{- end }}
{{- $_ := set $affinity "podAntiAffinity" $anti }}
{{- toYaml $affinity }}
{{- end }}
{{- end }}
