#!/usr/bin/env bash
# The one test command (README quick start, and what CI runs): installs what is missing, builds
# everything, and runs every test (unit, real-device vectors, simulator flows, CLI end to end), then
# the container image's runtime stage in a Debian 12 chroot (no container engine on these machines).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# Style: every tracked Swift file as .swift-format lays it out (docs/development.md, "Style").
scripts/format.sh --check
# The layering is enforced: a target importing a package target it does not declare fails the build.
swift build --build-tests --explicit-target-dependency-import-check error
swift test --skip-build
# Outside conformance suites against the binary just built (docs/development.md).
scripts/h2spec.sh
scripts/testssl.sh
# Proven at the edge, the short forms (docs/development.md): a 2-minute soak with faults on the debug
# binaries just built, every fuzz target's fail cases and seeds replayed, ThreadSanitizer on the
# event-loop suites that matter most.
bench/soak --mode ci --bin .build/debug
FUZZ_CONFIG=debug fuzz/run.sh --regressions
scripts/sanitize.sh --short
if [ "$(id -u)" = 0 ]; then
  deploy/container/check-runtime-rootfs
elif [ "${CI:-}" = true ]; then
  echo "deploy/container/check-runtime-rootfs needs root (chroot, mount)" >&2
  exit 1
else
  echo "skipped deploy/container/check-runtime-rootfs: not root" >&2
fi
