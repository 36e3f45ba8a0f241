#!/usr/bin/env bash
# Builds and runs the libFuzzer targets of attest-gateway, always bounded in time.
#
#   fuzz/run.sh TARGET SECONDS      build TARGET, fuzz it for SECONDS on a fresh copy of its seeds
#   fuzz/run.sh --regressions       build all targets, replay fuzz/FailCases/<T>/* and fuzz/corpus/<T>/ once
#   fuzz/run.sh --build [TARGET]    build only (all targets by default)
#   fuzz/run.sh --list              print the target names
#
# TARGET: one of `fuzz/run.sh --list` (fuzz/README.md says what each feeds its bytes to)
#
# Environment:
#   KEEP_WORK=1       keep (and grow) fuzz/corpus-work/<T> across runs instead of starting from the seeds
#   FUZZ_ARGS="..."   extra libFuzzer flags (e.g. "-seed=1 -dict=...")
#   FUZZ_TIMEOUT=10   per-input timeout in seconds (a slower input is reported as a timeout)
#   FUZZ_RSS_MB=2048  memory limit per process (exceeding it is reported as an OOM)
#   FUZZ_CONFIG=release  the build configuration; debug builds in about a third of the time and replays
#                        the same inputs (the test command's --regressions); fuzz for real in release
#
# Build: swift build -c release --scratch-path fuzz/.build -Xswiftc -sanitize=fuzzer,address --product T
# (-parse-as-library is set per target in fuzz/Package.swift). Work files: fuzz/corpus-work/ (corpus copy,
# logs) and fuzz/artifacts/<T>/ (crash-*, leak-*, timeout-*, oom-* inputs); both are git-ignored.
set -euo pipefail

FUZZ_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TARGETS=(FuzzCBOR FuzzAuthenticatorData FuzzAttestation FuzzAssertion FuzzProxyProtocol FuzzHTTP1 FuzzRESP FuzzHTTP2 FuzzConfig FuzzAttestBody FuzzReceipt FuzzAppleAnswers FuzzStoreFiles)
FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-10}
FUZZ_RSS_MB=${FUZZ_RSS_MB:-2048}
FUZZ_CONFIG=${FUZZ_CONFIG:-release}
case "$FUZZ_CONFIG" in release | debug) ;; *) echo "FUZZ_CONFIG must be release or debug" >&2; exit 2 ;; esac
BIN_DIR="$FUZZ_DIR/.build/$FUZZ_CONFIG"

# Longest input libFuzzer may generate, per target (real data: attestation ~5.5 KB, assertion ~140 B,
# authenticator data 37-232 B; the assertion bound is past AssertionObject.maxSize = 4096 on purpose).
max_len() {
  case "$1" in
    FuzzCBOR) echo 8192 ;;
    FuzzAuthenticatorData) echo 1024 ;;
    FuzzAttestation) echo 8192 ;;
    FuzzAssertion) echo 4200 ;;
    FuzzProxyProtocol) echo 4200 ;;  # past ProxyHeader.maximumBytes (4096)
    FuzzHTTP1) echo 8192 ;;
    FuzzRESP) echo 4096 ;;
    FuzzHTTP2) echo 16384 ;;
    FuzzConfig) echo 8192 ;;
    FuzzAttestBody) echo 8192 ;;
    FuzzReceipt) echo 8192 ;;
    FuzzAppleAnswers) echo 8192 ;;
    FuzzStoreFiles) echo 128 ;;  # 32 damages
  esac
}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 2; }

usage() { awk 'NR>1 && /^#/{sub(/^# ?/,""); print; next} NR>1{exit}' "$0"; }

is_target() { local t; for t in "${TARGETS[@]}"; do [ "$t" = "$1" ] && return 0; done; return 1; }

if [ -x /opt/swift/usr/bin/llvm-symbolizer ] && [ -z "${ASAN_SYMBOLIZER_PATH:-}" ]; then
  export ASAN_SYMBOLIZER_PATH=/opt/swift/usr/bin/llvm-symbolizer
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:symbolize=1}
# Swift's own crash backtracer would take the signal of a trap before libFuzzer and, under ASan,
# report a false error from its memory server (or hang): libFuzzer's handler reports instead.
export SWIFT_BACKTRACE=${SWIFT_BACKTRACE:-enable=no}

build() { # build TARGET...
  local t
  for t in "$@"; do
    log "building $t ($FUZZ_CONFIG, -sanitize=fuzzer,address)"
    swift build -c "$FUZZ_CONFIG" --package-path "$FUZZ_DIR" --scratch-path "$FUZZ_DIR/.build" \
      -Xswiftc -sanitize=fuzzer,address --product "$t" >&2
  done
}

