#!/usr/bin/env bash
# build-kube.sh builds kube-apiserver, etcd and kubectl from their Go modules
# (pinned in ./kube/go.mod) into a cache folder and prints that folder.
# A folder that already holds all three binaries is reused as it is: the
# build takes many minutes on two cores and the inputs are fixed versions.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
kube_version=v1.37.2 # keep in step with k8s.io/kubernetes in kube/go.mod
etcd_version=v3.7.0  # keep in step with go.etcd.io/etcd/server/v3 in kube/go.mod
out="${XDG_CACHE_HOME:-$HOME/.cache}/toolwire/kube-${kube_version}"

if [[ -x "$out/kube-apiserver" && -x "$out/etcd" && -x "$out/kubectl" ]]; then
	echo "$out"
	exit 0
fi
mkdir -p "$out"

major="${kube_version#v}"
major="${major%%.*}"
minor="${kube_version#v*.}"
minor="${minor%%.*}"
# The version variables kubectl and the apiserver report; without them the
# server says v0.0.0-master and kubectl cannot compare versions.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
	ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

cd "$here/kube"
# Build into a temporary folder and move into place at the end, so an
# interrupted build never leaves a half-filled cache that looks complete.
tmp="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
export CGO_ENABLED=0
go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver >&2
go build -trimpath -ldflags "$ldflags" -o "$tmp/kubectl" k8s.io/kubernetes/cmd/kubectl >&2
go build -trimpath -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$etcd_version" -o "$tmp/etcd" go.etcd.io/etcd/server/v3 >&2
mv "$tmp/kube-apiserver" "$tmp/kubectl" "$tmp/etcd" "$out/"
echo "$out"
