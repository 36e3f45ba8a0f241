"""The suite's own checks (`attack.py --self-test`, no gatewayd or nginx needed): the backend reads
and routes raw requests the way README.md says, and every verdict the suite can give is given when
its evidence is there, and not otherwise. A suite whose detectors never fire proves nothing."""

import socket
import time

import attack
import backend as backend_mod
import cases as cases_mod

KEY = "Hb3Zj4CLUNmRvrHqCzYiHW7EM08gzBQhQ16jcU+Qs+I="


def check(cond, what, failures):
    if not cond:
        failures.append(what)


def routing(failures):
    common = set(backend_mod.COMMON_STEPS)
    table = [
        ("POST", "/api/purchase", "api.example.com", "purchase"),
        ("post", "/api/purchase", "api.example.com", "purchase"),
        ("GET", "/api/purchase", "api.example.com", "purchase-read"),
        ("POST", "/api/purchases", "api.example.com", "fallback"),
        ("POST", "/API/purchase", "api.example.com", "purchase"),
        ("POST", "/api/purchase;x", "api.example.com", "purchase"),
        ("POST", "/api;x/purchase", "api.example.com", "purchase"),
        ("POST", "/api/purchase.json", "api.example.com", "purchase"),
        ("POST", "/api/purchase%20", "api.example.com", "purchase"),
        ("POST", "/api/purchase.", "api.example.com", "purchase"),
        ("POST", "/api%2Fpurchase", "api.example.com", "purchase"),
        ("POST", "/api\\purchase", "api.example.com", "purchase"),
        ("POST", "/x/%2e%2e/api/purchase", "api.example.com", "purchase"),
        ("POST", "/api/purchase%3Bx", "api.example.com", "fallback"),
        ("POST", "/api/purchase%23x", "api.example.com", "fallback"),
        ("POST", "/hello#/../api/purchase", "api.example.com", "hello"),
        ("DELETE", "/api/account/1", "api.example.com", "account-write"),
        ("POST", "/api/account/1?_method=DELETE", "api.example.com", "account-write"),
        ("GET", "/admin", "shop.example.com.", "shop-admin"),
        ("GET", "/admin", "SHOP.example.com:80", "shop-admin"),
        ("GET", "/admin", "x@shop.example.com", "shop-admin"),
        ("GET", "/admin", "shop.example.com..", "fallback"),
        ("GET", "http://shop.example.com/admin", "other.example", "shop-admin"),
        ("GET", "/admin", "other.example", "fallback"),
    ]
    for method, target, host, want in table:
        env = {"REQUEST_METHOD": method, "attack.target": target, "HTTP_HOST": host}
        got = backend_mod.route_variants(env, common)[0]["handler"]
        check(got == want, "route %s %s Host %s: %s, expected %s" % (method, target, host, got, want), failures)
    env = {"REQUEST_METHOD": "GET", "attack.target": "/api/purchase", "HTTP_HOST": "a", "HTTP_X_HTTP_METHOD_OVERRIDE": "post"}
    check(backend_mod.route_variants(env, common)[0]["handler"] == "purchase", "X-HTTP-Method-Override is honoured", failures)
    env = {"REQUEST_METHOD": "GET", "attack.target": "/hello", "HTTP_HOST": "a", "HTTP_X_ORIGINAL_URL": "/api/account/1",
           "HTTP_X_HTTP_METHOD_OVERRIDE": "DELETE"}
    check(backend_mod.route_variants(env, common)[0]["handler"] == "account-write", "X-Original-URL is honoured", failures)
    exotic = common | set(backend_mod.EXOTIC_STEPS)
    env = {"REQUEST_METHOD": "POST", "attack.target": "/api/%EF%BD%90urchase", "HTTP_HOST": "a"}
    check(backend_mod.route_variants(env, common)[0]["handler"] == "fallback", "NFKC is not a common step", failures)
    check(backend_mod.route_variants(env, exotic)[0]["handler"] == "purchase", "NFKC is an exotic step", failures)


