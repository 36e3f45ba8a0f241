#!/usr/bin/env python3
"""The attack suite's upstream: a WSGI application on wsgiref that routes like common Python (and
other) stacks, behind a keep-alive HTTP/1.1 connection handler that records every request it reads.

    backend.py --port 0 --log requests.jsonl      (standalone: one JSON line per request)

The driver (attack.py) runs it in-process on two ports, one behind gatewayd and one behind nginx,
and reads the records directly.

What it models (so that the suite sees what a real backend would do with a request a proxy let
through):

* The connection (`KeepAliveHandler`, a wsgiref `WSGIRequestHandler`): HTTP/1.1 keep-alive and
  pipelining, so a request smuggled behind another on one upstream connection is read and recorded
  as a request of its own. Lenient like many application servers: bare LF line ends, obs-fold
  continuation lines, white space around field names, any white space in the request line; body
  framing by Transfer-Encoding when any of its values says chunked, else by the first
  Content-Length value (a list "5, 5" counts as 5), field names compared with `_` folded to `-`;
  `Expect: 100-continue` answered with 100. A body cut short is recorded as incomplete.
* The environ, the CGI way (as wsgiref, gunicorn, PHP, CGI): each field name upper-cased with `-`
  folded to `_` and prefixed `HTTP_`; repeated names joined with ",". So `X_App_Attest_Verified_Key_Id`
  and `X-App-Attest-Verified-Key-Id` are the same variable. `PATH_INFO` is percent-decoded (`%2F`
  included), as every WSGI server does.
* The router (`route`): a "common" normaliser, the union of what Werkzeug/Flask, Express, Rails,
  Spring, Tomcat, IIS/ASP.NET and Symfony do (each step can be turned off with a flag), and an
  "exotic" one on top (NFKC, double decoding, %uXXXX, NUL truncation, fragments kept in the path).
  Every record carries the handler each normaliser dispatched to and the steps that were needed.

Handlers: `purchase` (POST /api/purchase[/...], protected by gatewayd), `account-write` (PUT and
DELETE /api/account[/...], protected), `shop-admin` (any method, host shop.example.com, /admin[/...],
protected), `purchase-read` and `account-read` (the other methods on those paths), `hello` (/hello)
and `fallback`.
"""

import argparse
import io
import itertools
import json
import re
import select
import socket
import socketserver
import sys
import threading
import time
import unicodedata
import urllib.parse
from wsgiref.handlers import SimpleHandler
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

PROTECTED_HANDLERS = {"purchase", "shop-admin", "account-write"}
SHOP_HOST = "shop.example.com"
VERIFIED_KEY_CGI = "HTTP_X_APP_ATTEST_VERIFIED_KEY_ID"

# Steps of the common normaliser, each with its flag name (all on by default).
COMMON_STEPS = [
    "method-upper",          # Werkzeug: environ REQUEST_METHOD.upper()
    "method-override",       # X-HTTP-Method-Override / X-HTTP-Method / X-Method-Override (many frameworks)
    "method-param",          # Rails, Laravel, Symfony: a POST with _method=DELETE (query or form body) is a DELETE
    "rewrite-url",           # X-Original-URL / X-Rewrite-URL (Symfony, Zend, IIS rewrites)
    "absolute-form",         # Werkzeug: an absolute-form target's authority becomes HTTP_HOST
    "forwarded-host",        # ProxyFix(x_host=1), Django USE_X_FORWARDED_HOST: X-Forwarded-Host is the host
    "host-fold",             # host compared without case, trailing dot, port or userinfo
    "fragment-strip",        # gunicorn/Werkzeug urlsplit: '#' ends the path
    "backslash",             # IIS, some Node stacks: '\' is '/'
    "matrix-params",         # Tomcat/Spring: ';params' removed from each segment
    "merge-slashes",         # '//' is '/'
    "dot-segments",          # '.' and '..' resolved (after decoding: %2e%2e too)
    "trailing-junk",         # IIS/Windows: trailing '.', ' ' and tabs dropped from the last segment
    "suffix",                # Rails format, Spring suffix pattern: '.json' (any short extension) ignored
    "trailing-slash",        # Express non-strict routing: '/api/purchase/' is '/api/purchase'
    "case-insensitive",      # IIS, ASP.NET, Spring with lowercase matching
]
EXOTIC_STEPS = [
    "double-decode",         # a second percent-decoding pass (old IIS, some rewrite chains)
    "u-escapes",             # IIS %uXXXX
    "nfkc",                  # Unicode compatibility folding (fullwidth letters, ligatures)
    "nul-truncate",          # C-string handling: the path ends at NUL
    "fragment-kept",         # '#' left in the path (and dot segments after it resolved)
]

