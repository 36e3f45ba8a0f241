#!/usr/bin/env bash
# The gateway's shipped TLS defaults as testssl.sh (Debian package testssl.sh) sees them, held to
# what a security review expects of an internet edge: only TLS 1.2 and 1.3, only AEAD ciphers with
# forward secrecy, the server's cipher order, and not one vulnerability finding (LUCKY13, ROBOT,
# BEAST, SWEET32, renegotiation, compression, …). Run against an ECDSA and an RSA certificate (the
# cipher list of TLS 1.2 depends on the key type). Findings about the throwaway test certificate
# itself (self-signed, no OCSP, short validity) are not the gateway's and are left out.
#
#   scripts/testssl.sh [--bin DIR] [--nginx]
#
#   --bin DIR   where gatewayd is (default: swift build --show-bin-path)
#   --nginx     also scan nginx (the Debian package, its built-in TLS defaults, same certificates)
#               and print, finding by finding, where the two differ
#
# Exit 0 when every check passes; each failed check is printed. Takes about 30 s per scan.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=""
with_nginx=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --nginx) with_nginx=1; shift ;;
    -h|--help) awk 'NR>1 && /^#/{sub(/^# ?/,""); print; next} NR>1{exit}' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ -n "$bin" ] || bin=$(swift build --show-bin-path)
gatewayd="$bin/gatewayd"
[ -x "$gatewayd" ] || { echo "no gatewayd in $bin (swift build first)" >&2; exit 2; }
command -v testssl >/dev/null || { echo "testssl (Debian package testssl.sh) is missing: scripts/install-deps.sh" >&2; exit 2; }

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

for kind in ecdsa rsa; do
  if [ $kind = ecdsa ]; then keyopt=(-newkey ec -pkeyopt ec_paramgen_curve:P-256); else keyopt=(-newkey rsa:2048); fi
  openssl req -x509 "${keyopt[@]}" -nodes -keyout "$work/$kind.key" -out "$work/$kind.pem" -days 2 \
    -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null
  chmod 600 "$work/$kind.key"
done
cat > "$work/gateway.yaml" <<EOF
workers: 1
listeners:
  - {name: ecdsa, address: 127.0.0.1:0, protocols: [http1, h2], tls: {certificate: $work/ecdsa.pem, private_key: $work/ecdsa.key}}
  - {name: rsa, address: 127.0.0.1:0, protocols: [http1, h2], tls: {certificate: $work/rsa.pem, private_key: $work/rsa.key}}
admin: {address: 127.0.0.1:0}
upstreams:
  - {name: demo, url: demo}
routes:
  - {name: default, match: {path_prefix: /}, upstream: demo}
store: {kind: memory, shards: 4}
EOF
"$gatewayd" run --config "$work/gateway.yaml" >/dev/null 2>"$work/gatewayd.log" &
pids+=($!)
for _ in $(seq 1 200); do
  grep -q '"msg":"serving"' "$work/gatewayd.log" 2>/dev/null && break
  sleep 0.05
done
port_of() { grep '"msg":"serving"' "$work/gatewayd.log" | head -1 | sed -E "s/.*\"$1\":\"[0-9.]+:([0-9]+)\".*/\1/"; }

# scan NAME PORT: testssl's protocols, ciphers, server preferences, forward secrecy, server defaults
# and vulnerabilities, as JSON.
scan() {
  testssl --quiet --color 0 --warnings off --ip one --jsonfile "$work/$1.json" -p -e -P -f -S -U "127.0.0.1:$2" >"$work/$1.txt" 2>&1 || true
  [ -s "$work/$1.json" ] || { echo "testssl produced nothing for $1:" >&2; tail -20 "$work/$1.txt" >&2; exit 1; }
}

