#!/usr/bin/env bash
# Builds the OpenTelemetry Collector described by builder-config.yaml (beside
# this script) and prints the binary's path. The binary is cached under
# ${XDG_CACHE_HOME:-$HOME/.cache}/toolwire/, keyed by the manifest's hash:
# a build takes many minutes on a small machine, a cache hit none.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
manifest="$here/builder-config.yaml"
builder_version=v0.161.0 # keep at the manifest's collector release

key="$( (cat "$manifest"; echo "$builder_version") | sha256sum | cut -c1-16)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/toolwire/otelcol-$key"
bin="$cache/otelcol-toolwire"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
GOBIN="$work/bin" go install "go.opentelemetry.io/collector/cmd/builder@$builder_version" >&2
cp "$manifest" "$work/manifest.yaml"
(cd "$work" && ./bin/builder --config manifest.yaml >&2)
mkdir -p "$cache"
# Install atomically, so a concurrent or interrupted build never leaves a
# half-written binary where the next run would trust it.
cp "$work/otelcol-toolwire/otelcol-toolwire" "$bin.tmp"
mv "$bin.tmp" "$bin"
echo "$bin"