OVERRIDE_HEADERS = ("HTTP_X_HTTP_METHOD_OVERRIDE", "HTTP_X_HTTP_METHOD", "HTTP_X_METHOD_OVERRIDE")
REWRITE_HEADERS = ("HTTP_X_ORIGINAL_URL", "HTTP_X_REWRITE_URL")
SUFFIX_RE = re.compile(r"\.[A-Za-z0-9]{1,8}$")


def fold_host(value):
    """Host compared the way vhost matching usually does: userinfo, port, trailing dot and case dropped."""
    h = value.split(",")[0].strip()
    if "@" in h:
        h = h.rsplit("@", 1)[1]
    if h.startswith("["):
        h = h[: h.find("]") + 1]
    elif ":" in h:
        h = h.split(":", 1)[0]
    return (h[:-1] if h.endswith(".") else h).lower()


def normalise_path(raw_path, steps, enabled):
    """The routed path of a raw (still percent-encoded) path after the enabled steps; appends to
    `steps` the ones that changed something. Fragment and `;params` are cut from the raw path (as
    urlsplit and Tomcat do), then the path is percent-decoded (as every WSGI server fills PATH_INFO,
    `%2F` included), then folded."""

    def apply(name, fn, p):
        if name not in enabled:
            return p
        q = fn(p)
        if q != p:
            steps.append(name)
        return q

    path = raw_path
    if "fragment-kept" not in enabled:
        path = apply("fragment-strip", lambda p: p.split("#", 1)[0], path)
    path = apply("matrix-params", lambda p: "/".join(s.split(";", 1)[0] for s in p.split("/")), path)
    decoded = urllib.parse.unquote(path, "latin-1")
    if decoded != path:
        steps.append("percent-decode")  # always: PATH_INFO is decoded by the WSGI server
    path = decoded
    path = apply("double-decode", lambda p: urllib.parse.unquote(p, "latin-1"), path)
    path = apply("u-escapes", lambda p: re.sub(r"%u([0-9A-Fa-f]{4})", lambda m: chr(int(m.group(1), 16)), p), path)

    def nfkc(p):
        try:
            text = p.encode("latin-1").decode("utf-8")
        except (UnicodeDecodeError, UnicodeEncodeError):
            text = p
        return unicodedata.normalize("NFKC", text)

    path = apply("nfkc", nfkc, path)
    path = apply("nul-truncate", lambda p: p.split("\x00", 1)[0], path)
    path = apply("backslash", lambda p: p.replace("\\", "/"), path)
    if not path.startswith("/"):
        path = "/" + path
    path = apply("merge-slashes", lambda p: re.sub(r"/{2,}", "/", p), path)

    def dots(p):
        out = []
        for seg in p.split("/")[1:]:
            if seg == ".":
                continue
            if seg == "..":
                if out:
                    out.pop()
                continue
            out.append(seg)
        return "/" + "/".join(out)

    path = apply("dot-segments", dots, path)
    path = apply("trailing-slash", lambda p: p.rstrip("/") or "/", path)

    def junk(p):
        head, _, last = p.rpartition("/")
        return head + "/" + last.rstrip(". \t")

    for _ in range(2):  # "purchase.json." and "purchase. .json"
        path = apply("trailing-junk", junk, path)
        path = apply("suffix", lambda p: SUFFIX_RE.sub("", p) if not p.rpartition("/")[2].startswith(".") else p, path)
    path = apply("case-insensitive", str.lower, path)
    return path


def dispatch(method, path, host):
    if path == "/api/purchase" or path.startswith("/api/purchase/"):
        return "purchase" if method == "POST" else "purchase-read"
    if path == "/api/account" or path.startswith("/api/account/"):
        return "account-write" if method in ("PUT", "DELETE") else "account-read"
    if host == SHOP_HOST and (path == "/admin" or path.startswith("/admin/")):
        return "shop-admin"
    if path == "/hello":
        return "hello"
    return "fallback"


