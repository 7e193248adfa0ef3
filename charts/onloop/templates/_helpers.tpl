{{/* Names and labels. */}}
{{- define "onloop.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "onloop.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "onloop.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "onloop.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "onloop.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{ include "onloop.selectorLabels" . }}
{{- end -}}

{{- define "onloop.selectorLabels" -}}
app.kubernetes.io/name: {{ include "onloop.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "onloop.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "onloop.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "onloop.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Secret the pods read: the chart's own, or the one named by existingSecret. */}}
{{- define "onloop.secretName" -}}
{{- default (include "onloop.fullname" .) .Values.existingSecret -}}
{{- end -}}

{{- define "onloop.publicUrl" -}}
{{- if .Values.config.publicUrl -}}
{{- .Values.config.publicUrl -}}
{{- else if and .Values.ingress.enabled .Values.ingress.hosts -}}
{{- printf "https://%s" (first .Values.ingress.hosts) -}}
{{- else -}}
http://localhost:8000
{{- end -}}
{{- end -}}

{{/*
Checksums of the rendered ConfigMap and Secret: a change in either rolls every pod. With
existingSecret the chart cannot see the values; the name is hashed so switching secrets rolls.
*/}}
{{- define "onloop.checksums" -}}
checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- if .Values.existingSecret }}
checksum/secret: {{ .Values.existingSecret | sha256sum }}
{{- else }}
checksum/secret: {{ include (print $.Template.BasePath "/secret.yaml") . | sha256sum }}
{{- end }}
{{- end -}}

{{/* Settings every onloop container gets: the ConfigMap, secrets by key, the key file. */}}
{{- define "onloop.env" -}}
envFrom:
  - configMapRef:
      name: {{ include "onloop.fullname" . }}
env:
  - name: ONLOOP_WEBHOOK_SECRET
    valueFrom: {secretKeyRef: {name: {{ include "onloop.secretName" . }}, key: webhook-secret, optional: true}}
  - name: ONLOOP_CLIENT_SECRET
    valueFrom: {secretKeyRef: {name: {{ include "onloop.secretName" . }}, key: client-secret, optional: true}}
  - name: ONLOOP_SECRET_KEY
    valueFrom: {secretKeyRef: {name: {{ include "onloop.secretName" . }}, key: secret-key, optional: true}}
{{- if .Values.postgresql.enabled }}
  - name: POSTGRES_PASSWORD
    valueFrom: {secretKeyRef: {name: {{ include "onloop.secretName" . }}, key: postgres-password}}
  - name: ONLOOP_DATABASE_URL
    value: {{ printf "postgresql+psycopg://%s:$(POSTGRES_PASSWORD)@%s-postgresql:5432/%s" .Values.postgresql.username (include "onloop.fullname" .) .Values.postgresql.database | quote }}
{{- else }}
  - name: ONLOOP_DATABASE_URL
    valueFrom: {secretKeyRef: {name: {{ include "onloop.secretName" . }}, key: database-url}}
{{- end }}
{{- if not .Values.redis.enabled }}
  - name: ONLOOP_REDIS_URL
    valueFrom: {secretKeyRef: {name: {{ include "onloop.secretName" . }}, key: redis-url}}
{{- end }}
{{- end -}}

{{- define "onloop.keyVolume" -}}
- name: github-app-key
  secret:
    secretName: {{ include "onloop.secretName" . }}
    defaultMode: 0440
    optional: true
    items:
      - key: private-key.pem
        path: private-key.pem
- name: tmp
  emptyDir: {}
- name: home
  emptyDir: {}
{{- end -}}

{{- define "onloop.keyMount" -}}
- name: github-app-key
  mountPath: /etc/onloop/github
  readOnly: true
- name: tmp
  mountPath: /tmp
- name: home
  mountPath: /var/lib/onloop
{{- end -}}

{{- define "onloop.migrateInit" -}}
{{- if .Values.migrations.enabled }}
- name: migrate
  image: {{ include "onloop.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["db", "upgrade"]
  securityContext: {{- toYaml .Values.securityContext | nindent 4 }}
  {{- include "onloop.env" . | nindent 2 }}
  volumeMounts: {{- include "onloop.keyMount" . | nindent 4 }}
{{- end }}
{{- end -}}

{{- define "onloop.pullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
Private package indexes for the setup egress proxy: only the worker reads these files, so only
worker pods get the volumes, the mounts and (in "onloop.workerEnv") the ONLOOP_EGRESS_*
variables; web and beat do not, and the shared ConfigMap does not name them.
"onloop.egressCredentialsRef" / "onloop.egressCaRef": {"name", "key"} as JSON of the Secret /
ConfigMap holding the file, or "" when it is not configured.
*/}}
{{- define "onloop.egressCredentialsDir" -}}/etc/onloop/egress-credentials{{- end -}}
{{- define "onloop.egressCaDir" -}}/etc/onloop/egress-ca{{- end -}}

{{- define "onloop.egressCredentialsRef" -}}
{{- $c := .Values.egress.credentials -}}
{{- $inline := .Values.secrets.egressCredentials -}}
{{- if and $c.existingSecret $inline -}}
{{- fail "set egress.credentials.existingSecret or secrets.egressCredentials, not both" -}}
{{- else if $c.existingSecret -}}
{{- dict "name" $c.existingSecret "key" $c.key | toJson -}}
{{- else if $inline -}}
{{- if .Values.existingSecret -}}
{{- fail "secrets.egressCredentials is not used with existingSecret (the chart renders no Secret): put the file in a Secret and name it in egress.credentials.existingSecret" -}}
{{- end -}}
{{- dict "name" (include "onloop.fullname" .) "key" "egress-credentials.yaml" | toJson -}}
{{- end -}}
{{- end -}}

{{- define "onloop.egressCaRef" -}}
{{- $ca := .Values.egress.ca -}}
{{- if and $ca.existingConfigMap $ca.bundle -}}
{{- fail "set egress.ca.existingConfigMap or egress.ca.bundle, not both" -}}
{{- else if $ca.existingConfigMap -}}
{{- dict "name" $ca.existingConfigMap "key" $ca.key | toJson -}}
{{- else if $ca.bundle -}}
{{- dict "name" (printf "%s-egress-ca" (include "onloop.fullname" .)) "key" "ca.pem" | toJson -}}
{{- end -}}
{{- end -}}

{{- define "onloop.egressVolumes" -}}
{{- with include "onloop.egressCredentialsRef" . }}
{{- $ref := fromJson . }}
- name: egress-credentials
  secret:
    secretName: {{ $ref.name }}
    defaultMode: 0440
    items:
      - key: {{ $ref.key | quote }}
        path: credentials.yaml
{{- end }}
{{- with include "onloop.egressCaRef" . }}
{{- $ref := fromJson . }}
- name: egress-ca
  configMap:
    name: {{ $ref.name }}
    defaultMode: 0444
    items:
      - key: {{ $ref.key | quote }}
        path: ca.pem
{{- end }}
{{- end -}}

{{- define "onloop.egressMounts" -}}
{{- if include "onloop.egressCredentialsRef" . }}
- name: egress-credentials
  mountPath: {{ include "onloop.egressCredentialsDir" . }}
  readOnly: true
{{- end }}
{{- if include "onloop.egressCaRef" . }}
- name: egress-ca
  mountPath: {{ include "onloop.egressCaDir" . }}
  readOnly: true
{{- end }}
{{- end -}}

{{/* The worker's settings plus where its Docker daemon is and its private index files. */}}
{{- define "onloop.workerEnv" -}}
{{- include "onloop.env" . }}
{{- if eq .Values.sandbox.backend "docker" }}
  - name: DOCKER_HOST
    value: {{ ternary "tcp://127.0.0.1:2375" (printf "unix://%s" .Values.sandbox.host.socketPath) (eq .Values.sandbox.daemon "dind") | quote }}
{{- end }}
{{- if include "onloop.egressCredentialsRef" . }}
  - name: ONLOOP_EGRESS_CREDENTIALS_FILE
    value: {{ printf "%s/credentials.yaml" (include "onloop.egressCredentialsDir" .) | quote }}
{{- end }}
{{- if include "onloop.egressCaRef" . }}
  - name: ONLOOP_EGRESS_CA_FILE
    value: {{ printf "%s/ca.pem" (include "onloop.egressCaDir" .) | quote }}
{{- end }}
{{- end -}}

{{- define "onloop.workerMounts" -}}
{{ include "onloop.keyMount" . }}
- name: work
  mountPath: {{ .Values.sandbox.workDir }}
{{- if and (eq .Values.sandbox.backend "docker") (eq .Values.sandbox.daemon "host") }}
- name: docker-socket
  mountPath: {{ .Values.sandbox.host.socketPath }}
{{- end }}
{{- include "onloop.egressMounts" . }}
{{- end -}}

{{/* Pull the listed images into the daemon, then build the default sandbox image. */}}
{{- define "onloop.prepareScript" -}}
{{- with .Values.sandbox.pullImages -}}
python -c 'import docker, sys; c = docker.from_env(timeout=1800); [c.images.pull(i) for i in sys.argv[1:]]' {{ range . }}{{ . | squote }} {{ end }}
{{ end -}}
{{- if .Values.sandbox.buildImage -}}
onloop sandbox build-image --tag {{ .Values.sandbox.image | squote }}
{{ end -}}
{{- end -}}

{{/*
The docker:dind sidecar: a privileged daemon private to the pod, on loopback only (no other pod
can reach it), its storage an emptyDir, the workspace volume at the same path as the worker's.
*/}}
{{- define "onloop.dind" -}}
{{- $d := .Values.sandbox.dind -}}
- name: dind
  image: {{ $d.image }}
  args: ["dockerd", "--host=tcp://127.0.0.1:2375", "--tls=false"]
  env:
    - name: DOCKER_TLS_CERTDIR
      value: ""
  securityContext:
    privileged: true
    runAsNonRoot: false
    runAsUser: 0
    runAsGroup: 0
  startupProbe:
    exec:
      command: ["docker", "--host=tcp://127.0.0.1:2375", "version"]
    periodSeconds: 2
    failureThreshold: 90
  livenessProbe:
    exec:
      command: ["docker", "--host=tcp://127.0.0.1:2375", "version"]
    periodSeconds: 30
    timeoutSeconds: 10
  resources: {{- toYaml $d.resources | nindent 4 }}
  volumeMounts:
    - name: docker-data
      mountPath: /var/lib/docker
    - name: work
      mountPath: {{ .Values.sandbox.workDir }}
{{- end -}}

{{/* The worker's init containers: migrations, the dind native sidecar, sandbox images. */}}
{{- define "onloop.workerInits" -}}
{{- $sb := .Values.sandbox -}}
{{- $docker := eq $sb.backend "docker" -}}
{{- $dind := and $docker (eq $sb.daemon "dind") -}}
{{- $native := and $dind $sb.dind.nativeSidecar -}}
{{- $prepare := and $docker (or $sb.buildImage $sb.pullImages) -}}
{{- include "onloop.migrateInit" . }}
{{- if and $docker (eq $sb.daemon "host") }}
{{- $uid := .Values.podSecurityContext.runAsUser | default 10001 }}
# kubelet creates a hostPath directory as root: hand it to the worker's user.
- name: work-dir
  image: {{ include "onloop.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["chown", "{{ $uid }}:{{ .Values.podSecurityContext.runAsGroup | default $uid }}", {{ $sb.workDir | quote }}]
  securityContext:
    runAsUser: 0
    runAsNonRoot: false
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities: {drop: [ALL], add: [CHOWN]}
  volumeMounts:
    - name: work
      mountPath: {{ $sb.workDir }}
{{- end }}
{{- if $native }}
{{- include "onloop.dind" . | nindent 0 }}
  restartPolicy: Always
{{- end }}
{{- if and $prepare (not (and $dind (not $native))) }}
- name: sandbox-image
  image: {{ include "onloop.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["/bin/sh", "-ec", {{ include "onloop.prepareScript" . | quote }}]
  securityContext: {{- toYaml .Values.securityContext | nindent 4 }}
  {{- include "onloop.workerEnv" . | nindent 2 }}
  volumeMounts: {{- include "onloop.workerMounts" . | nindent 4 }}
{{- end }}
{{- end -}}
