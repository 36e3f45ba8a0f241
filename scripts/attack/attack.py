#!/usr/bin/env python3
"""Differential attack suite: the same raw bytes to gatewayd and to nginx, both in front of the same
recording WSGI backend (backend.py); per case, what each proxy answered and what the backend got.

    scripts/attack/run [--json FILE] [--known-holes FILE] [--only SUBSTRING] [--list] [--keep]

Starts (on loopback, ephemeral ports) the backend, a private nginx and gatewayd (`GATEWAYD=`,
default .build/debug/gatewayd; nothing is built), registers one simulated App Attest device, runs
every case of cases.py, stops everything it started (also on failure or Ctrl-C), prints the table
and exits:

  0  no security failure on gatewayd (with --known-holes: exactly the listed cases fail)
  1  a security failure (with --known-holes: a case fails that is not listed, or a listed one passes)
  2  the suite could not run, or a positive case did not get through (nothing would be proven)

Security failures (gatewayd only; nginx does not verify anything and is the baseline):
  protected   a request reached a protected backend handler without an assertion gatewayd verified
  forged      a client-supplied verified-key header (any spelling the backend folds) reached the backend
  smuggled    the backend read a request gatewayd never saw as one (framing disagreement)
  altered     a verified request reached the backend as another method or path than the one signed
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import backend as backend_mod  # noqa: E402
import cases as cases_mod  # noqa: E402
import device as device_mod  # noqa: E402
import h2wire  # noqa: E402

APP_ID = "ABCDE12345.com.example.attack"
PROTECTED_ROUTES = {"purchase", "shop-admin", "account"}
VERIFIED_CGI = "X_APP_ATTEST_VERIFIED_KEY_ID"
# Request fields only the gateway may set (folded the CGI way); a client value under any spelling
# that reaches the backend is reported (a failure for the verified key id, a warning for the rest).
GATEWAY_OWNED = {VERIFIED_CGI, "X_FORWARDED_HOST", "X_FORWARDED_PROTO", "FORWARDED", "X_APP_ATTEST_KEY_ID",
                 "X_APP_ATTEST_CHALLENGE", "X_APP_ASSERTION"}
NGINX_CANDIDATES = ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx", "/usr/bin/nginx"]


def cgi_name(name):
    return name.strip().replace("-", "_").upper()


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# --- HTTP/1.x responses ---------------------------------------------------------------------------


def parse_responses(buf):
    """Complete responses at the start of buf: (list of {status, headers, body}, interim statuses,
    bytes consumed, incomplete). A response without length is complete only at EOF (handled by the caller)."""
    out, interim, pos = [], [], 0
    while True:
        end = buf.find(b"\r\n\r\n", pos)
        if end < 0:
            return out, interim, pos, pos < len(buf)
        head = buf[pos:end].decode("latin-1")
        lines = head.split("\r\n")
        m = re.match(r"HTTP/\d\.\d (\d{3})", lines[0])
        if not m:
            return out, interim, pos, True
        status = int(m.group(1))
        headers = []
        for line in lines[1:]:
            n, _, v = line.partition(":")
            headers.append((n, v.strip()))
        body_start = end + 4
        if 100 <= status < 200 and status != 101:
            interim.append(status)
            pos = body_start
            continue
        lower = [(n.strip().lower(), v) for n, v in headers]
        te = ",".join(v for n, v in lower if n == "transfer-encoding").lower()
        cls = [v for n, v in lower if n == "content-length"]
        if status in (204, 304):
            out.append({"status": status, "headers": headers, "body": b""})
            pos = body_start
            continue
        if "chunked" in te:
            p, body = body_start, b""
            while True:
                nl = buf.find(b"\r\n", p)
                if nl < 0:
                    return out, interim, pos, True
                try:
                    size = int(buf[p:nl].split(b";")[0].strip() or b"0", 16)
                except ValueError:
                    return out, interim, pos, True
                if size == 0:
                    t = buf.find(b"\r\n\r\n", nl)
                    if t < 0 and buf[nl:nl + 4] != b"\r\n\r\n":
                        if buf.find(b"\r\n", nl + 2) != nl + 2:
                            return out, interim, pos, True
                    p = (t + 4) if t >= 0 else nl + 4
                    break
                if len(buf) < nl + 2 + size + 2:
                    return out, interim, pos, True
                body += buf[nl + 2:nl + 2 + size]
                p = nl + 2 + size + 2
            out.append({"status": status, "headers": headers, "body": body})
            pos = p
            continue
        if cls:
            try:
                n = int(cls[0].split(",")[0].strip())
            except ValueError:
                n = 0
            if len(buf) < body_start + n:
                return out, interim, pos, True
            out.append({"status": status, "headers": headers, "body": buf[body_start:body_start + n]})
            pos = body_start + n
            continue
        return out, interim, pos, True  # until close


def exchange_h1(port, parts, expected=1, deadline=1.0, settle=0.04):
    """Sends parts (bytes, or ("wait", seconds): read for that long before going on) on one
    connection; reads until EOF, or `expected` final responses then `settle` seconds of quiet, or
    the deadline. Returns what the client saw."""
    t0 = time.monotonic()
    sock = socket.create_connection(("127.0.0.1", port), timeout=2)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray()
    state = {"closed": False, "reset": False, "first_byte": None}

    def pump(until, stop_when_complete):
        while True:
            now = time.monotonic()
            done, _, _, _ = parse_responses(bytes(buf))
            if stop_when_complete and len(done) >= expected:
                until = min(until, now + settle)
            if now >= until or state["closed"]:
                return
            sock.settimeout(max(0.005, until - now))
            try:
                data = sock.recv(65536)
            except socket.timeout:
                return
            except ConnectionResetError:
                state["closed"] = state["reset"] = True
                return
            except OSError:
                state["closed"] = True
                return
            if not data:
                state["closed"] = True
                return
            if state["first_byte"] is None:
                state["first_byte"] = time.monotonic() - t0
            buf.extend(data)

    sent_all = True
    try:
        for p in parts:
            if isinstance(p, tuple):
                pump(time.monotonic() + p[1], stop_when_complete=False)
                continue
            if state["closed"]:
                sent_all = False
                break
            try:
                sock.sendall(p)
            except OSError:
                state["closed"] = True
                sent_all = False
                break
        pump(time.monotonic() + deadline, stop_when_complete=True)
    finally:
        sock.close()
    responses, interim, used, incomplete = parse_responses(bytes(buf))
    if state["closed"] and incomplete and used < len(buf):
        rest = bytes(buf[used:])
        m = re.match(rb"HTTP/\d\.\d (\d{3})", rest)
        if m:
            end = rest.find(b"\r\n\r\n")
            head = rest[:end if end >= 0 else len(rest)].decode("latin-1").split("\r\n")
            responses.append({"status": int(m.group(1)), "headers": [(l.partition(":")[0], l.partition(":")[2].strip())
                                                                      for l in head[1:]],
                              "body": rest[end + 4:] if end >= 0 else b"", "truncated": True})
            used = len(buf)
    return {
        "statuses": [r["status"] for r in responses],
        "interim": interim,
        "closed": state["closed"],
        "reset": state["reset"],
        "sent_all": sent_all,
        "first_byte_s": None if state["first_byte"] is None else round(state["first_byte"], 3),
        "elapsed_s": round(time.monotonic() - t0, 3),
        "errors": [_error_code(r) for r in responses],
        "responses": [{"status": r["status"], "headers": r["headers"], "body": r["body"][:300].decode("latin-1")}
                      for r in responses],
        "unparsed": bytes(buf[used:])[:200].decode("latin-1"),
    }


def _error_code(response):
    m = re.search(rb'"error":"([a-z_]+)"', response["body"])
    return m.group(1).decode() if m else None


def simple_request(port, method, path, headers=(), body=b""):
    lines = ["%s %s HTTP/1.1" % (method, path), "Host: api.example.com"]
    lines += ["%s: %s" % h for h in headers]
    lines.append("Content-Length: %d" % len(body))
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
    r = exchange_h1(port, [raw], deadline=5)
    if not r["responses"]:
        raise RuntimeError("no response to %s %s: %r" % (method, path, r))
    return r["responses"][0]


# --- processes ------------------------------------------------------------------------------------


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.02)
    return False


class Nginx:
    def __init__(self, workdir, backend_port):
        self.binary = next((c for c in NGINX_CANDIDATES if os.access(c, os.X_OK)), None)
        self.prefix = os.path.join(workdir, "nginx")
        self.proc = None
        self.version = None
        if self.binary is None:
            raise RuntimeError("nginx not found (looked in %s); run scripts/install-deps.sh" % ", ".join(NGINX_CANDIDATES))
        v = subprocess.run([self.binary, "-v"], capture_output=True, text=True)
        self.version = (v.stderr or v.stdout).strip().split("/")[-1]
        for d in ("logs", "tmp/body", "tmp/proxy", "tmp/fastcgi", "tmp/uwsgi", "tmp/scgi"):
            os.makedirs(os.path.join(self.prefix, d), exist_ok=True)
        with open(os.path.join(HERE, "nginx.conf.in")) as f:
            self.template = f.read()
        self.backend_port = backend_port

    def start(self):
        last = ""
        for _ in range(3):
            self.port, self.h2_port = free_port(), free_port()
            conf = os.path.join(self.prefix, "nginx.conf")
            with open(conf, "w") as f:
                f.write(self.template.replace("@PREFIX@", self.prefix).replace("@PORT@", str(self.port))
                        .replace("@H2PORT@", str(self.h2_port)).replace("@BACKEND_PORT@", str(self.backend_port)))
            self.proc = subprocess.Popen([self.binary, "-p", self.prefix + "/", "-c", conf, "-e",
                                          os.path.join(self.prefix, "logs/error.log")],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if wait_port(self.port, self.proc) and wait_port(self.h2_port, self.proc):
                return self
            self.stop()
            last = self.error_log()
        raise RuntimeError("nginx did not start: %s" % last)

    def error_log(self):
        try:
            with open(os.path.join(self.prefix, "logs/error.log")) as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Gatewayd:
    def __init__(self, binary, workdir, backend_port, ca_root):
        self.binary = binary
        self.dir = os.path.join(workdir, "gatewayd")
        os.makedirs(self.dir, exist_ok=True)
        with open(os.path.join(self.dir, "root.pem"), "w") as f:
            f.write(ca_root)
        with open(os.path.join(HERE, "gateway.yaml.in")) as f:
            text = f.read()
        self.config = os.path.join(self.dir, "gateway.yaml")
        with open(self.config, "w") as f:
            f.write(text.replace("@BACKEND_URL@", "http://127.0.0.1:%d" % backend_port)
                    .replace("@CA_ROOT@", "root.pem").replace("@APP_TEAM@", APP_ID.split(".", 1)[0])
                    .replace("@APP_BUNDLE@", APP_ID.split(".", 1)[1]))
        self.proc = None
        self.access = []
        self.stderr = []
        self.lock = threading.Lock()

    def start(self, timeout=20):
        self.proc = subprocess.Popen([self.binary, "run", "--config", self.config], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        serving = threading.Event()
        self.addresses = {}

        def read_stderr():
            for line in self.proc.stderr:
                text = line.decode("utf-8", "replace").rstrip("\n")
                with self.lock:
                    self.stderr.append(text)
                if '"msg":"serving"' in text:
                    try:
                        self.addresses = json.loads(text)
                    except ValueError:
                        pass
                    serving.set()

        def read_stdout():
            for line in self.proc.stdout:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                with self.lock:
                    self.access.append(entry)

        threading.Thread(target=read_stderr, daemon=True).start()
        threading.Thread(target=read_stdout, daemon=True).start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not serving.is_set() and self.proc.poll() is None:
            serving.wait(0.05)
        if not serving.is_set():
            self.stop()
            raise RuntimeError("gatewayd did not start:\n%s" % "\n".join(self.stderr[-20:]))
        self.port = int(self.addresses["public"].rsplit(":", 1)[1])
        return self

    def access_mark(self):
        with self.lock:
            return len(self.access)

    def access_since(self, mark):
        with self.lock:
            return list(self.access[mark:])

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# --- the run --------------------------------------------------------------------------------------


class Context:
    """What a case's builder may ask for, for one proxy."""

    def __init__(self, suite, proxy):
        self.suite = suite
        self.proxy = proxy
        self.signed = []

    @property
    def key_id(self):
        return self.suite.device.key_id_b64

    def sign(self, method, target, body=b"", host=None):
        """The three assertion headers for this exact request (a fresh challenge from gatewayd)."""
        challenge = self.suite.challenge()
        self.signed.append({"method": method, "target": target, "host": host})
        return self.suite.device.signed_headers(challenge, method, target, body, authority=host or "api.example.com")


