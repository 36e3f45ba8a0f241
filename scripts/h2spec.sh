#!/usr/bin/env bash
# The HTTP/2 conformance suite (h2spec, the one nginx, Envoy and H2O are measured with) against a real
# gatewayd, as a new user would run it, on every kind of HTTP/2 listener:
#   h2c       cleartext, prior knowledge, HTTP/2 only          146 cases, and 147 in strict mode (-S)
#   tls       TLS, h2 by ALPN (http/1.1 offered too)          146 cases, and 147 in strict mode
#   dual      cleartext, HTTP/1.1 and h2c on one port         146 cases but 3.5/2 (see below)
# After each run it checks from /proc that gatewayd holds no socket of that listener any more (every
# h2spec connection has left): a connection that outlives its client is a denial of service.
#
#   scripts/h2spec.sh [--bin DIR]      DIR holds gatewayd (default: swift build --show-bin-path)
#
# On the dual listener, h2spec's 3.5/2 ("invalid connection preface") sends a preface that differs
# from HTTP/2's in its first bytes: the listener reads any other first bytes as HTTP/1.1 (that is how
# it tells the two apart, docs/http2.md), so the client gets an HTTP/1.1 400, not a GOAWAY. The case
# passes on the HTTP/2-only listeners; on the dual one it is expected to fail, and only it.
#
# h2spec is built once from its source (Tests/conformance/h2spec-af83a65.tar.gz, MIT, commit
# af83a65f0b6273ef38bf778d400d98892e7653d8) with Debian's Go packages in GOPATH mode (no Go module
# proxy is needed), into .build-tools/h2spec. scripts/install-deps.sh installs the Go packages.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

bin=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    -h|--help) awk 'NR>1 && /^#/{sub(/^# ?/,""); print; next} NR>1{exit}' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ -n "$bin" ] || bin=$(swift build --show-bin-path)
gatewayd="$bin/gatewayd"
[ -x "$gatewayd" ] || { echo "no gatewayd in $bin (swift build first)" >&2; exit 2; }

# --- h2spec, built once ---------------------------------------------------------------------------
h2spec="$root/.build-tools/h2spec/h2spec"
source_tgz="$root/Tests/conformance/h2spec-af83a65.tar.gz"
if [ ! -x "$h2spec" ]; then
  echo "building h2spec from $source_tgz" >&2
  gp=$(mktemp -d)
  mkdir -p "$gp/src/github.com/summerwind" "$(dirname "$h2spec")"
  tar -xzf "$source_tgz" -C "$gp/src/github.com/summerwind"
  (cd "$gp/src/github.com/summerwind/h2spec" && GO111MODULE=off GOPATH="$gp:/usr/share/gocode" GOCACHE="$gp/cache" \
    go build -o "$h2spec" ./cmd/h2spec)
  rm -rf "$gp"
fi

# --- gatewayd with the three listeners --------------------------------------------------------------
work=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/key.pem" -out "$work/cert.pem" \
  -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null
chmod 600 "$work/key.pem"
cat > "$work/gateway.yaml" <<EOF
workers: 2
listeners:
  - {name: h2c, address: 127.0.0.1:0, protocols: [h2c]}
  - {name: tls, address: 127.0.0.1:0, protocols: [http1, h2], tls: {certificate: $work/cert.pem, private_key: $work/key.pem}}
  - {name: dual, address: 127.0.0.1:0, protocols: [http1, h2c]}
admin: {address: 127.0.0.1:0}
limits: {drain_timeout: 2s}
upstreams:
  - {name: demo, url: demo}
routes:
  - {name: default, match: {path_prefix: /}, upstream: demo}
store: {kind: memory, shards: 8}
EOF
"$gatewayd" run --config "$work/gateway.yaml" >"$work/access.log" 2>"$work/gatewayd.log" &
pid=$!
for _ in $(seq 1 200); do
  grep -q '"msg":"serving"' "$work/gatewayd.log" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/gatewayd.log" >&2; exit 1; }
  sleep 0.05
