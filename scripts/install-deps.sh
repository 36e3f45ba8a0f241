#!/usr/bin/env bash
# Installs the Debian packages attest-gateway needs to build and test, if any is missing.
# Idempotent; needs root (or sudo). Used by scripts/test.sh and scripts/run.sh.
set -euo pipefail

packages=(
  libssl-dev       # OpenSSL: hashing, ECDSA, X.509, TLS (module CGatewayOpenSSL)
  libnghttp2-dev   # nghttp2: HTTP/2 (module CGatewayNGHTTP2)
  libjemalloc-dev  # jemalloc: gatewayd's allocator (module CGatewayJemalloc)
  pkg-config       # how SwiftPM finds both
  openssl          # the openssl CLI, used by tests that cross-check certificates
  curl             # the HTTP client of the integration tests
  nghttp2-client   # nghttp and h2load: HTTP/2 (h2c) clients of the integration tests and bench/h2-vs-nginx
  nginx            # the real upstream of the integration tests (started privately by each test)
  haproxy          # a layer-4 balancer sending PROXY protocol v1/v2 in front of gatewayd (TrustedProxyTests)
  libhiredis-dev   # hiredis' reply reader: the oracle the Redis store's own RESP reader is tested against (CGatewayHiredis)
  systemd          # systemd-analyze: verifies deploy/systemd (Tests/DeployTests)
  prometheus       # promtool: checks and unit-tests deploy/prometheus rules, dashboard PromQL
  redis-server     # loads deploy/kubernetes' redis.conf (Tests/DeployTests)
  python3-venv     # the venv holding kubernetes-validate (below)
  busybox          # the container HEALTHCHECK client, run against a live gatewayd (Tests/DeployTests)
  strace           # traces gatewayd against the systemd unit's sandbox (Tests/DeployTests)
  debootstrap      # a Debian 12 root for the container image's runtime stage (deploy/container/check-runtime-rootfs)
  golang-go                        # builds h2spec, the HTTP/2 conformance suite (scripts/h2spec.sh), from its source in Tests/conformance
  golang-github-fatih-color-dev    # h2spec's dependencies, from Debian (no Go module proxy needed)
  golang-github-spf13-cobra-dev
  golang-golang-x-net-dev
  testssl.sh       # scans the shipped TLS defaults (scripts/testssl.sh)
  chromium         # headless browser: loads the admin listener's operator page, checks its DOM, takes its screenshot (OperatorPageBrowserTests)
  fonts-dejavu-core  # a font for chromium's screenshots of that page
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
echo "installing: ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# kubernetes-validate (PyPI; ships the Kubernetes schemas, validates offline) for deploy/kubernetes.
venv="$(dirname "$0")/../.build-tools/venv"
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  { python3 -m venv "$venv" && "$venv/bin/pip" install -q --disable-pip-version-check kubernetes-validate==1.37.0 >/dev/null; } \
    || echo "warning: kubernetes-validate not installed: its checks skip (and fail under CI=true)" >&2
fi

# h2 (hyper-h2, PyPI): the HTTP/2 client that sends hostile frame sequences (Tests/h2/, HTTP2HostileTests).
if ! { [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import h2, sys; sys.exit(h2.__version__ != "4.4.1")' 2>/dev/null; }; then
  { { [ -x "$venv/bin/python" ] || python3 -m venv "$venv"; } && "$venv/bin/pip" install -q --disable-pip-version-check h2==4.4.1 >/dev/null; } \
    || echo "warning: h2 not installed: the hostile HTTP/2 tests skip (and fail under CI=true)" >&2
fi
