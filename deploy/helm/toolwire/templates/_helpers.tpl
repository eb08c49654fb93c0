{{/* The chart's name: "toolwire" unless nameOverride. */}}
{{- define "toolwire.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The objects' base name: the release name when it already says toolwire,
else RELEASE-toolwire; 63 characters at most (DNS labels), less the longest
suffix added to it ("-headless").
*/}}
{{- define "toolwire.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 54 | trimSuffix "-" }}
{{- else }}
{{- $name := include "toolwire.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 54 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 54 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Selector labels: every Service, the PodDisruptionBudget and the NetworkPolicy select the pods by these. */}}
{{- define "toolwire.selectorLabels" -}}
app.kubernetes.io/name: {{ include "toolwire.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "toolwire.labels" -}}
{{ include "toolwire.selectorLabels" . }}
app.kubernetes.io/part-of: toolwire
app.kubernetes.io/component: server
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "toolwire.serviceAccountName" -}}
{{- default (include "toolwire.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{- define "toolwire.tokensSecret" -}}
{{- default (printf "%s-tokens" (include "toolwire.fullname" .)) .Values.tokens.existingSecret }}
{{- end }}

{{/* The auth.oidc fields that are set, as a dict (empty when OIDC is off). */}}
{{- define "toolwire.oidc" -}}
{{- $oidc := dict }}
{{- range $k, $v := (.Values.auth.oidc | default dict) }}
{{- if $v }}{{ $_ := set $oidc $k $v }}{{ end }}
{{- end }}
{{- toYaml $oidc }}
{{- end }}

{{/*
The server's config file (--config): the config values, the sandbox
section, and the settings that are rendered only when set.
*/}}
{{- define "toolwire.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) }}
{{- $sandbox := omit .Values.sandbox "sessionUIDs" }}
{{- if $sandbox }}{{ $_ := set $cfg "sandbox" $sandbox }}{{ end }}
{{- $auth := dict }}
{{- $oidc := include "toolwire.oidc" . | fromYaml }}
{{- if $oidc }}{{ $_ := set $auth "oidc" $oidc }}{{ end }}
{{- if .Values.auth.groups }}{{ $_ := set $auth "groups" .Values.auth.groups }}{{ end }}
{{- if .Values.auth.permissions }}{{ $_ := set $auth "permissions" .Values.auth.permissions }}{{ end }}
{{- if $auth }}{{ $_ := set $cfg "auth" $auth }}{{ end }}
{{- if .Values.http.enabled }}
{{- $hosts := list }}
{{- range $svc := list (include "toolwire.fullname" .) (printf "%s-headless" (include "toolwire.fullname" .)) }}
{{- range $suffix := list "" (printf ".%s" $.Release.Namespace) (printf ".%s.svc" $.Release.Namespace) (printf ".%s.svc.cluster.local" $.Release.Namespace) }}
{{- $hosts = append $hosts (printf "%s%s" $svc $suffix) }}
{{- end }}
{{- end }}
{{- $_ := set $cfg "http_allowed_hosts" (concat $hosts (.Values.http.allowedHosts | default list)) }}
{{- end }}
{{- /* More than one replica: connections age, so that clients, which resolve the headless Service again only when one closes, reach the replicas added since (docs/deploy.md). */}}
{{- if and (or .Values.autoscaling.enabled (gt (int .Values.replicas) 1)) (not (hasKey $cfg "max_connection_age")) (not (regexMatch `(^|\s)--?max-connection-age(=|\s|$)` (join " " (.Values.extraArgs | default list)))) }}
{{- $_ := set $cfg "max_connection_age" "10m" }}
{{- end }}
{{- if .Values.policies }}{{ $_ := set $cfg "policies" .Values.policies }}{{ end }}
{{- if .Values.audit_log }}{{ $_ := set $cfg "audit_log" .Values.audit_log }}{{ end }}
{{- /* Numbers, also when --set made them strings ("0.5"). */}}
{{- if not (kindIs "invalid" .Values.rate_per_caller) }}{{ $_ := set $cfg "rate_per_caller" (float64 .Values.rate_per_caller) }}{{ end }}
{{- if not (kindIs "invalid" .Values.rate_burst) }}{{ $_ := set $cfg "rate_burst" (int64 .Values.rate_burst) }}{{ end }}
{{- toYaml $cfg }}
{{- end }}

{{/* The folder of audit_log that gets an emptyDir, or "" (standard output, or unset). */}}
{{- define "toolwire.auditDir" -}}
{{- $log := .Values.audit_log | default "" }}
{{- if and $log (ne $log "-") }}
{{- if not (isAbs $log) }}{{ fail "audit_log: want an absolute path in the container, or \"-\"" }}{{ end }}
{{- $dir := dir $log }}
{{- if eq $dir "/" }}{{ fail "audit_log: put it in a folder of its own, not at the root" }}{{ end }}
{{- range list "/tmp" "/workspace" "/etc/toolwire" }}
{{- if or (eq $dir .) (hasPrefix (printf "%s/" .) $dir) }}
{{- fail (printf "audit_log %s: put it in a folder of its own, not under %s (tools or the config reach it there, or it is read-only)" $log .) }}
{{- end }}
{{- end }}
{{- $dir }}
{{- end }}
{{- end }}

{{/* The store's URL: store, or config.store where serve's config file takes it; "" for the default (memory), or storeSecret's. */}}
{{- define "toolwire.store" -}}
{{- .Values.store | default (get (.Values.config | default dict) "store") | default "" }}
{{- end }}

{{/*
toolwire.noPasswords fails the render when a URL with a password (a
store's redis://user:PASSWORD@host, an OTLP endpoint's) is in a value that
lands outside a Secret: the Deployment's arguments and environment and the
ConfigMap are read by anyone who may read those objects (kubectl get
deployment, configmap, replicaset, pod), a wider circle than Secrets'. A
store's URL with a password goes in a Secret of its own (storeSecret).
*/}}
{{- define "toolwire.noPasswords" -}}
{{- $withPassword := `[a-z][a-z0-9+.-]*://[^@/?#\s"']*:[^@/?#\s"']*@` }}
{{- if and .Values.storeSecret.name (or .Values.store (get (.Values.config | default dict) "store")) }}
{{- fail "storeSecret.name and store (or config.store): give the store's URL in one place" }}
{{- end }}
{{- range $where, $v := dict "store" (.Values.store | default "") "config" (toYaml (.Values.config | default dict)) "extraArgs" (toYaml (.Values.extraArgs | default list)) "extraEnv" (toYaml (.Values.extraEnv | default list)) "otlp.endpoint" (.Values.otlp.endpoint | default "") }}
{{- if regexMatch $withPassword $v }}
{{- fail (printf "%s holds a URL with a password (%s), which would be rendered into the Deployment or the ConfigMap for anyone who may read them: put a store's URL in a Secret named by storeSecret, other credentials in extraEnv from a Secret (valueFrom.secretKeyRef) (docs/deploy.md)" $where (regexReplaceAll ":[^:/]*@$" (regexFind $withPassword $v) ":xxxxx@")) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
"memory" or "bolt" when the store lives in one pod (serve's memory store, or a
bbolt file that one process may open at a time), else "". Such a store is
each replica's own: a retried call that reaches another replica runs again
(its idempotency record is not there), a detached batch cannot be attached
or cancelled through another replica, and rate limits count per pod; and a
second pod cannot open a bolt file the first holds. The Deployment refuses
more than one replica with it, and rolls a bolt store's pod by Recreate.
*/}}
{{- define "toolwire.podStore" -}}
{{- $store := include "toolwire.store" . }}
{{- if .Values.storeSecret.name }}
{{- else if or (eq $store "") (eq $store "memory") (hasPrefix "memory:" $store) }}memory
{{- else if hasPrefix "bolt:" $store }}bolt
{{- end }}
{{- end }}

{{/*
The TCP ports of the Redis store, as a JSON array of numbers in ascending
order: the port of each host the store URL names (store, or config.store) (redis://, rediss://,
redis+cluster://a:7000,b:7001,…; 6379 for a host without one), with
storeEgressPorts (the ports of nodes a cluster announces beyond those its
URL lists) and storeEgressPort (one more port, as older values files set
it). [] when the store is not Redis.
*/}}
{{- define "toolwire.storePorts" -}}
{{- $store := include "toolwire.store" . }}
{{- $padded := list }}
{{- if .Values.storeSecret.name }}
{{- /* The URL is in the Secret: storeEgressPorts, or Redis's 6379. */}}
{{- $ports := list }}
{{- range concat (.Values.storeEgressPorts | default list) (compact (list .Values.storeEgressPort)) }}
{{- $ports = append $ports (toString .) }}
{{- end }}
{{- range $ports | default (list "6379") }}
{{- $n := atoi . }}
{{- if or (lt $n 1) (gt $n 65535) (not (regexMatch "^[0-9]+$" .)) }}{{ fail (printf "storeEgressPorts %v: %q is not a TCP port" $.Values.storeEgressPorts .) }}{{ end }}
{{- $padded = append $padded (printf "%05d" $n) }}
{{- end }}
{{- else if regexMatch "^rediss?(\\+cluster)?://" $store }}
{{- $ports := list }}
{{- $hosts := regexReplaceAll "^[a-z+]+://" $store "" }}
{{- $hosts = regexReplaceAll "^[^@/?#]*@" $hosts "" }}
{{- $hosts = regexReplaceAll "[/?#].*$" $hosts "" }}
{{- range splitList "," $hosts }}
{{- $port := regexFind ":[0-9]+$" . }}
{{- $ports = append $ports (ternary (trimPrefix ":" $port) "6379" (ne $port "")) }}
{{- end }}
{{- range concat (.Values.storeEgressPorts | default list) (compact (list .Values.storeEgressPort)) }}
{{- $ports = append $ports (toString .) }}
{{- end }}
{{- range $ports }}
{{- $n := atoi . }}
{{- if or (lt $n 1) (gt $n 65535) (not (regexMatch "^[0-9]+$" .)) }}{{ fail (printf "store %q, storeEgressPorts %v: %q is not a TCP port" $store $.Values.storeEgressPorts .) }}{{ end }}
{{- $padded = append $padded (printf "%05d" $n) }}
{{- end }}
{{- end }}
{{- $out := list }}
{{- range $padded | uniq | sortAlpha }}{{ $out = append $out (atoi .) }}{{ end }}
{{- toJson $out }}
{{- end }}

{{/*
toolwire.seconds: a Go duration ("30s", "1m30s", "1500ms") in whole
seconds, rounded up.
*/}}
{{- define "toolwire.seconds" -}}
{{- $total := 0.0 }}
{{- $units := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 }}
{{- range regexFindAll "[0-9]*\\.?[0-9]+(ns|us|µs|ms|h|m|s)" (toString .) -1 }}
{{- $n := regexFind "^[0-9]*\\.?[0-9]+" . }}
{{- $total = addf $total (mulf (float64 $n) (get $units (trimPrefix $n .))) }}
{{- end }}
{{- ceil $total | int }}
{{- end }}

{{/*
toolwire.shutdownSeconds: the longest shutdown toolwire serve makes with
the chart's config and extraArgs, as the server computes it
(cmd/toolwire's shutdownBound, which it logs at start): the engine's drain
(drain_timeout, then abandon_grace and 5s for the cancelled calls) and
gRPC's graceful stop (5s), or the HTTP port's drain (http_drain_timeout)
if longer; the metrics listener's drain (5s); the closers (10s) and
telemetry's flush (5s). deploy's TestHelmConfigBootsServer holds the two
together.
*/}}
{{- define "toolwire.shutdownSeconds" -}}
{{- $c := .Values.config | default dict }}
{{- $drain := get $c "drain_timeout" | default "30s" }}
{{- $abandon := get $c "abandon_grace" | default "2s" }}
{{- $args := .Values.extraArgs | default list }}
{{- range $i, $a := $args }}
{{- $next := "" }}
{{- if lt (add1 $i) (len $args) }}{{ $next = index $args (add1 $i) | toString }}{{ end }}
{{- range $flag := list "-drain-timeout" "--drain-timeout" "-abandon-grace" "--abandon-grace" }}
{{- $value := "" }}
{{- if hasPrefix (printf "%s=" $flag) (toString $a) }}{{ $value = trimPrefix (printf "%s=" $flag) (toString $a) }}{{ else if eq (toString $a) $flag }}{{ $value = $next }}{{ end }}
{{- if and $value (hasSuffix "drain-timeout" $flag) }}{{ $drain = $value }}{{ end }}
{{- if and $value (hasSuffix "abandon-grace" $flag) }}{{ $abandon = $value }}{{ end }}
{{- end }}
{{- end }}
{{- $engine := add (include "toolwire.seconds" $drain | int | default 30) (include "toolwire.seconds" $abandon | int | default 2) 5 5 }}
{{- $http := include "toolwire.seconds" (get $c "http_drain_timeout" | default "30s") | int | default 30 }}
{{- add (max $engine $http) 5 10 5 }}
{{- end }}

{{/*
toolwire.bytes: a Kubernetes quantity ("512Mi", "1.5Gi", "2G", a number of
bytes) in bytes, as an integer; it fails, naming what (.what), on anything
else. Call it with (dict "q" QUANTITY "what" "the value's name").
*/}}
{{- define "toolwire.bytes" -}}
{{- $q := ternary (.q | int64 | toString) (toString .q) (kindIs "float64" .q) }}
{{- if not (regexMatch "^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$" $q) }}{{ fail (printf "%s %q: want a number of bytes with Ki, Mi, Gi, Ti, k, M, G or T, or none" .what $q) }}{{ end }}
{{- $n := regexFind "^[0-9]+(\\.[0-9]+)?" $q }}
{{- $scale := get (dict "" 1.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0) (trimPrefix $n $q) }}
{{- mulf (float64 $n) $scale | floor | int64 }}
{{- end }}

{{/*
toolwire.goMemLimit: GOMEMLIMIT for the pods, nine tenths of
resources.limits.memory in MiB ("460MiB" for 512Mi), or "" when there is
no memory limit or extraEnv sets GOMEMLIMIT itself. Without it Go's
collector lets the heap grow to twice what is live, past the container's
limit, and the kernel kills the pod with every call in it; the tenth left
is for what Go does not count and for run_command's commands, which share
the limit. deploy's TestGoMemLimit holds it.
*/}}
{{- define "toolwire.goMemLimit" -}}
{{- $limit := get (get (.Values.resources | default dict) "limits" | default dict) "memory" | default "" }}
{{- $own := false }}
{{- range .Values.extraEnv | default list }}{{ if eq (toString .name) "GOMEMLIMIT" }}{{ $own = true }}{{ end }}{{ end }}
{{- if and $limit (not $own) }}
{{- $mib := div (mul (include "toolwire.bytes" (dict "q" $limit "what" "resources.limits.memory") | int64) 9) 10485760 }}
{{- if lt $mib 1 }}{{ fail (printf "resources.limits.memory %v: too little for the server" $limit) }}{{ end }}
{{- printf "%dMiB" $mib }}
{{- end }}
{{- end }}

{{/*
toolwire.checkWorkspace fails the render when sandbox.max_workspace_bytes
(the server's 8 GiB when unset) is not below workspace.sizeLimit, the
workspace's and /tmp's emptyDirs': past it the kubelet evicts the pod,
every caller's calls with it, where the bound refuses the one write_file
or ends the one command that would pass it (the server cannot see the
emptyDir's limit: statfs shows the node's disk). deploy's
TestWorkspaceBoundBelowVolumes holds it.
*/}}
{{- define "toolwire.checkWorkspace" -}}
{{- with .Values.workspace.sizeLimit }}
{{- $volume := include "toolwire.bytes" (dict "q" . "what" "workspace.sizeLimit") | int64 }}
{{- $bound := $.Values.sandbox.max_workspace_bytes | default 8589934592 | int64 }}
{{- if ge $bound $volume }}
{{- fail (printf "sandbox.max_workspace_bytes %d (8 GiB when unset) is not below workspace.sizeLimit %v (%d bytes), past which the kubelet evicts the pod with every call in it: keep the bound below the volumes (docs/workspace-tools.md#room-on-disk)" $bound . $volume) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
toolwire.checkExtraArgs fails the render when extraArgs gives a flag the
chart sets itself: serve takes the last of a flag given twice, so
--health-listen=:9999 there moved the health port away from the probes
(the pod restarted for ever), --listen away from the Services, and
--store past the check of replicas against the store.
*/}}
{{- define "toolwire.checkExtraArgs" -}}
{{- $owned := dict "config" "the ConfigMap" "listen" "ports.grpc" "http-listen" "ports.http and http.enabled" "health-listen" "ports.health" "admin-listen" "ports.metrics" "tokens-file" "tokens" "workspace" "workspace" "store" "store or storeSecret" }}
{{- range .Values.extraArgs | default list }}
{{- $name := regexReplaceAll "=.*$" (trimPrefix "-" (trimPrefix "-" (toString .))) "" }}
{{- if and (hasPrefix "-" (toString .)) (hasKey $owned $name) }}
{{- fail (printf "extraArgs %s: the chart sets --%s itself, from %s, and the probes, Services and checks follow it; serve would take the later one. Set the value instead" (regexReplaceAll "=.*$" (toString .) "") $name (get $owned $name)) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
toolwire.checkAuth fails the render on tokens and auth values that serve
refuses at start, or that would be ignored: tokens.callers beside
tokens.existingSecret (the chart mounts the Secret and renders none), and
static tokens beside OIDC without auth.oidc.caller_prefix (serve refuses a
JWT and a token that could name the same caller: the pods would not start).
*/}}
{{- define "toolwire.checkAuth" -}}
{{- if and .Values.tokens.existingSecret .Values.tokens.callers }}
{{- fail "tokens.callers and tokens.existingSecret: the pods mount the Secret tokens.existingSecret names and the chart renders no tokens of its own, so tokens.callers would be ignored; put the callers in that Secret, or leave existingSecret empty" }}
{{- end }}
{{- $oidc := include "toolwire.oidc" . | fromYaml }}
{{- if and $oidc .Values.tokens.callers (not (get $oidc "caller_prefix")) }}
{{- fail "tokens.callers beside auth.oidc: set auth.oidc.caller_prefix (\"oidc:\", or \"-\" to share the names on purpose), as serve refuses a JWT and a static token that could name the same caller and the pods would not start (docs/auth.md)" }}
{{- end }}
{{- end }}
