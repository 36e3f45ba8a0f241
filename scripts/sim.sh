#!/usr/bin/env bash
# attest-sim, the device simulator: builds it (as scripts/run.sh builds gatewayd) and runs it with
# the arguments given, in the current directory. The README's walkthrough:
#   scripts/sim.sh ca --out samples/simulator/sim-ca --reuse
#   scripts/sim.sh run --gateway http://127.0.0.1:8080 --ca samples/simulator/sim-ca --app-id ABCDE12345.com.example.shop
# Every subcommand and option: scripts/sim.sh --help and docs/attest-sim.md.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# The libraries to build against (the quick start's scripts/run.sh installs them too).
pkg-config --exists openssl libnghttp2 hiredis 2>/dev/null || "$root/scripts/install-deps.sh"
swift build --package-path "$root" --product attest-sim >&2
exec "$(swift build --package-path "$root" --show-bin-path)/attest-sim" "$@"
