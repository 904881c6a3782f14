{{- define "karpy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}{{ default "karpy" .Values.serviceAccount.name }}{{- else -}}{{ required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}{{- end -}}
{{- end -}}
{{- define "karpy.labels" -}}
app.kubernetes.io/name: karpy
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}
{{- define "karpy.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}
{{- define "karpy.scheduling" -}}
priorityClassName: {{ .Values.priorityClassName }}
securityContext: {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
{{- define "karpy.tmp" -}}
volumes:
  - name: tmp
    emptyDir: {}
{{- end -}}