class Suite:
    def __init__(self, args):
        self.args = args
        self.workdir = tempfile.mkdtemp(prefix="attack-suite-")
        self.backend = None
        self.nginx = None
        self.gatewayd = None
        self.device = None
        self.challenge_lock = threading.Lock()
        # Access log entries of the previous case no backend request matched yet: gatewayd may write
        # a refused request's head upstream after it answered the client (its upstream connect
        # completing late), so that request reaches the backend in the next case's window.
        self.carry = []

    # lifecycle
    def start(self):
        binary = self.args.gatewayd
        if not os.access(binary, os.X_OK):
            raise RuntimeError("%s is not an executable gatewayd (build it with `swift build`, or set GATEWAYD=)" % binary)
        self.backend = backend_mod.Backend(["gatewayd", "nginx"]).start()
        self.ca = device_mod.TestCA()
        self.nginx = Nginx(self.workdir, self.backend.port("nginx")).start()
        self.gatewayd = Gatewayd(binary, self.workdir, self.backend.port("gatewayd"), self.ca.root_pem).start()
        self.ports = {"gatewayd": self.gatewayd.port, "nginx": self.nginx.port}
        self.h2_ports = {"gatewayd": self.gatewayd.port, "nginx": self.nginx.h2_port}
        self.device = device_mod.Device(self.ca, APP_ID)
        self.register()

    def stop(self):
        for thing in (self.gatewayd, self.nginx, self.backend):
            if thing is not None:
                try:
                    thing.stop()
                except Exception as e:  # keep stopping the others
                    log("stopping %s: %s" % (type(thing).__name__, e))
        if not self.args.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)
        else:
            log("kept %s" % self.workdir)

    def challenge(self, purpose="assert"):
        with self.challenge_lock:
            # Unbound to the key: a registered key holds at most store.max_challenges_per_key (4) live
            # challenges, and the suite signs more requests than that before it sends them.
            body = json.dumps({"purpose": purpose}).encode()
            r = simple_request(self.gatewayd.port, "POST", "/v1/attest/challenge", [("Content-Type", "application/json")], body)
            if r["status"] != 201:
                raise RuntimeError("challenge refused: %s %s" % (r["status"], r["body"][:200]))
            return json.loads(r["body"])["challenge"]

    def register(self):
        challenge = self.challenge("register")
        r = simple_request(self.gatewayd.port, "POST", "/v1/attest/register", [("Content-Type", "application/json")],
                           self.device.register_body(challenge))
        if r["status"] != 201:
            raise RuntimeError("device registration refused: %s %s" % (r["status"], r["body"][:300]))

    # one case
    def run_case(self, case):
        out = {}
        contexts = {p: Context(self, p) for p in ("gatewayd", "nginx")}
        built = {p: case.build(contexts[p]) for p in ("gatewayd", "nginx")}
        self.backend.wait_quiet(0.02, 1.0)
        mark = self.backend.recorder.mark()
        amark = self.gatewayd.access_mark()
        results = {}

        def one(proxy):
            try:
                if case.proto == "h2":
                    r = h2wire.exchange(self.h2_ports[proxy], built[proxy], deadline=case.deadline, streams=case.streams)
                    r["statuses"] = [int(v) if str(v).isdigit() else v for _, v in sorted(r["statuses"].items())]
                    r["bodies"] = {k: v[:200].decode("latin-1") for k, v in r["bodies"].items()}
                    results[proxy] = r
                else:
                    results[proxy] = exchange_h1(self.ports[proxy], built[proxy], expected=case.responses,
                                                 deadline=case.deadline)
            except Exception as e:  # a client-side failure is a result, not a crash of the suite
                results[proxy] = {"statuses": [], "error": "%s: %s" % (type(e).__name__, e), "closed": True}

        threads = [threading.Thread(target=one, args=(p,)) for p in ("gatewayd", "nginx")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.backend.wait_quiet(0.05, 2.0)
        # gatewayd writes an access log line when an exchange ends, read here from its stdout by a
        # thread: give it time to catch up before a backend request without a log line counts as smuggled.
        deadline = time.monotonic() + 2.0
        while True:
            records = self.backend.recorder.since(mark)
            access = self.gatewayd.access_since(amark)
            forwarded = [r for r in records if r["listener"] == "gatewayd"]
            if None not in match_access(forwarded, self.carry + access) or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        carried = [dict(e, carried=True) for e in self.carry]
        used = match_access(forwarded, carried + access)
        self.carry = [e for e in access if e.get("upstream") and not any(u is e for u in used)][-20:]
        for proxy in ("gatewayd", "nginx"):
            out[proxy] = {"client": results[proxy], "backend": [r for r in records if r["listener"] == proxy],
                          "signed": contexts[proxy].signed}
        out["gatewayd"]["access"] = carried + [
            {k: a.get(k) for k in ("route", "method", "target", "status", "upstream", "error", "protocol")} for a in access]
        return out


# --- verdicts -------------------------------------------------------------------------------------


def target_path(target):
    if target is None:
        return ""
    m = re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*", target)
    if m:
        target = target[m.end():] or "/"
    return target


def match_access(records, access):
    """For each backend record, the access log entry of gatewayd for the same request, or None;
    each entry used once. First by method and path (the target may have been rewritten to
    origin-form), then, for what is left, by method among the entries gatewayd forwarded (a fix may
    normalise the target it forwards). Requests the backend could not parse need no entry ({})."""
    unmatched = list(access)
    out = [None] * len(records)

    def same_method(rec, a):
        return rec["method"] is not None and (a.get("method") or "").upper() == rec["method"].upper()

    for exact in (True, False):
        for i, rec in enumerate(records):
            if out[i] is not None:
                continue
            for a in unmatched:
                if same_method(rec, a) and (target_path(a.get("target")) == target_path(rec["target"]) if exact
                                            else bool(a.get("upstream"))):
                    out[i] = a
                    unmatched.remove(a)
                    break
    return [hit if hit is not None or rec["handler"] != "backend-400" else {} for hit, rec in zip(out, records)]


def judge(case, result, device_key):
    """Failures and warnings of gatewayd for one case, and informational notes against nginx."""
    gw, ng = result["gatewayd"], result["nginx"]
    failures, warnings, notes = [], [], []
    access = list(gw["access"])
    signed = gw["signed"]

    matched = match_access(gw["backend"], access)

    for rec, entry in zip(gw["backend"], matched):
        label = "%s %s" % (rec["method"], rec["target"])
        verified = bool(case.signed and entry is not None and not entry.get("carried") and entry.get("route") in PROTECTED_ROUTES
                        and isinstance(entry.get("status"), int) and entry["status"] < 400)
        if rec.get("pending"):
            warnings.append(("backend-waiting", "the backend was still waiting for the body of %s when the case ended" % label))
        if "desync" in (rec["target"] or ""):
            failures.append(("smuggled", "the body of a refused request became a request: backend read %s" % label))
        if rec["handler"] == "backend-400":
            warnings.append(("backend-400", "the backend could not parse what gatewayd forwarded (%s)" % rec.get("error")))
        elif entry is None and "desync" not in (rec["target"] or ""):
            failures.append(("smuggled", "backend read %s, which gatewayd never logged as a request" % label))
        if rec["protected"] and not verified:
            failures.append(("protected", "%s reached %s (%s) without a verified assertion"
                             % (label, rec["handler"], ", ".join(rec["steps"]) or "no folding needed")))
        if verified:
            expected = expected_routes(signed)
            got = {(v["method"], v["path"]) for v in rec["variants"]}
            if expected is not None and not got <= expected:
                odd = sorted(got - expected)
                failures.append(("altered", "signed %s %s, backend may execute %s" % (
                    signed[0]["method"], signed[0]["target"], "; ".join("%s %s" % o for o in odd))))
        if not rec.get("complete", True) and rec["handler"] != "backend-400":
            warnings.append(("truncated", "%s reached the backend with an incomplete body (%d bytes)" % (label, rec["body_len"])))
        lines = [(n, v) for n, v in rec["headers"] if cgi_name(n) == VERIFIED_CGI]
        allowed = [("X-App-Attest-Verified-Key-Id", device_key)] if verified else []
        if [(n, v) for n, v in lines] != allowed and lines:
            extra = [l for l in lines if l not in allowed] or lines
            failures.append(("forged", "backend got %s (reads HTTP_%s=%r)" % (
                "; ".join("%r: %r" % l for l in extra), VERIFIED_CGI, rec["cgi"].get("HTTP_" + VERIFIED_CGI))))
        if verified and not lines:
            warnings.append(("verified-header-missing", "%s was verified but reached the backend without the verified key id" % label))
        for n, v in rec["headers"]:
            c = cgi_name(n)
            if c in GATEWAY_OWNED and c != VERIFIED_CGI and "forged" in v.lower():
                warnings.append(("owned-header", "client value %r: %r reached the backend as HTTP_%s" % (n, v, c)))
        for n, v in rec.get("trailers") or []:
            if cgi_name(n) in GATEWAY_OWNED:
                warnings.append(("owned-trailer", "trailer %r: %r reached the backend" % (n, v)))
        if any(n.strip().lower() == "upgrade" for n, _ in rec["headers"]):
            warnings.append(("upgrade", "Upgrade reached the backend on %s" % label))
        if rec["exotic_handler"] in backend_mod.PROTECTED_HANDLERS and not rec["protected"] and not verified:
            warnings.append(("exotic", "%s reaches %s under exotic folding (%s)" % (
                label, rec["exotic_handler"], ", ".join(s for s in rec["exotic_steps"] if s != "percent-decode"))))

    client = gw["client"]
    statuses = [s for s in client.get("statuses", []) if isinstance(s, int)]
    refused = (bool(statuses) and all(s >= 400 for s in statuses)) or bool(client.get("rst")) or bool(client.get("goaway"))
    upstream_fault = any(r["handler"] == "canned" for r in gw["backend"])  # the upstream's answer was refused
    if refused and not upstream_fault and gw["backend"]:
        warnings.append(("refused-but-forwarded", "gatewayd refused (%s) but the backend got %s" % (
            summarise_side(gw)[0], ", ".join("%s %s" % (r["method"], r["target"]) for r in gw["backend"]))))
    if case.early_refusal:
        if client.get("interim"):
            warnings.append(("late-refusal", "gatewayd sent 100 Continue on a request it refuses"))
        if not client.get("statuses"):
            warnings.append(("late-refusal", "gatewayd did not refuse from the head (no answer in %.1f s without the body)"
                             % case.deadline))
    for r in client.get("responses", []):
        names = [n.strip().lower() for n, _ in r["headers"]]
        lists = [v for n, v in r["headers"] if n.strip().lower() == "content-length" and "," in v]
        if names.count("content-length") > 1 or lists or ("content-length" in names and "transfer-encoding" in names):
            warnings.append(("response-framing", "client got a %d response with %s" % (
                r["status"], ", ".join("%s: %s" % h for h in r["headers"] if h[0].strip().lower() in ("content-length", "transfer-encoding")))))

    if case.expect:
        reached = [r for r in gw["backend"] if r["handler"] == case.expect]
        if not reached:
            failures.append(("positive", "expected gatewayd to forward to %s; backend got %s, client %s" % (
                case.expect, [r["handler"] for r in gw["backend"]] or "nothing", gw["client"].get("statuses"))))
    if case.expect_refused and gw["backend"]:
        failures.append(("positive", "expected gatewayd to refuse; backend got %s" % [r["handler"] for r in gw["backend"]]))

    gw_handlers = [r["handler"] for r in gw["backend"]]
    ng_handlers = [r["handler"] for r in ng["backend"]]
    if not gw_handlers and ng_handlers:
        notes.append("stricter")
    elif gw_handlers != ng_handlers:
        notes.append("differs")
    return failures, warnings, notes


def expected_routes(signed):
    """Every (method, path) the backend may route the signed request to, without any extra field."""
    if not signed:
        return None
    s = signed[0]
    host = s.get("host") or "api.example.com"
    environ = {"REQUEST_METHOD": s["method"], "attack.target": s["target"], "HTTP_HOST": host,
               "HTTP_X_FORWARDED_HOST": host}
    return {(v["method"], v["path"]) for v in backend_mod.route_variants(environ, set(backend_mod.COMMON_STEPS))}


# --- output ---------------------------------------------------------------------------------------


def summarise_side(side):
    c = side["client"]
    st = ",".join(str(s) for s in c.get("statuses", [])) or "-"
    if c.get("interim"):
        st = "+".join(str(i) for i in c["interim"]) + "+" + st
    if c.get("rst"):
        st += " rst:" + ",".join("%s" % v for v in c["rst"].values())
    if c.get("goaway"):
        st += " goaway:" + c["goaway"]
    if c.get("error"):
        st += " err"
    errs = [e for e in c.get("errors", []) if e]
    if errs:
        st += " " + ",".join(errs)
    be = []
    for r in side["backend"]:
        h = r["handler"]
        if r["steps"]:
            h += "[" + ",".join(s for s in r["steps"] if s != "percent-decode") + "]"
            h = h.replace("[]", "")
        be.append(h)
    return st, " + ".join(be) or "-"


def clip(s, n):
    return s if len(s) <= n else s[:n - 1] + "…"


def print_table(rows):
    widths = (34, 22, 34, 22, 30, 9)
    header = ("case", "gatewayd", "→ backend", "nginx", "→ backend", "vs nginx")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)) + "  verdict")
    print("-" * (sum(widths) + 2 * len(widths) + 7))
    for row in rows:
        gs, gb = summarise_side(row["result"]["gatewayd"])
        ns, nb = summarise_side(row["result"]["nginx"])
        cols = (row["id"], gs, gb, ns, nb, ",".join(row["notes"]))
        print("  ".join(clip(c, w).ljust(w) for c, w in zip(cols, widths)) + "  " + row["verdict"])
        for kind, text in row["failures"]:
            print("      FAIL %-9s %s" % (kind, text))
        for kind, text in row["warnings"]:
            print("      warn %-9s %s" % (kind, text))