def wire(failures):
    """The real backend server, reached directly: it reads pipelined and smuggled requests, frames
    by Transfer_Encoding, folds field names the CGI way and records bodies cut short."""
    b = backend_mod.Backend(["direct"]).start()
    try:
        port = b.port("direct")

        def send(raw, wait=0.3):
            mark = b.recorder.mark()
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            s.sendall(raw)
            time.sleep(wait)
            s.close()
            b.wait_quiet(0.05, 3)
            return b.recorder.since(mark)

        hidden = cases_mod.HIDDEN
        recs = send(b"POST /hello HTTP/1.1\r\nHost: a\r\nTransfer_Encoding: chunked\r\nContent-Length: 30\r\n\r\n0\r\n\r\n" + hidden)
        check([r["handler"] for r in recs] == ["hello", "purchase"], "Transfer_Encoding frames, the hidden request is read: %s"
              % [r["handler"] for r in recs], failures)
        recs = send(b"GET /hello HTTP/1.1\r\nHost: a\r\nX_App_Attest_Verified_Key_Id: f\r\nX-App-Attest-Verified-Key-Id: r\r\n\r\n")
        check(recs and recs[0]["verified_key"] == "f,r", "CGI folding joins both spellings: %r" % (recs and recs[0]["verified_key"]),
              failures)
        recs = send(b"POST /hello HTTP/1.1\nHost: a\nX-A: 1\n continued\nContent-Length: 2\n\n{}")
        check(recs and recs[0]["handler"] == "hello" and recs[0]["body_len"] == 2, "bare LF and obs-fold are read", failures)
        recs = send(b"POST /hello HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc", wait=2.5)
        check(recs and recs[0]["complete"] is False, "a short body is recorded as incomplete", failures)
        recs = send(b"GET /__attack__/dup-cl HTTP/1.1\r\nHost: a\r\n\r\n")
        check(recs and recs[0]["handler"] == "canned", "canned responses are recorded", failures)
    finally:
        b.stop()


def record(method, target, host="api.example.com", headers=(), listener="gatewayd"):
    env = {"REQUEST_METHOD": method, "attack.target": target, "HTTP_HOST": host}
    for n, v in headers:
        env["HTTP_" + attack.cgi_name(n)] = v
    variants = backend_mod.route_variants(env, set(backend_mod.COMMON_STEPS))
    worst = variants[0]
    return {"listener": listener, "method": method, "target": target, "headers": [list(h) for h in headers],
            "trailers": [], "cgi": {k: v for k, v in env.items() if k.startswith("HTTP_")}, "handler": worst["handler"],
            "protected": worst["handler"] in backend_mod.PROTECTED_HANDLERS, "steps": worst["steps"],
            "routed": {"method": worst["method"], "path": worst["path"], "host": worst["host"]}, "variants": variants,
            "exotic_handler": worst["handler"], "exotic_steps": [], "complete": True, "body_len": 0, "pending": False}


def access(method, target, route, status):
    return {"method": method, "target": target, "route": route, "status": status, "upstream": "backend"}


