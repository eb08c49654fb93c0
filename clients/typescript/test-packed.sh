#!/usr/bin/env bash
# Tests what would be published: packs @toolwire/client, installs the tarball
# with the frameworks' tested versions (from package.json) into a scratch
# project in a temporary folder, and runs the compiled tests there, where
# "@toolwire/client" resolves to the installed tarball, not to this folder.
# Needs `npm ci` here first, and TOOLWIRE_ADDR, TOOLWIRE_SERVE_LOG and
# TOOLWIRE_BIN set (see README.md, Development).
set -euo pipefail
cd "$(dirname "$0")"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
npm run --silent build:test
tarball=$(npm pack --silent --pack-destination "$scratch")
frameworks=$(node -e '
  const d = require("./package.json").devDependencies;
  console.log(["ai", "@openai/agents", "@langchain/core", "zod"].map((n) => `${n}@${d[n]}`).join(" "));')
cp -r dist-test "$scratch/test"
cd "$scratch"
echo '{"name": "toolwire-scratch", "private": true, "type": "module"}' >package.json
# shellcheck disable=SC2086 # one word per package
npm install --no-audit --no-fund --save-exact "./$tarball" $frameworks
node --input-type=module -e 'console.log("testing", import.meta.resolve("@toolwire/client"))'
node --test --test-concurrency=1 test/
