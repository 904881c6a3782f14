{{- define "karpy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}{{ default "karpy" .Values.serviceAccount.name }}{{- else -}}{{ required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}{{- end -}}
{{- end -}}
{{- define "karpy.labels" -}}
app.kubernetes.io/name: karpy
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}
