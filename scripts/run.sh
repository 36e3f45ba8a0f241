#!/usr/bin/env bash
# Quick start: builds gatewayd and runs it on the shipped sample (Apple's own documentation
# attestation, verified at an instant inside its certificate's validity). Extra arguments are
# passed to gatewayd instead, e.g.: scripts/run.sh verify-assertion --help
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
swift build --product gatewayd >&2
bin="$(swift build --show-bin-path)/gatewayd"
if [ $# -gt 0 ]; then exec "$bin" "$@"; fi
sample=samples/apple-documentation-sample
echo "+ gatewayd verify-attestation (Apple's documentation sample)" >&2
exec "$bin" verify-attestation \
  --app-id "$(cat $sample/app-id.txt)" \
  --key-id @$sample/key-id.b64 \
  --attestation @$sample/attestation.b64 \
  --client-data-hash @$sample/client-data-hash.b64 \
  --environment production \
  --at "$(cat $sample/verified-at.txt)"