done
port_of() { grep '"msg":"serving"' "$work/gatewayd.log" | head -1 | sed -E "s/.*\"$1\":\"[0-9.]+:([0-9]+)\".*/\1/"; }

# The sockets gatewayd holds whose local port is $1, listening ones left out (the kernel's view).
open_sockets() {
  python3 - "$pid" "$1" <<'PY'
import os, sys
pid, port = sys.argv[1], int(sys.argv[2])
inodes = set()
for fd in os.listdir(f"/proc/{pid}/fd"):
    try:
        t = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        continue
    if t.startswith("socket:["):
        inodes.add(int(t[8:-1]))
names = {1: "ESTABLISHED", 4: "FIN_WAIT1", 5: "FIN_WAIT2", 8: "CLOSE_WAIT", 9: "LAST_ACK", 11: "CLOSING"}
left = []
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).read().splitlines()[1:]:
        c = line.split()
        if int(c[1].split(":")[1], 16) == port and int(c[3], 16) != 10 and int(c[9]) in inodes:
            left.append(names.get(int(c[3], 16), c[3]))
print(" ".join(left))
PY
}

failed=0
# run NAME PORT EXPECTED_FAILURES H2SPEC_ARGS...: EXPECTED_FAILURES is a space-separated list of case
# ids ("http2/3.5/2": the JUnit report's package and the case's number in it) allowed to fail.
run() {
  local name=$1 port=$2 allowed=$3
  shift 3
  local report="$work/$name.xml"
  "$h2spec" -h 127.0.0.1 -p "$port" -o 5 -j "$report" "$@" >"$work/$name.txt" 2>&1 || true
  local summary
  summary=$(grep -E '^[0-9]+ tests, ' "$work/$name.txt" | tail -1)
  # Failed cases from the JUnit report: "<section>/<case number>".
  local failures
  failures=$(python3 - "$report" <<'PY'
import sys, xml.etree.ElementTree as ET
out = []
for suite in ET.parse(sys.argv[1]).getroot().iter("testsuite"):
    pkg = suite.get("package", "")
    for i, case in enumerate(suite.iter("testcase"), 1):
        if case.find("failure") is not None or case.find("error") is not None:
            out.append(f"{pkg}/{i}")
print(" ".join(out))
PY
)
  local unexpected=""
  for f in $failures; do
    case " $allowed " in *" $f "*) ;; *) unexpected="$unexpected $f" ;; esac
  done
  local left="" i
  for i in $(seq 1 60); do
    left=$(open_sockets "$port")
    [ -z "$left" ] && break
    sleep 0.05
  done
  printf '%-10s %-45s failed: %-12s sockets left: %s\n' "$name" "${summary:-no summary}" "${failures:-none}" "${left:-none}"
  if [ -n "$unexpected" ] || [ -z "$summary" ]; then
    echo "  unexpected failures:${unexpected:- (no summary: see below)}" >&2
    sed -n '/Failures:/,$p' "$work/$name.txt" | head -40 >&2
    failed=1
  fi
  if [ -n "$left" ]; then
    echo "  gatewayd still holds $left on port $port after h2spec left" >&2
    failed=1
  fi
}

h2c=$(port_of h2c); tls=$(port_of tls); dual=$(port_of dual)
echo "h2spec $("$h2spec" --version 2>/dev/null | head -1) against $("$gatewayd" --version 2>/dev/null | head -1)"
run h2c "$h2c" ""
run h2c-strict "$h2c" "" -S
run tls "$tls" "" -t -k
run tls-strict "$tls" "" -t -k -S
run dual "$dual" "http2/3.5/2"

kill -TERM "$pid"
wait "$pid" || { echo "gatewayd exited $? on SIGTERM" >&2; failed=1; }
pid=""
if grep -q '"level":"error"' "$work/gatewayd.log"; then
  echo "gatewayd logged errors:" >&2
  grep '"level":"error"' "$work/gatewayd.log" | head -5 >&2
  failed=1
fi
[ $failed -eq 0 ] && echo "h2spec: every case passes where it must, no connection left open"
exit $failed
