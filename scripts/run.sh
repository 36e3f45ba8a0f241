#!/usr/bin/env bash
# Quick start: builds gatewayd and serves the shipped gateway.yaml (listener 0.0.0.0:8080, admin
# 127.0.0.1:9090, the in-process demo upstream; nothing else to install). Try, from another shell:
#   curl -i http://127.0.0.1:8080/hello
#   curl http://127.0.0.1:9090/readyz
# Ctrl-C drains and stops. Extra arguments go to gatewayd instead, e.g.:
#   scripts/run.sh check --config gateway.yaml
#   scripts/run.sh verify-attestation --help
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
swift build --product gatewayd >&2
bin="$(swift build --show-bin-path)/gatewayd"
scripts/stamp-build-info "$bin" || true   # git commit and build date for --version and build_info (docs/operations.md)
if [ $# -gt 0 ]; then exec "$bin" "$@"; fi
exec "$bin" run --config gateway.yaml