def verdicts(failures):
    def run(case, backend, log, signed=(), statuses=(200,)):
        result = {"gatewayd": {"client": {"statuses": list(statuses), "responses": []}, "backend": backend, "access": log,
                               "signed": list(signed)},
                  "nginx": {"client": {"statuses": [200]}, "backend": []}}
        f, w, _ = attack.judge(case, result, KEY)
        return sorted({k for k, _ in f}), sorted({k for k, _ in w})

    plain = cases_mod.Case("t/plain", "")
    signed_case = cases_mod.Case("t/signed", "", signed=True)
    purchase = [{"method": "POST", "target": "/api/purchase", "host": None}]
    verified_header = [("X-App-Attest-Verified-Key-Id", KEY)]

    expect = [
        ("clean open request", plain, [record("GET", "/hello")], [access("GET", "/hello", "hello", 200)], (), []),
        ("protected handler behind the catch-all", plain, [record("POST", "/API/purchase")],
         [access("POST", "/API/purchase", "rest", 200)], (), ["protected"]),
        ("verified purchase", signed_case, [record("POST", "/api/purchase", headers=verified_header)],
         [access("POST", "/api/purchase", "purchase", 200)], purchase, []),
        ("verified route but the case signed nothing", plain, [record("POST", "/api/purchase", headers=verified_header)],
         [access("POST", "/api/purchase", "purchase", 200)], (), ["forged", "protected"]),
        ("underscore spelling on an open route", plain,
         [record("GET", "/hello", headers=[("X_App_Attest_Verified_Key_Id", KEY)])], [access("GET", "/hello", "hello", 200)], (),
         ["forged"]),
        ("forged next to the real header", signed_case,
         [record("POST", "/api/purchase", headers=[("X_App_Attest_Verified_Key_Id", "x")] + verified_header)],
         [access("POST", "/api/purchase", "purchase", 200)], purchase, ["forged"]),
        ("a request gatewayd never logged", plain, [record("GET", "/hello"), record("POST", "/api/purchase?smuggled=1")],
         [access("GET", "/hello", "hello", 200)], (), ["protected", "smuggled"]),
        ("a forwarded target rewritten by gatewayd", plain, [record("GET", "/hello")],
         [access("GET", "/./hello", "hello", 200)], (), []),
        ("a refused request with the smuggled one's method", plain, [record("POST", "/api/purchase?smuggled=1")],
         [dict(access("POST", "/hello", "hello", 401), upstream=None)], (), ["protected", "smuggled"]),
        ("a refused body read as a request", plain, [record("GET", "/hello?desync=1")],
         [access("GET", "/hello?desync=1", "hello", 200)], (), ["smuggled"]),
        ("verified request executed as another method", signed_case,
         [record("POST", "/api/purchase", headers=verified_header + [("X-HTTP-Method-Override", "DELETE")])],
         [access("POST", "/api/purchase", "purchase", 200)], purchase, ["altered"]),
        ("absolute-form matched by path", plain, [record("POST", "http://shop.example.com/admin", host="other")],
         [access("POST", "http://shop.example.com/admin", "rest", 200)], (), ["protected"]),
    ]
    for name, case, backend, log, signed, want in expect:
        got, _ = run(case, backend, log, signed)
        check(got == want, "verdict %r: %s, expected %s" % (name, got, want), failures)

    positive = cases_mod.Case("t/positive", "", expect="purchase")
    got, _ = run(positive, [], [access("POST", "/api/purchase", "purchase", 401)], statuses=(401,))
    check(got == ["positive"], "a positive case that does not get through is reported: %s" % got, failures)
    refused = cases_mod.Case("t/refused", "", expect_refused=True)
    got, _ = run(refused, [record("GET", "/admin", host="shop.example.com")],
                 [access("GET", "/admin", "shop-admin", 200)])
    check("positive" in got, "a refusal case that gets through is reported: %s" % got, failures)
    _, warns = run(plain, [record("GET", "/hello")], [access("GET", "/hello", "hello", 400)], statuses=(400,))
    check(warns == ["refused-but-forwarded"], "a refused request that reached the backend warns: %s" % warns, failures)
    _, warns = run(plain, [record("GET", "/hello", headers=[("X_Forwarded_Host", "forged.example")])],
                   [access("GET", "/hello", "hello", 200)])
    check("owned-header" in warns, "a client value under a gateway-owned name warns: %s" % warns, failures)


def main():
    failures = []
    routing(failures)
    wire(failures)
    verdicts(failures)
    ids = [c.id for c in cases_mod.CASES]
    check(len(ids) == len(set(ids)), "case ids are unique", failures)
    for f in failures:
        print("SELF-TEST FAIL: %s" % f)
    print("self-test: %s (%d checks failed)" % ("FAIL" if failures else "ok", len(failures)))
    return 1 if failures else 0