# check NAME: the gateway's rules over a scan (prints each failure, exit 1 on any).
check() {
  python3 - "$work/$1.json" "$1" <<'PY'
import json, re, sys
findings = {f["id"]: f for f in json.load(open(sys.argv[1]))}
name = sys.argv[2]
bad = []
def finding(i): return findings.get(i, {}).get("finding", "")
# Protocols: TLS 1.2 and 1.3 only.
for p in ("SSLv2", "SSLv3", "TLS1", "TLS1_1"):
    if not finding(p).startswith("not offered"): bad.append(f"{p} is {finding(p)!r}, must be not offered")
for p in ("TLS1_2", "TLS1_3"):
    if not finding(p).startswith("offered"): bad.append(f"{p} is {finding(p)!r}, must be offered")
# The server chooses the cipher; every cipher offered is an AEAD with forward secrecy.
if finding("cipher_order") != "server": bad.append(f"cipher_order is {finding('cipher_order')!r}, must be server")
offered = []
for i, f in findings.items():
    if i.startswith("cipherorder_"): offered += f["finding"].split()
if not offered: bad.append("no cipher order reported")
for c in offered:
    aead = re.search(r"GCM|CHACHA20|CCM", c)
    fs = c.startswith("TLS_") or c.startswith("ECDHE-") or c.startswith("DHE-")
    if not (aead and fs): bad.append(f"cipher {c} is not an AEAD with forward secrecy")
# Not one finding worse than INFO/OK, but those about the test certificate itself.
cert = re.compile(r"^(cert_|certs_|DNS_CAArecord|OCSP|intermediate_cert)")
for i, f in findings.items():
    if f.get("severity") in ("LOW", "MEDIUM", "HIGH", "CRITICAL", "WARN") and not cert.match(i):
        bad.append(f"{i}: {f['severity']} {f['finding']}")
for required in ("LUCKY13", "BEAST", "SWEET32", "ROBOT", "secure_renego", "secure_client_renego", "CRIME_TLS", "POODLE_SSL", "RC4"):
    if required not in findings: bad.append(f"{required} was not tested")
print(f"{name}: protocols TLS 1.2 + 1.3, server order, {len(offered)} ciphers "
      f"({' '.join(sorted(set(offered)))}), vulnerabilities: {findings.get('LUCKY13', {}).get('finding', '?')} (LUCKY13)")
for b in bad: print(f"  FAIL {b}")
sys.exit(1 if bad else 0)
PY
}

failed=0
for kind in ecdsa rsa; do
  scan "gateway-$kind" "$(port_of $kind)"
  check "gateway-$kind" || failed=1
done

if [ $with_nginx -eq 1 ]; then
  for kind in ecdsa rsa; do
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    mkdir -p "$work/nginx-$kind"
    cat > "$work/nginx-$kind/nginx.conf" <<EOF
pid $work/nginx-$kind/nginx.pid;
error_log $work/nginx-$kind/error.log;
events {}
http {
  access_log off;
  client_body_temp_path $work/nginx-$kind; proxy_temp_path $work/nginx-$kind; fastcgi_temp_path $work/nginx-$kind;
  uwsgi_temp_path $work/nginx-$kind; scgi_temp_path $work/nginx-$kind;
  server {
    listen 127.0.0.1:$port ssl http2;
    ssl_certificate $work/$kind.pem;
    ssl_certificate_key $work/$kind.key;
    location / { return 200 "ok\n"; }
  }
}
EOF
    nginx -c "$work/nginx-$kind/nginx.conf" -g 'daemon off;' &
    pids+=($!)
    sleep 0.5
    scan "nginx-$kind" "$port"
    echo "nginx $(nginx -v 2>&1 | sed 's/.*nginx\///') ($kind), built-in TLS defaults, where it differs from the gateway:"
    python3 - "$work/gateway-$kind.json" "$work/nginx-$kind.json" <<'PY'
import json, sys
g = {f["id"]: f for f in json.load(open(sys.argv[1]))}
n = {f["id"]: f for f in json.load(open(sys.argv[2]))}
skip = ("cert_", "certs_", "DNS_CAArecord", "OCSP", "clientsimulation", "service", "engine_problem", "scanTime", "rDNS", "cipher_x")
for i in sorted(set(g) | set(n)):
    if i.startswith(skip): continue
    a, b = g.get(i, {}), n.get(i, {})
    if (a.get("finding"), a.get("severity")) != (b.get("finding"), b.get("severity")):
        print(f"  {i}: gateway {a.get('severity', '-')} {a.get('finding', '-')!r} | nginx {b.get('severity', '-')} {b.get('finding', '-')!r}")
PY
  done
fi

[ $failed -eq 0 ] && echo "testssl: the shipped TLS defaults pass every check (ECDSA and RSA)"
exit $failed
