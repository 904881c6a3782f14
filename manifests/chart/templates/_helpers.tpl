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
{{- /* The extenders stanza of a KubeSchedulerConfiguration that calls karpy's extender: by the Service's DNS
name, or by extender.clusterIP where the scheduler cannot resolve cluster names (hostNetwork). */}}
{{- define "karpy.schedulerExtenders" -}}
extenders:
  - urlPrefix: "http://{{ default (printf "%s-extender.%s.svc" .Release.Name .Release.Namespace) .Values.extender.clusterIP }}:{{ .Values.extender.port }}/scheduler"
    filterVerb: filter
    prioritizeVerb: prioritize
    bindVerb: bind
    weight: 1
    enableHTTPS: false
    nodeCacheCapable: true
    httpTimeout: 5s
    ignorable: true
{{- end -}}
