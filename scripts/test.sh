#!/usr/bin/env bash
# The one test command (README quick start, and what CI runs): installs what is missing, builds
# everything, and runs every test (unit, real-device vectors, simulator flows, CLI end to end).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
swift build --build-tests
swift test --skip-build
