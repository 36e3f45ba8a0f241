"""The attack cases: raw bytes (HTTP/1.1 over a plain socket) or HTTP/2 frames, each sent to gatewayd
and to nginx. A case's `build(ctx)` returns what to send: a list of byte strings (and ("wait", s)
pauses that read for s seconds before the next part). `ctx.sign(method, target, body)` returns the
three assertion headers of a correctly signed request (a fresh challenge from gatewayd each time);
`ctx.key_id` is the registered device's key id (a forged verified header is most dangerous when it
names a real key).

Ids are `group/name`; known-holes.txt lists ids. `issue` says where the case comes from: "1" to "4"
are the sections of issue 18 it covers, "new" marks cases beyond the issue's list.

Add a case: append a `Case(...)` below (see README.md). Requests to protected handlers should carry
a body or not as a real client would; the smuggled request (`HIDDEN`) always targets the protected
purchase so that a desync shows as a protected-handler failure as well as a smuggled one.
"""

from h2wire import data_frame, encode, frame, headers_frame, CONTINUATION, HEADERS, END_HEADERS, END_STREAM

H = "api.example.com"
SHOP = "shop.example.com"
BODY = b'{"sku":42,"qty":1}'
HIDDEN = b"POST /api/purchase?smuggled=1 HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 0\r\n\r\n"
FORGED = "forged-key-id"


class Case:
    def __init__(self, id, title, build=None, proto="h1", signed=False, responses=1, deadline=0.8, expect=None,
                 expect_refused=False, issue="new", streams=(1,), background=None, early_refusal=False):
        self.id = id
        self.title = title
        self.build = build
        self.proto = proto
        self.signed = signed
        self.responses = responses
        self.deadline = deadline
        self.expect = expect
        self.expect_refused = expect_refused
        self.issue = issue
        self.streams = streams
        self.background = background
        self.early_refusal = early_refusal


CASES = []


def add(*args, **kw):
    CASES.append(Case(*args, **kw))


def enc(s):
    return s if isinstance(s, bytes) else s.encode("latin-1")


def req(method="GET", target="/hello", headers=(), body=b"", host=H, version="HTTP/1.1", length=None, line=None):
    """One request. headers: (name, value) pairs or raw lines (str/bytes, sent verbatim). A body gets
    a Content-Length unless `length` is False (or a string: that value)."""
    out = [enc(line) if line is not None else enc("%s %s %s" % (method, target, version))]
    if host is not None:
        out.append(enc("Host: " + host))
    for h in headers:
        out.append(enc(h) if isinstance(h, (str, bytes)) else enc("%s: %s" % h))
    if length is None and body:
        out.append(enc("Content-Length: %d" % len(body)))
    elif isinstance(length, str):
        out.append(enc("Content-Length: " + length))
    return b"\r\n".join(out) + b"\r\n\r\n" + enc(body)


def signed(method="POST", target="/api/purchase", headers=(), body=BODY, host=H, sign_method=None, sign_target=None):
    """A correctly signed request (plus `headers`); sign_method/sign_target: what the assertion covers."""
    def build(ctx):
        sig = ctx.sign(sign_method or method, sign_target or target, body, host=host)
        return [req(method, target, list(sig) + list(headers), body, host=host)]
    return build


def raw(*parts):
    return lambda ctx: [enc(p) if not isinstance(p, tuple) else p for p in parts]


def one(*args, **kw):
    return lambda ctx: [req(*args, **kw)]


# --- positive controls ----------------------------------------------------------------------------

add("positive/signed-purchase", "signed POST /api/purchase is verified and forwarded", signed(),
    signed=True, expect="purchase", issue="5")
add("positive/signed-purchase-query", "signed POST /api/purchase?order=7 (query covered)", signed(target="/api/purchase?order=7"),
    signed=True, expect="purchase", issue="5")