def route(environ, enabled):
    """(handler, steps, method, path, host) of a request under the enabled normalisation steps."""
    steps = []
    method = environ["REQUEST_METHOD"]
    if "method-upper" in enabled and method.upper() != method:
        method = method.upper()
        steps.append("method-upper")
    if "method-override" in enabled:
        for h in OVERRIDE_HEADERS:
            if h in environ:
                method = environ[h].split(",")[0].strip().upper()
                steps.append("method-override")
                break
    if "method-param" in enabled and method == "POST":
        query = environ["attack.target"].partition("?")[2]
        params = urllib.parse.parse_qs(query)
        if "x-www-form-urlencoded" in environ.get("CONTENT_TYPE", ""):
            params.update(urllib.parse.parse_qs(environ.get("attack.body", b"").decode("latin-1")))
        if params.get("_method"):
            method = params["_method"][0].strip().upper()
            steps.append("method-param")
    target = environ["attack.target"]
    host_value = environ.get("HTTP_HOST", "")
    if "absolute-form" in enabled and re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", target):
        rest = target.split("://", 1)[1]
        authority, slash, path_and_query = rest.partition("/")
        authority = re.split(r"[?#]", authority, 1)[0]
        host_value = authority or host_value
        target = slash + path_and_query
        steps.append("absolute-form")
    if "rewrite-url" in enabled:
        for h in REWRITE_HEADERS:
            if h in environ:
                target = environ[h].split(",")[0].strip()
                steps.append("rewrite-url")
                break
    if "forwarded-host" in enabled and environ.get("HTTP_X_FORWARDED_HOST"):
        forwarded = environ["HTTP_X_FORWARDED_HOST"].split(",")[0].strip()
        if forwarded != host_value:
            steps.append("forwarded-host")
        host_value = forwarded
    host = host_value
    if "host-fold" in enabled:
        host = fold_host(host_value)
        if host != host_value:
            steps.append("host-fold")
    raw_path = target.split("?", 1)[0]
    path = normalise_path(raw_path, steps, enabled)
    return dispatch(method, path, host), steps, method, path, host


# Steps that replace the method, path or host rather than fold them: a backend has them or not, and
# either way may reach a handler the other way does not, so every combination is tried.
CHOICE_STEPS = ("method-override", "method-param", "rewrite-url", "absolute-form", "forwarded-host")


def route_variants(environ, enabled):
    """Every distinct (handler, method, path, host) the request routes to, over the combinations of
    CHOICE_STEPS (each on or off, among the enabled ones) with the other enabled steps always on:
    the protected variants first, then the ones needing the fewest steps."""
    choices = [s for s in CHOICE_STEPS if s in enabled]
    fixed = set(enabled) - set(choices)
    seen = {}
    for mask in range(1 << len(choices)):
        on = fixed | {c for i, c in enumerate(choices) if mask >> i & 1}
        handler, steps, method, path, host = route(environ, on)
        key = (handler, method, path, host)
        steps = list(dict.fromkeys(steps))
        if key not in seen or len(steps) < len(seen[key]["steps"]):
            seen[key] = {"handler": handler, "method": method, "path": path, "host": host, "steps": steps}
    return sorted(seen.values(), key=lambda v: (v["handler"] not in PROTECTED_HANDLERS, len(v["steps"])))


class Recorder:
    """Every request the backend read, in order, with the time of the last activity."""

    def __init__(self):
        self.lock = threading.Lock()
        self.records = []
        self.inflight = 0
        self.last_activity = time.monotonic()
        self.conn_ids = itertools.count(1)
        self.sockets = set()  # open backend connections, to see unread bytes (wait_quiet)

    def add(self, record):
        with self.lock:
            record["seq"] = len(self.records)
            self.records.append(record)
            self.last_activity = time.monotonic()

    def update(self, record, fields):
        with self.lock:
            record.update(fields)
            self.last_activity = time.monotonic()

    def touch(self, delta=0):
        with self.lock:
            self.inflight += delta
            self.last_activity = time.monotonic()

    def since(self, mark, listener=None):
        with self.lock:
            out = self.records[mark:]
        return [r for r in out if listener is None or r["listener"] == listener]

    def mark(self):
        with self.lock:
            return len(self.records)

    def quiet_for(self):
        with self.lock:
            return (0.0 if self.inflight else time.monotonic() - self.last_activity), self.inflight