def read_known(path):
    known = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if line:
                known[line] = n
    return known


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gatewayd", default=os.environ.get("GATEWAYD") or os.path.join(ROOT, ".build/debug/gatewayd"))
    p.add_argument("--json", default=os.path.join(ROOT, ".build", "attack-report.json"),
                   help="write the JSON report here (default .build/attack-report.json)")
    p.add_argument("--known-holes", help="case ids expected to fail (one per line, # comments)")
    p.add_argument("--only", action="append", default=[], help="run cases whose id contains this (repeatable)")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (configs, logs)")
    p.add_argument("--quiet", action="store_true", help="print only failures, warnings and the summary")
    p.add_argument("--self-test", action="store_true", help="check the backend and the verdicts, then exit (no proxies)")
    args = p.parse_args()
    if args.self_test:
        import selftest
        return selftest.main()

    all_cases = cases_mod.CASES
    ids = [c.id for c in all_cases]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        log("duplicate case ids: %s" % ", ".join(sorted(dup)))
        return 2
    if args.list:
        for c in all_cases:
            print("%-40s %-3s %s" % (c.id, c.proto, c.title))
        return 0
    selected = [c for c in all_cases if not args.only or any(o in c.id for o in args.only)]
    known = read_known(args.known_holes) if args.known_holes else None
    if known is not None:
        stale = [k for k in known if k not in ids]
        if stale:
            log("%s lists unknown case ids: %s" % (args.known_holes, ", ".join(stale)))
            return 2

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    suite = Suite(args)
    t0 = time.monotonic()
    rows = []
    try:
        suite.start()
        slow = [c for c in selected if c.background]
        fast = [c for c in selected if not c.background]
        background = {}

        def run_background(case):
            background[case.id] = case.background(suite)

        bthreads = [threading.Thread(target=run_background, args=(c,), daemon=True) for c in slow]
        for t in bthreads:
            t.start()
        for case in fast:
            started = time.monotonic()
            result = suite.run_case(case)
            result["seconds"] = round(time.monotonic() - started, 3)
            failures, warnings, notes = judge(case, result, suite.device.key_id_b64)
            rows.append({"id": case.id, "title": case.title, "proto": case.proto, "issue": case.issue,
                         "signed": case.signed, "result": result, "failures": failures, "warnings": warnings,
                         "notes": notes, "verdict": "FAIL" if failures else ("warn" if warnings else "ok")})
        for t in bthreads:
            t.join(timeout=30)
        for case in slow:
            info = background.get(case.id) or {"error": "did not finish"}
            rows.append({"id": case.id, "title": case.title, "proto": case.proto, "issue": case.issue,
                         "signed": False, "timing": info, "failures": [], "warnings": info.get("warnings", []),
                         "notes": [], "verdict": "warn" if info.get("warnings") else "ok",
                         "result": {"gatewayd": {"client": {"statuses": [info.get("gatewayd", "?")]}, "backend": []},
                                    "nginx": {"client": {"statuses": [info.get("nginx", "?")]}, "backend": []}}})
    except KeyboardInterrupt as e:
        log("interrupted (%s): stopping" % e)
        suite.stop()
        return 130
    except Exception as e:
        log("attack suite could not run: %s: %s" % (type(e).__name__, e))
        suite.stop()
        return 2
    elapsed = time.monotonic() - t0
    stderr_tail = suite.gatewayd.stderr[-5:] if suite.gatewayd else []
    suite.stop()

    if not args.quiet:
        print_table(rows)
    else:
        print_table([r for r in rows if r["failures"] or r["warnings"]])
    failing = [r["id"] for r in rows if any(k != "positive" for k, _ in r["failures"])]
    broken = [r["id"] for r in rows if any(k == "positive" for k, _ in r["failures"])]
    warned = [r["id"] for r in rows if r["warnings"]]
    stricter = [r["id"] for r in rows if "stricter" in r["notes"]]
    differs = [r["id"] for r in rows if "differs" in r["notes"]]
    print()
    print("%d cases in %.1f s: %d security failures on gatewayd, %d warnings; gatewayd stricter than nginx in %d, "
          "different backend view in %d" % (len(rows), elapsed, len(failing), len(warned), len(stricter), len(differs)))
    code = 0
    if broken:
        print("BROKEN: positive cases did not behave (nothing else is proven): %s" % ", ".join(broken))
        code = 2
    if known is None:
        if failing:
            print("SECURITY FAILURES: %s" % ", ".join(failing))
            code = code or 1
    else:
        new = [f for f in failing if f not in known]
        fixed = [k for k in known if k not in failing and k in [r["id"] for r in rows]]
        if new:
            print("NEW security failures (not in %s): %s" % (args.known_holes, ", ".join(new)))
            code = code or 1
        if fixed:
            print("listed in %s but no longer failing (remove them): %s" % (args.known_holes, ", ".join(fixed)))
            code = code or 1
        if not new and not fixed:
            print("security failures match %s (%d known holes)" % (args.known_holes, len(known)))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        report = {
            "gatewayd": args.gatewayd, "nginx": suite.nginx.version if suite.nginx else None,
            "seconds": round(elapsed, 2), "exit": code, "failing": failing, "broken": broken, "warned": warned,
            "stricter_than_nginx": stricter, "differs_from_nginx": differs,
            "known_holes": sorted(known) if known is not None else None, "gatewayd_stderr_tail": stderr_tail,
            "cases": [{k: v for k, v in r.items()} for r in rows],
        }
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
        print("report: %s" % args.json)
    return code


if __name__ == "__main__":
    sys.exit(main())
