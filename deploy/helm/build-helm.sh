#!/usr/bin/env bash
# build-helm.sh builds the helm program from its Go module (helm.sh/helm/v3,
# at the pinned version) into a cache folder and prints the binary's path.
# A cached binary is reused as it is: the version is fixed, and the build
# takes minutes on two cores.
set -euo pipefail

helm_version=v3.22.0 # deploy's Helm tests pin nothing else; bump here
out="${XDG_CACHE_HOME:-$HOME/.cache}/toolwire/helm-${helm_version}"

if [[ -x "$out/helm" ]]; then
	echo "$out/helm"
	exit 0
fi
mkdir -p "$out"

# Build into a temporary folder and move into place at the end, so an
# interrupted build never leaves a binary that looks complete.
tmp="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# The variables Helm's Makefile sets: the version helm reports, and the
# Kubernetes version "helm template" and "helm lint" assume without a
# cluster (the minor of the k8s.io modules this Helm is built with; left
# unset, Helm assumes 1.20 and a chart's kubeVersion: ">=1.30" fails).
k8s_minor=37 # keep in step with k8s.io/client-go v0.37.x in helm's go.mod
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
	ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done
CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-buildvcs=false \
	go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$helm_version" >&2
mv "$tmp/helm" "$out/helm"
echo "$out/helm"