add("positive/signed-purchase-chunked", "signed POST /api/purchase with a chunked body",
    lambda ctx: [req("POST", "/api/purchase", list(ctx.sign("POST", "/api/purchase", BODY)) + [("Transfer-Encoding", "chunked")],
                     b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\n\r\n", length=False)], signed=True, expect="purchase", issue="5")
add("positive/signed-shop-admin", "signed POST /admin/users on the protected host", signed(target="/admin/users", host=SHOP),
    signed=True, expect="shop-admin", issue="5")
add("positive/unsigned-purchase", "unsigned POST /api/purchase is refused", one("POST", "/api/purchase", body=BODY),
    expect_refused=True, issue="5")
add("positive/unsigned-shop-admin", "unsigned GET /admin on the protected host is refused", one("GET", "/admin", host=SHOP),
    expect_refused=True, issue="5")
add("positive/signed-account-delete", "signed DELETE /api/account/7 is verified and forwarded",
    signed("DELETE", "/api/account/7", body=b""), signed=True, expect="account-write", issue="5")
add("positive/unsigned-account-delete", "unsigned DELETE /api/account/7 is refused", one("DELETE", "/api/account/7"),
    expect_refused=True, issue="5")
add("positive/hello", "GET /hello reaches the open route", one("GET", "/hello"), expect="hello", issue="5")
add("positive/purchase-get-open", "GET /api/purchase is not protected (the route protects POST)",
    one("GET", "/api/purchase"), expect="purchase-read", issue="5")

# --- 1. method case -------------------------------------------------------------------------------

for m in ("post", "Post", "pOST", "poST", "POSt"):
    add("method/case-%s" % m, "%s /api/purchase (methods are case-sensitive; Werkzeug upper-cases)" % m,
        one(m, "/api/purchase", body=BODY), issue="1")
add("method/case-account-delete", "delete /api/account/7 (route protects PUT and DELETE)", one("delete", "/api/account/7"),
    issue="1")
add("method/case-shop-delete", "delete /admin/x on the protected host (route for any method)",
    one("delete", "/admin/x", host=SHOP), issue="1")
add("method/tab-separator", "POST<TAB>/api/purchase (lenient parsers split on any white space)",
    raw(b"POST\t/api/purchase HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 2\r\n\r\n{}"))
add("method/double-space", "POST  /api/purchase (two spaces)",
    raw(b"POST  /api/purchase HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 2\r\n\r\n{}"))
add("method/leading-space", "' POST /api/purchase' (leading white space)",
    raw(b" POST /api/purchase HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 2\r\n\r\n{}"))
add("method/trailing-space", "request line ending in a space",
    raw(b"POST /api/purchase HTTP/1.1 \r\nHost: api.example.com\r\nContent-Length: 2\r\n\r\n{}"))
add("method/long-s", "PO\\u017fT (U+017F upper-cases to S in Unicode-aware code)",
    raw(b"PO\xc5\xbfT /api/purchase HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 2\r\n\r\n{}"))
add("method/nul", "POST\\0 as method", raw(b"POST\x00 /api/purchase HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 2\r\n\r\n{}"))
add("method/version-lower", "http/1.1 in lower case", one("POST", "/api/purchase", body=BODY, version="http/1.1"))
add("method/version-2", "HTTP/2.0 in an HTTP/1 request line", one("POST", "/api/purchase", body=BODY, version="HTTP/2.0"))
add("method/version-1.2", "HTTP/1.2", one("POST", "/api/purchase", body=BODY, version="HTTP/1.2"))
add("method/http09", "HTTP/0.9 style request line (no version)", raw(b"POST /api/purchase\r\n\r\n"))
add("method/leading-crlf", "empty lines before the request line (allowed by RFC 9112)",
    lambda ctx: [b"\r\n\r\n" + req("POST", "/api/purchase", body=BODY)])

# --- 1. method override and URL rewrite headers ---------------------------------------------------

for name in ("X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override", "x-http-method-override",
             "X_HTTP_Method_Override"):
    add("override/get-%s" % name,
        "GET /api/purchase with %s: POST (the route protects POST; the backend honours the override)" % name,
        one("GET", "/api/purchase", [(name, "POST")]), issue="1")
add("override/get-lowercase-value", "GET /api/purchase with X-HTTP-Method-Override: post",
    one("GET", "/api/purchase", [("X-HTTP-Method-Override", "post")]), issue="1")
add("override/post-account-header", "POST /api/account/7 with X-HTTP-Method-Override: DELETE (the classic use of the header)",
    one("POST", "/api/account/7", [("X-HTTP-Method-Override", "DELETE")], body=BODY), issue="1")
add("override/post-account-method-query", "POST /api/account/7?_method=DELETE (Rails, Laravel, Symfony)",
    one("POST", "/api/account/7?_method=DELETE", body=BODY))
add("override/post-account-method-form", "POST /api/account/7 with the form body _method=PUT",
    one("POST", "/api/account/7", [("Content-Type", "application/x-www-form-urlencoded")], body=b"_method=PUT&name=x"))
add("override/post-purchase-method-query-lower", "POST /api/account/7?_method=delete",
    one("POST", "/api/account/7?_method=delete", body=BODY))
add("override/put-method-override", "PUT /api/purchase with X-HTTP-Method-Override: POST",
    one("PUT", "/api/purchase", [("X-HTTP-Method-Override", "POST")], body=BODY), issue="1")
add("override/hello-post-override-shop", "GET /hello on the shop host, X-HTTP-Method-Override and X-Original-URL: /admin",
    one("GET", "/hello", [("X-HTTP-Method-Override", "DELETE"), ("X-Original-URL", "/admin/users")], host=SHOP), issue="1")
add("override/signed-method-override", "signed POST /api/purchase plus X-HTTP-Method-Override: GET (signature does not cover it)",
    signed(headers=[("X-HTTP-Method-Override", "GET")]), signed=True, issue="1")
for name in ("X-Original-URL", "X-Rewrite-URL", "x-original-url", "X_Original_URL", "X_Rewrite_Url"):
    add("rewrite/hello-%s" % name,
        "POST /hello with %s: /api/purchase (Symfony/IIS rewrite headers)" % name,
        one("POST", "/hello", [(name, "/api/purchase")], body=BODY), issue="1")
add("rewrite/asterisk-original-url", "POST * with X-Original-URL: /api/purchase",
    one("POST", "*", [("X-Original-URL", "/api/purchase")], body=BODY), issue="1")
add("rewrite/signed-original-url", "signed POST /api/purchase plus X-Original-URL: /api/purchase/refund",
    signed(headers=[("X-Original-URL", "/api/purchase/refund")]), signed=True, issue="1")
add("rewrite/shop-original-url", "GET /hello on the shop host with X-Original-URL: /admin/users",
    one("GET", "/hello", [("X-Original-URL", "/admin/users")], host=SHOP), issue="1")

# --- 1. host ----------------------------------------------------------------------------------------

for slug, host in (("trailing-dot", "shop.example.com."), ("port-80", "shop.example.com:80"),
                   ("port-443", "shop.example.com:443"), ("dot-port", "shop.example.com.:80"),
                   ("upper-dot", "SHOP.Example.COM."), ("userinfo", "evil@shop.example.com"),
                   ("slash-userinfo", "h/evil@shop.example.com"), ("comma-list", "shop.example.com, other.example"),
                   ("empty-port", "shop.example.com:"), ("port-8080", "shop.example.com:8080"),
                   ("upper", "SHOP.EXAMPLE.COM"), ("two-dots", "shop.example.com.."),
                   ("space-inside", "shop.example.com other"), ("percent", "shop%2eexample.com")):
    add("host/%s" % slug, "POST /admin/users with Host: %s (protected vhost shop.example.com)" % host,
        one("POST", "/admin/users", host=host, body=BODY), issue="1" if slug in ("trailing-dot", "port-80", "slash-userinfo") else "new")
add("host/two-fields", "two Host fields (other, then shop)", one("POST", "/admin/users", ["Host: " + SHOP], host="other.example", body=BODY),
    issue="1")
add("host/two-fields-same", "two identical Host fields", one("POST", "/admin/users", ["Host: " + SHOP], host=SHOP, body=BODY), issue="1")
add("host/empty", "an empty Host with /admin", one("POST", "/admin/users", host="", body=BODY))
add("host/missing", "HTTP/1.1 without Host", one("POST", "/admin/users", host=None, body=BODY))
add("host/two-fields-case", "'host: other.example' then 'HOST: shop.example.com'",
    one("POST", "/admin/users", ["host: other.example", "HOST: " + SHOP], host=None, body=BODY))
add("host/space-before-colon", "'Host : shop.example.com'", one("POST", "/admin/users", ["Host : " + SHOP], host=None, body=BODY))
add("host/x-forwarded-host", "Host other, X-Forwarded-Host: shop.example.com (backends behind ProxyFix trust it)",
    one("POST", "/admin/users", [("X-Forwarded-Host", SHOP)], host="other.example", body=BODY))
add("host/x-forwarded-host-underscore", "Host other, X_Forwarded_Host: shop.example.com",
    one("POST", "/admin/users", [("X_Forwarded_Host", SHOP)], host="other.example", body=BODY), issue="2")
add("host/forwarded", "Host other, Forwarded: host=shop.example.com",
    one("POST", "/admin/users", [("Forwarded", "host=shop.example.com;proto=https")], host="other.example", body=BODY))
for slug, target in (("authority", "http://shop.example.com/admin/users"),
                     ("authority-userinfo", "http://u:p@shop.example.com/admin/users"),
                     ("authority-dot", "http://shop.example.com./admin/users"),
                     ("authority-https", "https://shop.example.com:443/admin/users"),
                     ("authority-upper", "HTTP://SHOP.EXAMPLE.COM/admin/users")):
    add("host/absolute-%s" % slug, "POST %s with Host: other.example (RFC 9112: the authority wins)" % target,
        one("POST", target, host="other.example", body=BODY), issue="1")

# --- 1. request-target forms ----------------------------------------------------------------------

add("host/absolute-http10-no-host", "POST http://shop.example.com/admin/users HTTP/1.0 without Host",
    one("POST", "http://shop.example.com/admin/users", host=None, version="HTTP/1.0", body=BODY), issue="1")
add("target/absolute-other-authority", "POST http://other.example/api/purchase", one("POST", "http://other.example/api/purchase", body=BODY), issue="1")
add("target/absolute-userinfo", "POST http://user:pw@api.example.com/api/purchase",
    one("POST", "http://user:pw@api.example.com/api/purchase", body=BODY), issue="1")
add("target/absolute-odd-scheme", "POST foo://x/api/purchase", one("POST", "foo://x/api/purchase", body=BODY))
add("target/absolute-no-path", "GET http://shop.example.com (no path) with Host other",
    one("GET", "http://shop.example.com", host="other.example"))
add("target/absolute-encoded-slash", "POST http://api.example.com/api%2Fpurchase",
    one("POST", "http://api.example.com/api%2Fpurchase", body=BODY))
add("target/scheme-relative", "POST //api.example.com/api/purchase", one("POST", "//api.example.com/api/purchase", body=BODY))
add("target/authority-form", "CONNECT shop.example.com:443", one("CONNECT", "shop.example.com:443", host=SHOP + ":443"))
add("target/options-asterisk", "OPTIONS *", one("OPTIONS", "*"), issue="1")
add("target/get-asterisk", "GET * (only OPTIONS may use *)", one("GET", "*"), issue="1")
add("target/post-asterisk", "POST * with a body", one("POST", "*", body=BODY), issue="1")
add("target/no-leading-slash", "POST api/purchase", one("POST", "api/purchase", body=BODY))
add("target/fragment", "POST /api/purchase#x", one("POST", "/api/purchase#x", body=BODY))
add("target/fragment-dotdot", "POST /hello#/../api/purchase", one("POST", "/hello#/../api/purchase", body=BODY))
add("target/query-dotdot", "POST /hello?/../api/purchase", one("POST", "/hello?/../api/purchase", body=BODY))
add("target/non-ascii", "a raw non-ASCII byte in the target", one("POST", "/api/purch\xe4se", body=BODY))
add("target/raw-del", "a raw DEL byte in the target", one("POST", "/api/purchase\x7f", body=BODY))

# --- 1. path variants a backend folds -------------------------------------------------------------

PATHS = [
    ("upper-prefix", "/API/purchase", "1"), ("upper-all", "/API/PURCHASE", "1"), ("upper-last", "/api/Purchase", "1"),
    ("params", "/api/purchase;x", "1"), ("params-jsessionid", "/api/purchase;jsessionid=0123", "1"),
    ("params-mid", "/api;x/purchase", "new"), ("params-root", "/;x/api/purchase", "new"), ("params-empty", "/api/purchase;", "1"),
    ("json", "/api/purchase.json", "1"), ("xml", "/api/purchase.xml", "1"), ("json-upper", "/api/purchase.JSON", "1"),
    ("trailing-space", "/api/purchase%20", "1"), ("trailing-tab", "/api/purchase%09", "new"), ("trailing-dot", "/api/purchase.", "1"),
    ("trailing-encoded-dot", "/api/purchase%2e", "1"), ("trailing-dot-slash", "/api/purchase./", "new"),
    ("trailing-dot-json", "/api/purchase..json", "new"), ("combo", "/API/purchase;x.json", "1"),
    ("trailing-slash", "/api/purchase/", "1"), ("sub", "/api/purchase/x", "1"), ("dot", "/api/./purchase", "1"),
    ("dotdot", "/x/../api/purchase", "1"), ("dotdot-above-root", "/../api/purchase", "1"), ("dot-encoded", "/api/%2e/purchase", "1"),
    ("dotdot-encoded", "/x/%2e%2e/api/purchase", "1"), ("dotdot-mixed", "/x/%2E./api/purchase", "1"),
    ("double-slash", "//api//purchase", "1"), ("encoded-slash", "/api%2Fpurchase", "1"), ("encoded-slash-lower", "/api%2fpurchase", "1"),
    ("backslash", "/api\\purchase", "1"), ("encoded-backslash", "/api%5Cpurchase", "1"), ("backslash-dotdot", "/x\\..\\api\\purchase", "1"),
    ("double-encoded-dotdot", "/x/%252e%252e/api/purchase", "new"), ("double-encoded-slash", "/api%252Fpurchase", "new"),
    ("u-escape", "/api/%u0070urchase", "new"), ("fullwidth", "/api/%EF%BD%90urchase", "new"), ("long-s", "/api/purcha%C5%BFe", "new"),
    ("nul-suffix", "/api/purchase%00.html", "new"), ("encoded-letter", "/api/%70urchase", "1"), ("encoded-hash", "/api/purchase%23x", "new"),
    ("encoded-semicolon", "/api/purchase%3Bx", "new"), ("encoded-question", "/api/purchase%3Fx", "new"),
    ("dotdot-semicolon", "/x/..;/api/purchase", "new"), ("dot-semicolon", "/.;/api/purchase", "new"),
    ("sub-dotdot-semicolon", "/api/x/..;/purchase", "new"), ("dotdot-semicolon-encoded", "/x/%2e%2e;/api/purchase", "new"),
    ("bad-escape", "/api/purchase%zz", "new"), ("truncated-escape", "/api/purchase%2", "new"),
]
for slug, path, issue in PATHS:
    add("path/%s" % slug, "POST %s" % path, one("POST", path, body=BODY), issue=issue)

# --- 2. forged verified-key headers and other gateway-owned fields --------------------------------


def forged(name, target="/hello", method="GET", host=H, value=None):
    return lambda ctx: [req(method, target, [(name, value or ctx.key_id)], body=BODY if method == "POST" else b"", host=host)]


for slug, name in (("exact", "X-App-Attest-Verified-Key-Id"), ("lower", "x-app-attest-verified-key-id"),
                   ("upper", "X-APP-ATTEST-VERIFIED-KEY-ID"), ("underscore", "X_App_Attest_Verified_Key_Id"),
                   ("mixed", "X-App_Attest-Verified_Key-Id"), ("underscore-lower", "x_app_attest_verified_key_id")):
    add("forged/%s-hello" % slug, "GET /hello with %s: <a registered key id>" % name, forged(name),
        issue="2")
add("forged/underscore-purchase-get", "GET /api/purchase (open) with X_App_Attest_Verified_Key_Id",
    forged("X_App_Attest_Verified_Key_Id", "/api/purchase"), issue="2")
add("forged/underscore-unsigned-purchase", "unsigned POST /api/purchase with X_App_Attest_Verified_Key_Id",
    forged("X_App_Attest_Verified_Key_Id", "/api/purchase", "POST"), issue="2")
add("forged/underscore-signed", "signed POST /api/purchase plus X_App_Attest_Verified_Key_Id: forged (next to the real one)",
    signed(headers=[("X_App_Attest_Verified_Key_Id", FORGED)]), signed=True, issue="2")
add("forged/exact-signed", "signed POST /api/purchase plus X-App-Attest-Verified-Key-Id: forged",
    signed(headers=[("X-App-Attest-Verified-Key-Id", FORGED)]), signed=True, issue="2")
add("forged/duplicate-hello", "two x-app-attest-verified-key-id fields on /hello",
    lambda ctx: [req("GET", "/hello", [("x-app-attest-verified-key-id", ctx.key_id), ("X-App-Attest-Verified-Key-Id", FORGED)])],
    issue="5")
add("forged/space-before-colon", "'X-App-Attest-Verified-Key-Id : <key>' (white space before the colon)",
    lambda ctx: [req("GET", "/hello", ["X-App-Attest-Verified-Key-Id : " + ctx.key_id])], issue="5")
add("forged/tab-before-colon", "'X-App-Attest-Verified-Key-Id<TAB>: <key>'",
    lambda ctx: [req("GET", "/hello", ["X-App-Attest-Verified-Key-Id\t: " + ctx.key_id])])
add("forged/obs-fold-line", "obs-fold: a continuation line that looks like the verified header",
    lambda ctx: [req("GET", "/hello", ["X-Note: a", " X-App-Attest-Verified-Key-Id: " + ctx.key_id])], issue="5")
add("forged/obs-fold-value", "obs-fold: the verified header's value on a continuation line",
    lambda ctx: [req("GET", "/hello", ["X-App-Attest-Verified-Key-Id:", " " + ctx.key_id])], issue="5")
add("forged/nbsp-name", "the verified header name followed by a non-breaking space",
    lambda ctx: [req("GET", "/hello", [b"X-App-Attest-Verified-Key-Id\xa0: " + ctx.key_id.encode()])])
add("forged/connection-nominated", "signed request with Connection: X-App-Attest-Verified-Key-Id",
    signed(headers=[("Connection", "X-App-Attest-Verified-Key-Id")]), signed=True)
add("forged/key-id-underscore", "X_App_Attest_Key_Id: forged on /hello (the gateway's request namespace)",
    forged("X_App_Attest_Key_Id", value=FORGED), issue="2")
add("forged/forwarded-proto-underscore", "X_Forwarded_Proto: forged-https on /hello",
    forged("X_Forwarded_Proto", value="forged-https"), issue="2")
add("forged/forwarded-host-underscore-hello", "X_Forwarded_Host: forged.example on /hello",
    forged("X_Forwarded_Host", value="forged.example"), issue="2")
add("forged/trailer", "chunked POST /hello whose trailer is X-App-Attest-Verified-Key-Id",
    lambda ctx: [req("POST", "/hello", [("Transfer-Encoding", "chunked")], length=False,
                     body="2\r\n{}\r\n0\r\nX-App-Attest-Verified-Key-Id: %s\r\n\r\n" % ctx.key_id)])
add("forged/trailer-underscore", "chunked POST /hello whose trailer is X_App_Attest_Verified_Key_Id",
    lambda ctx: [req("POST", "/hello", [("Transfer-Encoding", "chunked")], length=False,
                     body="2\r\n{}\r\n0\r\nX_App_Attest_Verified_Key_Id: %s\r\n\r\n" % ctx.key_id)])
add("forged/underscore-other", "X_Custom_Header: 1 on /hello (nginx drops underscores by default)",
    forged("X_Custom_Header", value="1"))

# --- request smuggling classics (the hidden request is an unsigned purchase) ----------------------

CHUNKED_HIDE = b"0\r\n\r\n" + HIDDEN


def smuggle(headers, body, target="/hello", method="POST", version="HTTP/1.1", responses=1):
    return lambda ctx: [req(method, target, headers, body, version=version, length=False)]


add("smuggle/cl-te", "Content-Length and Transfer-Encoding: chunked (CL.TE)",
    smuggle([("Content-Length", str(len(CHUNKED_HIDE))), ("Transfer-Encoding", "chunked")], CHUNKED_HIDE), issue="5")
add("smuggle/te-cl", "Transfer-Encoding: chunked then Content-Length: 4 (TE.CL)",
    smuggle([("Transfer-Encoding", "chunked"), ("Content-Length", "4")], b"%x\r\n" % len(HIDDEN) + HIDDEN + b"\r\n0\r\n\r\n"), issue="5")
for slug, te in (("chunked-identity", "chunked, identity"), ("identity-chunked", "identity, chunked"),
                 ("xchunked", "xchunked"), ("chunked-x", "chunkedx"), ("quoted", '"chunked"'), ("tab", "\tchunked"),
                 ("vtab", "\x0bchunked"), ("comma", ",chunked"), ("gzip-chunked", "gzip, chunked"), ("upper", "CHUNKED")):
    add("smuggle/te-%s" % slug, "Transfer-Encoding: %r next to a Content-Length" % te,
        smuggle([("Transfer-Encoding", te), ("Content-Length", str(len(CHUNKED_HIDE)))], CHUNKED_HIDE), issue="5")
    add("smuggle/te-%s-alone" % slug, "Transfer-Encoding: %r alone, the hidden request after a 0 chunk" % te,
        smuggle([("Transfer-Encoding", te)], CHUNKED_HIDE), issue="5", )
add("smuggle/te-underscore", "Transfer_Encoding: chunked next to a Content-Length (Puma-style _ to - folding)",
    smuggle([("Transfer_Encoding", "chunked"), ("Content-Length", str(len(CHUNKED_HIDE)))], CHUNKED_HIDE), issue="2")
add("smuggle/cl-underscore-name", "Content_Length: N next to Content-Length: 0",
    smuggle([("Content-Length", "0"), ("Content_Length", str(len(HIDDEN)))], HIDDEN), issue="2")
add("smuggle/te-two-fields", "Transfer-Encoding: chunked and Transfer-Encoding: identity",
    smuggle([("Transfer-Encoding", "chunked"), ("Transfer-Encoding", "identity"), ("Content-Length", str(len(CHUNKED_HIDE)))], CHUNKED_HIDE), issue="5")
add("smuggle/te-space-before-colon", "'Transfer-Encoding : chunked' next to a Content-Length",
    smuggle(["Transfer-Encoding : chunked", ("Content-Length", str(len(CHUNKED_HIDE)))], CHUNKED_HIDE), issue="5")
add("smuggle/te-obs-fold", "Transfer-Encoding value on an obs-fold line",
    smuggle(["Transfer-Encoding:", " chunked", ("Content-Length", str(len(CHUNKED_HIDE)))], CHUNKED_HIDE), issue="5")
add("smuggle/te-http10", "Transfer-Encoding: chunked in an HTTP/1.0 request",
    smuggle([("Transfer-Encoding", "chunked"), ("Content-Length", str(len(CHUNKED_HIDE)))], CHUNKED_HIDE, version="HTTP/1.0"), issue="5")
add("smuggle/cl-dup-different", "Content-Length: 0 and Content-Length: N",
    smuggle([("Content-Length", "0"), ("Content-Length", str(len(HIDDEN)))], HIDDEN), issue="5")
add("smuggle/cl-dup-different-rev", "Content-Length: N and Content-Length: 0",
    smuggle([("Content-Length", str(len(HIDDEN))), ("Content-Length", "0")], HIDDEN), issue="5")
add("smuggle/cl-dup-same", "Content-Length: 2 twice", smuggle([("Content-Length", "2"), ("Content-Length", "2")], b"{}"), issue="5")
for slug, value in (("list-same", "2, 2"), ("list-different", "0, %d" % len(HIDDEN)), ("plus", "+%d" % len(HIDDEN)),
                    ("negative", "-1"), ("hex", "0x%x" % len(HIDDEN)), ("underscore", "%d_0" % (len(HIDDEN) // 10)),
                    ("space-inside", "1 %d" % len(HIDDEN)), ("leading-zeros", "000%d" % len(HIDDEN)),
                    ("huge", "99999999999999999999999"), ("empty", ""), ("tab", "\t%d" % len(HIDDEN))):
    add("smuggle/cl-%s" % slug, "Content-Length: %r" % value, smuggle([("Content-Length", value)], HIDDEN), issue="5")
for slug, chunk in (("size-overflow", b"ffffffffffffffff1\r\n"), ("size-2^64", b"10000000000000000\r\n"),
                    ("size-plus", b"+5\r\n"), ("size-0x", b"0x5\r\n"), ("size-space", b"5 \r\n"),
                    ("size-underscore", b"0_5\r\n"), ("size-negative", b"-5\r\n"), ("size-leading-space", b" 5\r\n")):
    add("smuggle/chunk-%s" % slug, "chunk size line %r" % chunk,
        smuggle([("Transfer-Encoding", "chunked")], chunk + b"hello\r\n" + CHUNKED_HIDE), issue="5")
add("smuggle/chunk-ext-bare-lf", "a chunk extension containing a bare LF",
    smuggle([("Transfer-Encoding", "chunked")], b"5;x\nZ\r\nhello\r\n" + CHUNKED_HIDE), issue="5")
add("smuggle/chunk-ext-huge", "a 60 KB chunk extension (must be bounded)",
    smuggle([("Transfer-Encoding", "chunked")], b"2;" + b"e" * 60000 + b"\r\n{}\r\n" + CHUNKED_HIDE))
add("smuggle/chunk-lf-only", "chunk lines ending in LF only",
    smuggle([("Transfer-Encoding", "chunked")], b"5\nhello\n0\n\n" + HIDDEN), issue="5")
add("smuggle/chunk-missing-crlf", "chunk data not followed by CRLF",
    smuggle([("Transfer-Encoding", "chunked")], b"5\r\nhelloXX" + CHUNKED_HIDE), issue="5")
add("smuggle/chunk-too-long", "chunk data longer than its size",
    smuggle([("Transfer-Encoding", "chunked")], b"2\r\nhello\r\n" + CHUNKED_HIDE), issue="5")
add("smuggle/trailer-content-length", "a Content-Length in the chunked trailer",
    smuggle([("Transfer-Encoding", "chunked")], b"2\r\n{}\r\n0\r\nContent-Length: %d\r\n\r\n" % len(HIDDEN) + HIDDEN), issue="5")
add("smuggle/bare-lf-head", "a request head with LF line ends",
    raw(b"POST /hello HTTP/1.1\nHost: api.example.com\nContent-Length: 2\n\n{}"), issue="5")
add("smuggle/bare-lf-header", "one header line ends with LF and hides a Content-Length",
    raw(b"POST /hello HTTP/1.1\r\nHost: api.example.com\r\nX-A: 1\nContent-Length: %d\r\n\r\n" % len(HIDDEN) + HIDDEN), issue="5")
add("smuggle/bare-cr-header", "a bare CR inside a header line",
    raw(b"POST /hello HTTP/1.1\r\nHost: api.example.com\r\nX-A: 1\rContent-Length: %d\r\n\r\n" % len(HIDDEN) + HIDDEN), issue="5")
add("smuggle/pipeline-protected-behind-open", "GET /hello then an unsigned POST /api/purchase in one write",
    lambda ctx: [req("GET", "/hello") + req("POST", "/api/purchase", body=BODY)], responses=2, issue="5")
add("smuggle/pipeline-signed-then-unsigned", "a signed purchase, then an unsigned one on the same connection",
    lambda ctx: [req("POST", "/api/purchase", ctx.sign("POST", "/api/purchase", BODY), BODY) + req("POST", "/api/purchase", body=BODY)],
    signed=True, responses=2, issue="5")
add("smuggle/pipeline-three", "GET /hello, GET /hello, unsigned purchase pipelined",
    lambda ctx: [req("GET", "/hello") + req("GET", "/hello") + req("POST", "/api/purchase", body=BODY)], responses=3, issue="5")
add("smuggle/get-with-body", "GET /hello whose body is a purchase request",
    smuggle([("Content-Length", str(len(HIDDEN)))], HIDDEN, method="GET"), issue="5")
add("smuggle/cl0-then-hidden", "POST /hello Content-Length: 0 followed by an unsigned purchase",
    lambda ctx: [req("POST", "/hello", length="0") + HIDDEN], responses=2, issue="5")
add("smuggle/close-then-hidden", "Connection: close, then more bytes (must not be served)",
    lambda ctx: [req("GET", "/hello", [("Connection", "close")]) + HIDDEN], responses=1, issue="5")
add("smuggle/http10-keepalive", "HTTP/1.0 keep-alive, then a pipelined unsigned purchase",
    lambda ctx: [req("GET", "/hello", [("Connection", "keep-alive")], version="HTTP/1.0") + HIDDEN], responses=2, issue="5")
add("smuggle/http10", "HTTP/1.0 without Host to the protected purchase",
    one("POST", "/api/purchase", body=BODY, version="HTTP/1.0", host=None), issue="5")
add("smuggle/http10-lower-method", "HTTP/1.0 post /api/purchase", one("post", "/api/purchase", body=BODY, version="HTTP/1.0", host=None),
    issue="5")
add("smuggle/upgrade-h2c", "Upgrade: h2c on /hello (h2c smuggling through a proxy that forwards Upgrade)",
    one("GET", "/hello", [("Connection", "Upgrade, HTTP2-Settings"), ("Upgrade", "h2c"), ("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA")]))
add("smuggle/upgrade-websocket-hidden", "Upgrade: websocket, then an unsigned purchase right behind it",
    lambda ctx: [req("GET", "/hello", [("Connection", "Upgrade"), ("Upgrade", "websocket"), ("Sec-WebSocket-Version", "13"),
                                        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")]) + HIDDEN], responses=2)
add("smuggle/connection-host", "Connection: Host (asks the proxy to drop Host)", one("POST", "/admin/users", [("Connection", "Host")], host=SHOP, body=BODY))

# --- 4. Expect and early refusals -----------------------------------------------------------------

add("expect/protected-unsigned", "unsigned POST /api/purchase with Expect: 100-continue, body after 0.5 s",
    lambda ctx: [req("POST", "/api/purchase", [("Expect", "100-continue"), ("Content-Length", str(len(BODY)))], length=False),
                 ("wait", 0.5), BODY], issue="4", early_refusal=True)
add("expect/protected-no-body", "unsigned POST /api/purchase, Content-Length: 100000, body never sent (early 401?)",
    lambda ctx: [req("POST", "/api/purchase", [("Content-Length", "100000")], length=False)], deadline=0.6, issue="4",
    early_refusal=True)
add("expect/protected-no-body-expect", "unsigned POST /api/purchase with Expect: 100-continue, body never sent",
    lambda ctx: [req("POST", "/api/purchase", [("Expect", "100-continue"), ("Content-Length", "100000")], length=False)],
    deadline=0.6, issue="4", early_refusal=True)
add("expect/protected-signed", "signed POST /api/purchase with Expect: 100-continue",
    lambda ctx: [req("POST", "/api/purchase", list(ctx.sign("POST", "/api/purchase", BODY)) + [("Expect", "100-continue"), ("Content-Length", str(len(BODY)))], length=False),
                 ("wait", 0.5), BODY], signed=True, expect="purchase", issue="4")
DESYNC = b"GET /hello?desync=1 HTTP/1.1\r\nHost: api.example.com\r\n\r\n"
add("expect/refused-body-is-request", "unsigned POST /api/purchase whose body is a request (must be drained or the connection closed)",
    lambda ctx: [req("POST", "/api/purchase", body=DESYNC)], responses=2, deadline=0.5, issue="4")
add("expect/refused-body-later-is-request", "the same, the body sent 0.3 s after the head (after an early 401)",
    lambda ctx: [req("POST", "/api/purchase", length=str(len(DESYNC))), ("wait", 0.3), DESYNC], responses=2, deadline=0.5, issue="4")
add("expect/refused-expect-body-is-request", "the same with Expect: 100-continue, body sent anyway after 0.3 s",
    lambda ctx: [req("POST", "/api/purchase", [("Expect", "100-continue")], length=str(len(DESYNC))), ("wait", 0.3), DESYNC],
    responses=2, deadline=0.5, issue="4")
add("expect/refused-chunked-body-is-request", "unsigned chunked POST /api/purchase, the chunk a request, sent after 0.3 s",
    lambda ctx: [req("POST", "/api/purchase", [("Transfer-Encoding", "chunked")]), ("wait", 0.3),
                 b"%x\r\n" % len(DESYNC) + DESYNC + b"\r\n0\r\n\r\n"], responses=2, deadline=0.5, issue="4")
add("expect/open", "POST /hello with Expect: 100-continue",
    lambda ctx: [req("POST", "/hello", [("Expect", "100-continue"), ("Content-Length", "2")], length=False), ("wait", 0.3), b"{}"], issue="4")
add("expect/unknown", "Expect: 100-continuex (unknown expectation)", one("POST", "/hello", [("Expect", "100-continuex")], body=b"{}"))

# --- sizes ------------------------------------------------------------------------------------------

add("size/huge-header", "one 40 KiB header", one("GET", "/hello", [("X-Big", "a" * 40000)]))
add("size/many-headers", "150 header fields", one("GET", "/hello", [("X-H%d" % i, "v") for i in range(150)]))
add("size/long-target", "a 9000-byte request-target", one("GET", "/hello?x=" + "a" * 9000))
add("size/body-over-limit-protected", "unsigned POST /api/purchase with Content-Length: 5 MB (max_body 1 MiB)",
    one("POST", "/api/purchase", length="5000000"), issue="4")

# --- upstream response framing (the backend answers with broken framing) ---------------------------

for name in ("dup-cl", "two-cl", "cl-te", "cl-list", "space-colon", "obs-fold"):
    add("response/%s" % name, "the upstream answers with %s" % name, one("GET", "/__attack__/%s" % name), issue="2" if name == "dup-cl" else "new")

# --- HTTP/2 -------------------------------------------------------------------------------------------


def h2(method="GET", path="/hello", authority=H, scheme="http", extra=(), body=None, cl=None, pseudo=None, host=None):
    fields = pseudo if pseudo is not None else [(k, v) for k, v in ((":method", method), (":scheme", scheme),
                                                                     (":authority", authority), (":path", path)) if v is not None]
    if host is not None:
        fields = fields + [("host", host)]
    if cl is not None:
        fields = fields + [("content-length", str(cl))]
    fields = fields + list(extra)
    frames = [headers_frame(1, fields, end_stream=body is None)]
    if body is not None:
        frames.append(data_frame(1, body, end_stream=True))
    return frames


def h2case(id, title, issue="new", **kw):
    build = kw.pop("build", None)
    opts = {k: kw.pop(k) for k in ("expect", "expect_refused", "signed", "deadline", "streams", "early_refusal") if k in kw}
    add(id, title, build or (lambda ctx, kw=kw: h2(**kw)), proto="h2", issue=issue, **opts)


def h2signed(path="/api/purchase", method="POST", authority=H, extra=(), body=BODY):
    def build(ctx):
        sig = [(n.lower(), v) for n, v in ctx.sign(method, path, body, host=authority)]
        return h2(method, path, authority, extra=sig + list(extra), body=body, cl=len(body))
    return build


h2case("h2/positive-hello", "GET /hello over h2c", expect="hello", issue="5")
h2case("h2/positive-signed-purchase", "signed POST /api/purchase over h2c", build=h2signed(), signed=True, expect="purchase", issue="5")
h2case("h2/positive-unsigned-purchase", "unsigned POST /api/purchase over h2c", method="POST", path="/api/purchase", body=BODY,
       expect_refused=True, issue="5")
for m in ("post", "Post"):
    h2case("h2/method-%s" % m, ":method %s on /api/purchase" % m, method=m, path="/api/purchase", body=BODY, issue="1")
h2case("h2/method-space", ":method 'POST /api/purchase HTTP/1.1'", method="POST /api/purchase HTTP/1.1", body=BODY)
for slug, path in (("upper", "/API/purchase"), ("params", "/api/purchase;x"), ("json", "/api/purchase.json"),
                   ("trailing-dot", "/api/purchase."), ("trailing-space", "/api/purchase%20"), ("encoded-slash", "/api%2Fpurchase"),
                   ("backslash", "/api\\purchase"), ("no-slash", "api/purchase"), ("absolute", "http://other.example/api/purchase"),
                   ("dotdot", "/x/../api/purchase"), ("dotdot-semicolon", "/x/..;/api/purchase"), ("empty", ""), ("crlf-injection", "/hello HTTP/1.1\r\nX: y"),
                   ("space", "/api/purchase x"), ("fragment-dotdot", "/hello#/../api/purchase")):
    h2case("h2/path-%s" % slug, ":path %r" % path, method="POST", path=path, body=BODY, issue="1" if slug in ("upper", "params", "json") else "new")
h2case("h2/asterisk-get", "GET with :path *", method="GET", path="*", issue="1")
h2case("h2/asterisk-options", "OPTIONS with :path *", method="OPTIONS", path="*", issue="1")
h2case("h2/uppercase-name", "an uppercase field name", extra=[("X-Note", "1")], issue="5")
h2case("h2/uppercase-verified", "X-App-Attest-Verified-Key-Id in upper case", extra=[("X-App-Attest-Verified-Key-Id", FORGED)], issue="5")
h2case("h2/forged-exact", "x-app-attest-verified-key-id on /hello", extra=[("x-app-attest-verified-key-id", FORGED)], issue="2")
h2case("h2/forged-underscore", "x_app_attest_verified_key_id on /hello", extra=[("x_app_attest_verified_key_id", FORGED)], issue="2")
h2case("h2/forged-underscore-signed", "signed purchase plus x_app_attest_verified_key_id",
       build=h2signed(extra=[("x_app_attest_verified_key_id", FORGED)]), signed=True, issue="2")
h2case("h2/forged-value-crlf", "a value with CRLF and a verified header behind it",
       extra=[("x-note", "a\r\nx-app-attest-verified-key-id: " + FORGED)])
h2case("h2/forged-value-lf", "a value with LF and a verified header behind it", extra=[("x-note", "a\nx-app-attest-verified-key-id: " + FORGED)])
h2case("h2/forged-name-crlf", "a name with CRLF", extra=[("x-note\r\nx-app-attest-verified-key-id", FORGED)])
h2case("h2/forged-name-space", "'x-app-attest-verified-key-id ' (trailing space in the name)",
       extra=[("x-app-attest-verified-key-id ", FORGED)])
h2case("h2/forged-name-colon", "a name with a colon inside", extra=[("x-note:x-app-attest-verified-key-id", FORGED)])
h2case("h2/value-nul", "a NUL in a value", extra=[("x-note", "a\x00b")])
h2case("h2/authority-host-mismatch", ":authority api.example.com with host: shop.example.com on /admin",
       method="POST", path="/admin/users", host=SHOP, body=BODY, issue="5")
for slug, authority in (("trailing-dot", "shop.example.com."), ("port-80", "shop.example.com:80"), ("userinfo", "u@shop.example.com"),
                        ("comma", "shop.example.com, other"), ("upper-dot", "SHOP.EXAMPLE.COM.")):
    h2case("h2/authority-%s" % slug, "POST /admin/users with :authority %s" % authority, method="POST", path="/admin/users",
           authority=authority, body=BODY, issue="1")
h2case("h2/host-only-trailing-dot", "no :authority, host: shop.example.com.", method="POST", path="/admin/users", authority=None,
       host="shop.example.com.", body=BODY, issue="1")
h2case("h2/two-hosts", "no :authority, two host fields", method="POST", path="/admin/users", authority=None,
       extra=[("host", "other.example"), ("host", SHOP)], body=BODY)
h2case("h2/cl0-data", "content-length: 0 then DATA holding a purchase request", method="POST", cl=0, body=HIDDEN, issue="4")
h2case("h2/cl-short", "content-length: 2 then DATA of a purchase request", method="POST", cl=2, body=b"{}" + HIDDEN, issue="5")
h2case("h2/cl-long", "content-length: 100 and 2 bytes of DATA", method="POST", cl=100, body=b"{}", issue="5")
h2case("h2/cl-dup", "content-length twice (2 and 90)", method="POST", extra=[("content-length", "2"), ("content-length", "90")],
       body=b"{}", issue="5")
h2case("h2/cl-space", "content-length: ' 2' (leading white space)", method="POST", extra=[("content-length", " 2")], body=b"{}",
       issue="5")
h2case("h2/method-param", "POST /api/account/7?_method=DELETE", method="POST", path="/api/account/7?_method=DELETE", body=BODY)
h2case("h2/account-lower", ":method delete on /api/account/7", method="delete", path="/api/account/7", issue="1")
h2case("h2/protected-no-body", "unsigned POST /api/purchase, content-length 100000, no DATA (early refusal?)",
       build=lambda ctx: [headers_frame(1, [(":method", "POST"), (":scheme", "http"), (":authority", H), (":path", "/api/purchase"),
                                            ("content-length", "100000")], end_stream=False)],
       deadline=0.6, early_refusal=True, issue="4")
h2case("h2/cl-plus", "content-length: +2", method="POST", extra=[("content-length", "+2")], body=b"{}", issue="5")
for name, value in (("connection", "keep-alive"), ("transfer-encoding", "chunked"), ("te", "gzip"), ("keep-alive", "timeout=5"),
                    ("proxy-connection", "keep-alive"), ("upgrade", "h2c")):
    h2case("h2/conn-%s" % name, "connection-specific field %s: %s" % (name, value), method="POST",
           extra=[(name, value)], body=CHUNKED_HIDE if name == "transfer-encoding" else b"{}", issue="5")
h2case("h2/te-trailers", "te: trailers (allowed)", extra=[("te", "trailers")], issue="5")
h2case("h2/pseudo-after-regular", "a pseudo-header after a regular field",
       pseudo=[(":method", "GET"), (":scheme", "http"), ("x-note", "1"), (":authority", H), (":path", "/hello")])
h2case("h2/duplicate-path", "two :path fields", pseudo=[(":method", "POST"), (":scheme", "http"), (":authority", H),
                                                         (":path", "/hello"), (":path", "/api/purchase")], body=BODY)
h2case("h2/unknown-pseudo", "an unknown pseudo-header", pseudo=[(":method", "GET"), (":scheme", "http"), (":authority", H),
                                                                 (":path", "/hello"), (":x", "1")])
h2case("h2/missing-method", "no :method", pseudo=[(":scheme", "http"), (":authority", H), (":path", "/api/purchase")])
h2case("h2/connect", "CONNECT shop.example.com:443", pseudo=[(":method", "CONNECT"), (":authority", SHOP + ":443")])
h2case("h2/override", "GET /api/purchase with x-http-method-override: POST", path="/api/purchase",
       extra=[("x-http-method-override", "POST")], issue="1")
h2case("h2/original-url", "POST /hello with x-original-url: /api/purchase", method="POST",
       extra=[("x-original-url", "/api/purchase")], body=BODY, issue="1")


def h2_trailer(name):
    def build(ctx):
        fields = [(":method", "POST"), (":scheme", "http"), (":authority", H), (":path", "/hello")]
        return [headers_frame(1, fields, end_stream=False), data_frame(1, b"{}", end_stream=False),
                headers_frame(1, [(name, ctx.key_id)], end_stream=True)]
    return build


h2case("h2/trailer-verified", "a trailer x-app-attest-verified-key-id", build=h2_trailer("x-app-attest-verified-key-id"))
h2case("h2/trailer-underscore", "a trailer x_app_attest_verified_key_id", build=h2_trailer("x_app_attest_verified_key_id"))


def h2_continuation(ctx):
    block = encode([(":method", "POST"), (":scheme", "http"), (":authority", H), (":path", "/api/purchase"),
                    ("x_app_attest_verified_key_id", ctx.key_id)])
    half = len(block) // 2
    return [frame(HEADERS, END_STREAM, 1, block[:half]), frame(CONTINUATION, END_HEADERS, 1, block[half:])]


h2case("h2/continuation-forged", "unsigned purchase split over HEADERS+CONTINUATION with a forged field", build=h2_continuation, issue="2")

# --- slow clients (run in the background, in parallel with the rest) ------------------------------


def slow_probe(send, limit=14.0):
    """Seconds until each proxy closes a connection that sent `send` (then nothing), at most `limit`."""
    import socket
    import threading
    import time

    def measure(suite, proxy, out):
        t0 = time.monotonic()
        try:
            s = socket.create_connection(("127.0.0.1", suite.ports[proxy]), timeout=2)
            if send:
                s.sendall(send)
            s.settimeout(limit)
            first = b""
            while time.monotonic() - t0 < limit:
                s.settimeout(max(0.05, limit - (time.monotonic() - t0)))
                data = s.recv(4096)
                if not data:
                    break
                first = first or data
            closed = time.monotonic() - t0
            s.close()
            status = first[9:12].decode("latin-1") if first.startswith(b"HTTP/") else ""
            out[proxy] = ("closed after %.1fs" % closed if closed < limit else "open after %.0fs" % limit) + (
                " (%s)" % status if status else "")
            out[proxy + "_seconds"] = round(closed, 2)
        except socket.timeout:
            out[proxy] = "open after %.0fs" % limit
            out[proxy + "_seconds"] = None
        except OSError as e:
            out[proxy] = "error %s" % e
            out[proxy + "_seconds"] = round(time.monotonic() - t0, 2)

    def run(suite):
        out = {}
        threads = [threading.Thread(target=measure, args=(suite, p, out)) for p in ("gatewayd", "nginx")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        held = out.get("gatewayd_seconds")
        if held is None or held > 12:
            out["warnings"] = [("slow", "gatewayd held the connection %s" % out.get("gatewayd"))]
        return out

    return run


add("slow/idle-no-bytes", "connect and send nothing: when does the proxy close?", background=slow_probe(b""), issue="4")
add("slow/partial-head", "send half a request head, then nothing", background=slow_probe(b"GET /hello HTTP/1.1\r\nHost: a\r\n"), issue="4")
add("slow/protected-no-body", "unsigned POST /api/purchase announcing 100 bytes, none sent",
    background=slow_probe(b"POST /api/purchase HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 100\r\n\r\n"), issue="4")
