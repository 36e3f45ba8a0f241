#!/usr/bin/env bash
# Installs the Debian packages attest-gateway needs to build and test, if any is missing.
# Idempotent; needs root (or sudo). Used by scripts/test.sh and scripts/run.sh.
set -euo pipefail

packages=(
  libssl-dev       # OpenSSL: hashing, ECDSA, X.509, TLS (module CGatewayOpenSSL)
  libnghttp2-dev   # nghttp2: HTTP/2 (module CGatewayNGHTTP2)
  pkg-config       # how SwiftPM finds both
  openssl          # the openssl CLI, used by tests that cross-check certificates
  curl             # the HTTP client of the integration tests
  nginx            # the real upstream of the integration tests (started privately by each test)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