# Replays the known crashers and the seeds: every input runs once, nothing is mutated.
regressions() {
  build "${TARGETS[@]}"
  local t rc=0 files
  for t in "${TARGETS[@]}"; do
    mapfile -t files < <(find "$FUZZ_DIR/FailCases/$t" -maxdepth 1 -type f ! -name '*.md' 2>/dev/null | sort)
    if [ "${#files[@]}" -gt 0 ]; then
      log "$t: replaying ${#files[@]} fail case(s)"
      if ! timeout -k 10 600 "$BIN_DIR/$t" -timeout="$FUZZ_TIMEOUT" -rss_limit_mb="$FUZZ_RSS_MB" "${files[@]}" \
        >"$FUZZ_DIR/.build/regress-$t-failcases.log" 2>&1; then
        log "$t: FAIL on a fail case (log: fuzz/.build/regress-$t-failcases.log)"
        tail -40 "$FUZZ_DIR/.build/regress-$t-failcases.log" >&2
        rc=1
      else
        log "$t: fail cases pass"
      fi
    else
      log "$t: no fail cases"
    fi
    log "$t: replaying seeds (fuzz/corpus/$t)"
    if ! timeout -k 10 600 "$BIN_DIR/$t" -runs=0 -timeout="$FUZZ_TIMEOUT" -rss_limit_mb="$FUZZ_RSS_MB" \
      -max_len="$(max_len "$t")" "$FUZZ_DIR/corpus/$t" >"$FUZZ_DIR/.build/regress-$t-seeds.log" 2>&1; then
      log "$t: FAIL on a seed (log: fuzz/.build/regress-$t-seeds.log)"
      tail -40 "$FUZZ_DIR/.build/regress-$t-seeds.log" >&2
      rc=1
    else
      log "$t: seeds pass ($(grep -E '^#[0-9]+[[:space:]]+DONE' "$FUZZ_DIR/.build/regress-$t-seeds.log" | tail -1))"
    fi
  done
  [ "$rc" = 0 ] && log "regressions: all pass" || log "regressions: FAILED"
  return "$rc"
}

fuzz_one() { # fuzz_one TARGET SECONDS
  local t=$1 secs=$2
  [[ "$secs" =~ ^[0-9]+$ ]] && [ "$secs" -gt 0 ] || die "SECONDS must be a positive integer, got '$secs'"
  build "$t"
  local work="$FUZZ_DIR/corpus-work/$t" logs="$FUZZ_DIR/corpus-work/logs" arts="$FUZZ_DIR/artifacts/$t"
  mkdir -p "$logs" "$arts"
  if [ "${KEEP_WORK:-0}" != 1 ]; then rm -rf "$work"; fi
  mkdir -p "$work"
  cp -n "$FUZZ_DIR/corpus/$t/"* "$work/" 2>/dev/null || true
  local stamp logf
  stamp=$(date -u +%Y%m%dT%H%M%SZ)
  logf="$logs/$t-$stamp.log"
  # shellcheck disable=SC2206
  local extra=(${FUZZ_ARGS:-})
  local cmd=("$BIN_DIR/$t" -max_total_time="$secs" -max_len="$(max_len "$t")" -timeout="$FUZZ_TIMEOUT"
    -rss_limit_mb="$FUZZ_RSS_MB" -print_final_stats=1 -artifact_prefix="$arts/" "${extra[@]}" "$work")
  log "fuzzing $t for ${secs}s: ${cmd[*]}"
  log "log: $logf"
  local rc=0
  # libFuzzer stops itself after -max_total_time; timeout is only a guard against a wedged process.
  timeout -k 10 $((secs + 300)) "${cmd[@]}" >"$logf" 2>&1 || rc=$?
  echo "== $t, ${secs}s, $(date -u +%Y-%m-%dT%H:%M:%SZ), exit $rc"
  echo "command: ${cmd[*]}"
  grep -E '^#[0-9]+[[:space:]]+(DONE|INITED)|^Done [0-9]+ runs|^stat::' "$logf" || true
  if [ "$rc" != 0 ]; then
    grep -E 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|^SUMMARY|Test unit written|Fatal error|fatal error' "$logf" | head -20 || true
    echo "FOUND A PROBLEM in $t: see $logf and $arts/ (minimise with: $BIN_DIR/$t -minimize_crash=1 -runs=10000 <crash-file>)"
    return 1
  fi
  echo "no crash, leak, timeout or OOM"
}

case "${1:-}" in
  --regressions) regressions ;;
  --build)
    if [ -n "${2:-}" ]; then is_target "$2" || die "unknown target $2"; build "$2"; else build "${TARGETS[@]}"; fi ;;
  --list) printf '%s\n' "${TARGETS[@]}" ;;
  -h|--help|"") usage; [ -n "${1:-}" ] ;;
  *)
    is_target "$1" || die "unknown target '$1' (one of: ${TARGETS[*]})"
    [ $# -eq 2 ] || die "usage: fuzz/run.sh TARGET SECONDS"
    fuzz_one "$1" "$2" ;;
esac
