#!/usr/bin/env bash
# The tests under sanitizers (docs/development.md, "Sanitizers"):
#   ThreadSanitizer  the suites that run real event loops (integration tests with `workers: 2`, the
#                    memory and Redis stores, HTTP/1.1 and HTTP/2, reload, drain), built into .build-tsan;
#   AddressSanitizer the unit suites, built into .build-asan.
# The gatewayd and attest-sim the tests start are the ones built next to the tests, with the same
# sanitizer ($GATEWAYD_BIN, $ATTEST_SIM_BIN). Every process writes its reports to
# <scratch>/sanitizer-reports/<tsan|asan>.<program>.<pid>; the run fails when that directory is not
# empty, whatever the tests said (a test that kills its gatewayd never sees its exit status).
#
#   scripts/sanitize.sh            both parts (before each release)
#   scripts/sanitize.sh --short    ThreadSanitizer on the workers: 2 suites of HTTP/1.1, HTTP/2, TLS,
#                                  reload and drain on the memory store (what CI runs: scripts/test.sh)
#   scripts/sanitize.sh --thread | --address    one part, all of its suites
#   scripts/sanitize.sh --thread -- --filter 'HTTPServerLoopsTests'    one part, these tests instead
set -euo pipefail
cd "$(dirname "$0")/.."

parts=(thread address)
short=false
chosen=()  # after --: what swift test runs instead of the part's suites
while [ $# -gt 0 ]; do
  case "$1" in
    --short) short=true; parts=(thread) ;;
    --thread) parts=(thread) ;;
    --address) parts=(address) ;;
    --) shift; chosen=("$@"); break ;;
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: scripts/sanitize.sh [--short | --thread | --address] [-- SWIFT-TEST-ARGUMENTS]" >&2; exit 2 ;;
  esac
  shift
done

# Swift Testing ids are Module.Type/test(): one --filter each, anchored (GatewayTests. is also the
# end of ClientAgainstGatewayTests.).
thread_suites=(
  '^IntegrationTests\.' '^GatewayProxyTests\.' '^GatewayIOTests\.' '^GatewayRedisTests\.' '^GatewayTests\.'
  '^GatewayStoreTests\.'                           # the store every loop shares: racing threads, journal, snapshots
  '^AppAttestClientTests\.ClientAgainstGatewayTests/'  # concurrent sends through a workers: 2 gatewayd
)
thread_short=(
  '^IntegrationTests\.GatewayRunTests/' '^IntegrationTests\.HTTP2Tests/' '^IntegrationTests\.TLSTests/'
  '^IntegrationTests\.ReloadTests/' '^IntegrationTests\.LifecycleTests/' '^IntegrationTests\.AttestGatewayTests/'
  '^IntegrationTests\.StreamingMemoryTests/' '^IntegrationTests\.SignedHostTests/'
  '^GatewayIOTests\.' '^GatewayProxyTests\.HTTPServerLoopsTests/'
)
# A bound on wall-clock time made for uninstrumented builds (TSan runs 5-15 times slower): the loop
# answers work queued from another thread within 100 ms while it awaits replies.
thread_skips=('^GatewayIOTests\.EventLoopAwaitTests/')
# Every test target but the real processes' suites (IntegrationTests) and deploy/'s files (DeployTests).
address_skips=('^IntegrationTests\.' '^DeployTests\.')

scripts/install-deps.sh
failed=()
timings=()

# Runs one part: $1 thread|address, then the arguments for swift test that choose the tests.
run_part() {
  local sanitizer=$1 short_name scratch reports
  shift
  case "$sanitizer" in thread) short_name=tsan ;; address) short_name=asan ;; esac
  scratch=".build-$short_name"
  reports="$PWD/$scratch/sanitizer-reports"
  local start=$SECONDS
  echo "== $sanitizer sanitizer: build ($scratch)" >&2
  # The sanitizers bring their own malloc: gatewayd is built without jemalloc here (Package.swift).
  export ATTEST_GATEWAY_NO_JEMALLOC=1
  swift build --build-tests --sanitize="$sanitizer" --scratch-path "$scratch"
  local built=$SECONDS bin="$PWD/$scratch/debug"
  for program in gatewayd attest-sim attest-gatewayPackageTests.xctest; do
    nm "$bin/$program" | grep " __${short_name}_init$" >/dev/null \
      || { echo "$bin/$program is not built with the $sanitizer sanitizer" >&2; exit 1; }
  done
  rm -rf "$reports" && mkdir -p "$reports"

  local status=0
  echo "== $sanitizer sanitizer: tests $*, one at a time (reports: $reports)" >&2
  if [ "$sanitizer" = thread ]; then
    # Swift's Mutex hands over contended locks in the kernel, out of TSan's sight; the shim shows
    # TSan those hand-overs (it suppresses nothing: scripts/tsan-swift-mutex.c).
    "$(dirname "$(command -v swift)")/clang" -shared -fPIC -O2 -Wall -Werror scripts/tsan-swift-mutex.c \
      -o "$scratch/tsan-swift-mutex.so" -ldl
    LD_PRELOAD="$PWD/$scratch/tsan-swift-mutex.so${LD_PRELOAD:+:$LD_PRELOAD}" \
    TSAN_OPTIONS="log_path=$reports/tsan log_exe_name=1 halt_on_error=0 exitcode=66 history_size=4 second_deadlock_stack=1" \
    GATEWAYD_BIN="$bin/gatewayd" ATTEST_SIM_BIN="$bin/attest-sim" \
      swift test --skip-build --sanitize=thread --scratch-path "$scratch" --no-parallel "$@" || status=$?
  else
    # LeakSanitizer is off: it looks for plain pointers, and Swift keeps enum tags in a pointer's
    # spare bits (docs/development.md, "Sanitizers").
    ASAN_OPTIONS="log_path=$reports/asan log_exe_name=1 halt_on_error=1 detect_leaks=0" \
    GATEWAYD_BIN="$bin/gatewayd" ATTEST_SIM_BIN="$bin/attest-sim" \
      swift test --skip-build --sanitize=address --scratch-path "$scratch" --no-parallel "$@" || status=$?
  fi
  timings+=("$sanitizer: build $((built - start)) s, tests $((SECONDS - built)) s")

  if [ -n "$(ls -A "$reports")" ]; then
    echo "== $sanitizer sanitizer: REPORTS (one file per process; each report in full in its file):" >&2
    ls -1 "$reports" >&2
    cat "$reports"/* | grep -h '^SUMMARY:' | sed 's/ (pid=[0-9]*)//' | sort | uniq -c | sort -rn >&2 || true
    failed+=("$sanitizer: reports in $reports")
  fi
  [ "$status" = 0 ] || failed+=("$sanitizer: swift test exited $status")
}

# Appends to args one $1 (--filter or --skip) before each pattern.
choose() {
  local option=$1 pattern
  shift
  for pattern in "$@"; do args+=("$option" "$pattern"); done
}
for part in "${parts[@]}"; do
  args=()
  if [ ${#chosen[@]} -gt 0 ]; then
    args=("${chosen[@]}")
  elif [ "$part" = address ]; then
    choose --skip "${address_skips[@]}"
  else
    if $short; then choose --filter "${thread_short[@]}"; else choose --filter "${thread_suites[@]}"; fi
    choose --skip "${thread_skips[@]}"
  fi
  run_part "$part" "${args[@]}"
done

printf '%s\n' "${timings[@]}" >&2
if [ ${#failed[@]} -gt 0 ]; then
  printf 'sanitize.sh FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "sanitize.sh: no sanitizer report" >&2
