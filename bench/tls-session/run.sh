#!/bin/sh
# TLSSession vs the same loop in C on raw OpenSSL: handshakes and bulk throughput, ratios.
# Usage: bench/tls-session/run.sh [--seconds S] [--rounds N] [--bulk-mib M]
set -eu
cd "$(dirname "$0")"
swift build -c release --product tls-bench >&2
exec .build/release/tls-bench "$@"