def base_record(environ):
    """What the backend read, before routing."""
    return {
        "listener": environ["attack.listener"],
        "conn": environ["attack.conn"],
        "conn_index": environ["attack.conn_index"],
        "method": environ["REQUEST_METHOD"],
        "target": environ["attack.target"],
        "version": environ["SERVER_PROTOCOL"],
        "headers": environ["attack.headers"],
        "trailers": environ["attack.trailers"],
        "cgi": {k: v for k, v in environ.items() if k.startswith("HTTP_")},
        "body_len": environ["attack.body_len"],
        "framing": environ["attack.framing"],
        "verified_key": environ.get(VERIFIED_KEY_CGI),
        "handler": None, "protected": False, "steps": [], "routed": None, "variants": [], "exotic_handler": None,
        "exotic_steps": [], "complete": environ.get("attack.complete", True),
    }


# Upstream responses with broken framing, for the response-hygiene cases: a request to one of these
# paths is recorded and answered with the bytes as they are.
CANNED = {
    "/__attack__/dup-cl": b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
    "/__attack__/two-cl": b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 30\r\n\r\nabc",
    "/__attack__/cl-te": b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    "/__attack__/cl-list": b"HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\nabc",
    "/__attack__/space-colon": b"HTTP/1.1 200 OK\r\nContent-Length : 3\r\nContent-Length: 3\r\n\r\nabc",
    "/__attack__/obs-fold": b"HTTP/1.1 200 OK\r\nX-A: 1\r\n Content-Length: 30\r\nContent-Length: 3\r\n\r\nabc",
}


def make_app(recorder, common, exotic):
    """The WSGI application: routes (both normalisers), records, answers JSON."""
    everything = common | exotic

    def app(environ, start_response):
        variants = route_variants(environ, common)
        exotic_variants = route_variants(environ, everything)
        worst, exotic_worst = variants[0], exotic_variants[0]
        handler = worst["handler"]
        record = environ.get("attack.record", {})
        fields = base_record(environ)
        fields.update({
            "handler": handler,
            "protected": handler in PROTECTED_HANDLERS,
            "steps": worst["steps"],
            "routed": {"method": worst["method"], "path": worst["path"], "host": worst["host"]},
            "variants": variants,
            "exotic_handler": exotic_worst["handler"],
            "exotic_steps": exotic_worst["steps"],
            "pending": False,
            "error": None,
        })
        if "attack.record" in environ:
            recorder.update(record, fields)
        else:
            recorder.add(fields)
            record = fields
        body = json.dumps({"handler": handler, "listener": record["listener"], "seq": record["seq"]}).encode() + b"\n"
        if environ["REQUEST_METHOD"].upper() == "HEAD":
            body = b""
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                                  ("X-Backend-Handler", handler)])
        return [body]

    return app


class BadRequest(Exception):
    pass


