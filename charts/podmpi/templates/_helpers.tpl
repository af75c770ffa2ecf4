{{/*
The tag of every podmpi image: image.tag, else the chart's appVersion.
*/}}
{{- define "podmpi.tag" -}}
{{- default .Chart.AppVersion .Values.image.tag -}}
{{- end -}}

{{/*
The reference of podmpi image "name" (podmpi, openmpi, mpich, intelmpi):
<image.registry>/<name>:<tag>.
*/}}
{{- define "podmpi.image" -}}
{{- printf "%s/%s:%s" (trimSuffix "/" .root.Values.image.registry) .name (include "podmpi.tag" .root) -}}
{{- end -}}

{{/*
The labels of every object the chart makes; "component" names the part.
*/}}
{{- define "podmpi.labels" -}}
app.kubernetes.io/name: podmpi
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ include "podmpi.tag" .root | quote }}
app.kubernetes.io/part-of: podmpi
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/component: {{ .component }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
One manifest of files/ (a link into deploy/) as a dict, with the chart's
labels added to its metadata.
*/}}
{{- define "podmpi.object" -}}
{{- $obj := .root.Files.Get .file | fromYaml -}}
{{- if not $obj.kind -}}
{{- fail (printf "podmpi chart: %s is missing or holds no object (files/ links into deploy/: package the chart from a checkout of the repository)" .file) -}}
{{- end -}}
{{- $labels := include "podmpi.labels" (dict "root" .root "component" .component) | fromYaml -}}
{{- $_ := set $obj.metadata "labels" (merge $labels (default dict $obj.metadata.labels)) -}}
{{- toYaml $obj -}}
{{- end -}}