class ResponseWriter(SimpleHandler):
    """wsgiref's handler, speaking HTTP/1.1 and closing only when asked to."""

    http_version = "1.1"
    origin_server = True
    server_software = "attack-backend"

    def __init__(self, *args, close=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.close_after = close

    def cleanup_headers(self):
        super().cleanup_headers()
        if self.close_after:
            self.headers["Connection"] = "close"


class KeepAliveHandler(WSGIRequestHandler):
    """Reads requests one after another on a connection (keep-alive, pipelining), leniently."""

    protocol_version = "HTTP/1.1"
    max_body = 16 << 20
    idle_timeout = 60       # waiting for the next request on a kept-alive connection
    body_timeout = 2        # waiting for body bytes (a proxy that announced more than it sends)

    def log_message(self, *args):
        pass

    def _line(self):
        line = self.rfile.readline(65537)
        if len(line) > 65536:
            raise BadRequest("line too long")
        return line

    def _read_head(self):
        line = self._line()
        while line in (b"\r\n", b"\n"):
            line = self._line()
        if not line:
            return None
        parts = line.decode("latin-1").strip("\r\n").split()
        if len(parts) != 3:
            raise BadRequest("request line %r" % line[:200])
        fields = []
        while True:
            raw = self._line()
            if raw in (b"\r\n", b"\n", b""):
                break
            text = raw.decode("latin-1").rstrip("\r\n")
            if text[:1] in (" ", "\t") and fields:
                name, value = fields[-1]
                fields[-1] = (name, (value + " " + text.strip()).strip())
                continue
            name, sep, value = text.partition(":")
            if not sep:
                continue  # a line without a colon is skipped, as many lenient parsers do
            fields.append((name, value.strip()))
            if len(fields) > 500:
                raise BadRequest("too many fields")
        return parts, fields

    def _read_body(self, fields):
        self.trailers = []
        self.complete = True
        # Names compared with white space trimmed and "_" folded to "-" (as Puma < 6.4.3 and CGI-style
        # servers do): a Transfer_Encoding the proxy does not frame by still frames the body here.
        def named(want):
            return [v for n, v in fields if n.strip().lower().replace("_", "-") == want]

        te = ",".join(named("transfer-encoding"))
        cl = named("content-length")
        if "chunked" in te.lower():
            body = bytearray()
            while True:
                size_line = self._line().decode("latin-1")
                if not size_line:
                    self.complete = False
                    break
                size = int(size_line.split(";", 1)[0].strip() or "0", 16)
                if size < 0 or size > self.max_body:
                    raise BadRequest("chunk size")
                if size == 0:
                    while True:
                        t = self._line()
                        if t in (b"\r\n", b"\n", b""):
                            break
                        name, _, value = t.decode("latin-1").rstrip("\r\n").partition(":")
                        self.trailers.append([name, value.strip()])
                    break
                data = self.rfile.read(size)
                body += data
                if len(data) < size or self._line() not in (b"\r\n", b"\n"):
                    self.complete = False
                    break
            return bytes(body), "chunked"
        if cl:
            n = int(cl[0].split(",")[0].strip() or "0")
            if n < 0 or n > self.max_body:
                raise BadRequest("content-length")
            data = self.rfile.read(n)
            self.complete = len(data) == n
            return data, "content-length"
        return b"", "none"

    def handle(self):
        server = self.server
        recorder = server.recorder
        conn = next(recorder.conn_ids)
        with recorder.lock:
            recorder.sockets.add(self.connection)
        try:
            self._serve(conn)
        finally:
            with recorder.lock:
                recorder.sockets.discard(self.connection)

    def _serve(self, conn):
        server = self.server
        recorder = server.recorder
        index = 0
        while True:
            self.connection.settimeout(self.idle_timeout)
            try:
                head = self._read_head()
            except (BadRequest, ValueError) as e:
                recorder.add(self._refusal(conn, index, str(e)))
                self._send_400()
                return
            except OSError:
                return  # the proxy closed or reset an idle connection
            if head is None:
                return
            (method, target, version), fields = head
            index += 1
            # Recorded as soon as the head is read (in order, in the window of the case that sent it),
            # completed when the body was read and the request routed.
            record = self._refusal(conn, index, "body not read yet", method, target)
            record.update({"headers": [[n, v] for n, v in fields], "version": version, "handler": None,
                           "pending": True})
            recorder.add(record)
            recorder.touch(+1)
            close = True
            try:
                if any(n.strip().lower() == "expect" and v.lower() == "100-continue" for n, v in fields):
                    self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    self.wfile.flush()
                self.connection.settimeout(self.body_timeout)
                try:
                    body, framing = self._read_body(fields)
                except (BadRequest, ValueError, OSError) as e:
                    recorder.update(record, {"handler": "backend-400", "exotic_handler": "backend-400", "pending": False,
                                             "error": "body: %s" % e})
                    self._send_400()
                    return
                environ = self._environ(method, target, version, fields, body, framing, conn, index)
                environ["attack.record"] = record
                canned = CANNED.get(target.split("?", 1)[0])
                if canned is not None:
                    recorder.update(record, dict(base_record(environ), handler="canned", exotic_handler="canned", pending=False,
                                                  error=None))
                    self.wfile.write(canned)
                    self.wfile.flush()
                    close = False
                    continue
                connection = ",".join(v for n, v in fields if n.strip().lower() == "connection").lower()
                close = "close" in connection or (version == "HTTP/1.0" and "keep-alive" not in connection) \
                    or not self.complete
                writer = ResponseWriter(io.BytesIO(body), self.wfile, sys.stderr, environ, multithread=True,
                                        close=close)
                writer.request_handler = self
                writer.run(server.get_app())
                self.wfile.flush()
            except OSError:
                return
            finally:
                recorder.touch(-1)
            if close:
                return

    def _refusal(self, conn, index, why, method=None, target=None):
        return {
            "listener": self.server.listener_name, "conn": conn, "conn_index": index, "method": method,
            "target": target, "version": None, "headers": [], "trailers": [], "cgi": {}, "body_len": 0,
            "framing": None, "verified_key": None, "handler": "backend-400", "protected": False, "steps": [],
            "routed": None, "variants": [], "exotic_handler": "backend-400", "exotic_steps": [], "complete": False,
            "error": why, "pending": False}

    def _send_400(self):
        try:
            self.wfile.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        except OSError:
            pass

    def _environ(self, method, target, version, fields, body, framing, conn, index):
        env = self.server.base_environ.copy()
        path, _, query = target.partition("?")
        env.update({
            "SERVER_PROTOCOL": version, "REQUEST_METHOD": method, "PATH_INFO": urllib.parse.unquote(path, "iso-8859-1"),
            "QUERY_STRING": query, "REMOTE_ADDR": self.client_address[0], "CONTENT_LENGTH": str(len(body)),
            "wsgi.input": io.BytesIO(body),
            "attack.listener": self.server.listener_name, "attack.conn": conn, "attack.conn_index": index,
            "attack.target": target, "attack.headers": [[n, v] for n, v in fields], "attack.body_len": len(body),
            "attack.framing": framing, "attack.trailers": self.trailers, "attack.complete": self.complete,
            "attack.body": body,
        })
        for name, value in fields:
            k = name.strip().replace("-", "_").upper()
            if k in ("CONTENT_TYPE", "CONTENT_LENGTH"):
                if k == "CONTENT_TYPE":
                    env[k] = value
                continue
            key = "HTTP_" + k
            env[key] = env[key] + "," + value if key in env else value
        return env


class ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64


class Backend:
    """One recorder and application, served on one loopback port per listener name."""

    def __init__(self, listeners, common=None, exotic=None):
        self.recorder = Recorder()
        self.common = set(COMMON_STEPS if common is None else common)
        self.exotic = set(EXOTIC_STEPS if exotic is None else exotic)
        self.app = make_app(self.recorder, self.common, self.exotic)
        self.servers = {}
        self.threads = []
        for name in listeners:
            s = ThreadingWSGIServer(("127.0.0.1", 0), KeepAliveHandler)
            s.set_app(self.app)
            s.recorder = self.recorder
            s.listener_name = name
            self.servers[name] = s

    def port(self, name):
        return self.servers[name].server_address[1]

    def start(self):
        for s in self.servers.values():
            t = threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def stop(self):
        for s in self.servers.values():
            s.shutdown()
            s.server_close()

    def wait_quiet(self, quiet=0.05, limit=2.0):
        """Waits until nothing is left to read or handle: no connection waiting to be accepted, no
        open connection with unread bytes (or an EOF not yet seen), no request being handled, and
        nothing recorded for `quiet` seconds. False if that did not happen within `limit`."""
        deadline = time.monotonic() + limit
        listening = [s.socket for s in self.servers.values()]
        while time.monotonic() < deadline:
            idle, inflight = self.recorder.quiet_for()
            if not inflight and idle >= quiet:
                with self.recorder.lock:
                    sockets = [s for s in self.recorder.sockets if s.fileno() >= 0]
                try:
                    readable, _, _ = select.select(listening + sockets, [], [], 0)
                except (OSError, ValueError):
                    readable = [None]  # a socket closed meanwhile: look again
                if not readable:
                    return True
            time.sleep(0.01)
        return False


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--log", help="append one JSON line per request to this file (default stdout)")
    p.add_argument("--off", action="append", default=[], help="turn a normalisation step off (repeatable)",
                   choices=COMMON_STEPS + EXOTIC_STEPS)
    a = p.parse_args()
    backend = Backend(["standalone"], common=[s for s in COMMON_STEPS if s not in a.off],
                      exotic=[s for s in EXOTIC_STEPS if s not in a.off])
    server = backend.servers["standalone"]
    if a.port:
        server.server_close()
        server = ThreadingWSGIServer(("127.0.0.1", a.port), KeepAliveHandler)
        server.set_app(backend.app)
        server.recorder = backend.recorder
        server.listener_name = "standalone"
    out = open(a.log, "a") if a.log else sys.stdout
    recorder = backend.recorder
    original_add, original_update = recorder.add, recorder.update

    def emit(record):
        if not record.get("pending"):
            out.write(json.dumps(record, default=str) + "\n")
            out.flush()

    def add(record):
        original_add(record)
        emit(record)

    def update(record, fields):
        original_update(record, fields)
        emit(record)

    recorder.add, recorder.update = add, update
    print("backend listening on 127.0.0.1:%d" % server.server_address[1], file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
