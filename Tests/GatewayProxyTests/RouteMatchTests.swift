import GatewayProxy
import Testing

@Suite("Path normalisation and route matching")
struct RouteMatchTests {
    @Test(
        "paths that an upstream would resolve to a protected route normalise to it",
        arguments: [
            ("/api/purchase", "/api/purchase"),
            ("/api//purchase", "/api/purchase"),
            ("/api/./purchase", "/api/purchase"),
            ("/x/../api/purchase", "/api/purchase"),
            ("/api/%70urchase", "/api/purchase"),
            ("/api/purchase%2e", "/api/purchase."),
            ("/api/purchase?x=/../y", "/api/purchase"),
            ("/api/purchase/", "/api/purchase/"),
            ("/a%3Ab", "/a%3Ab"),
            ("/a%3ab", "/a%3Ab"),
            ("http://shop.example/api/purchase?q", "/api/purchase"),
            ("http://shop.example", "/"),
            ("*", "*"),
            ("/", "/"),
        ])
    func normalises(_ c: (String, String)) {
        #expect(PathNormalizer.normalize(c.0) == c.1)
    }

    @Test(
        "ambiguous paths are refused",
        arguments: [
            "/api%2Fpurchase", "/api%2fpurchase", "/api%5Cpurchase", "/api\\purchase", "/a%00", "/..", "/a/../../b", "/%zz",
            "/%4", "api/purchase", "//api/purchase", "//x/api/purchase", "///api/purchase", "//",
        ])
    func refuses(_ t: String) {
        #expect(PathNormalizer.normalize(t) == nil)
    }

    @Test("prefixes match on segment boundaries; methods and hosts filter") func matching() {
        let m = RouteMatch(methods: ["POST"], pathPrefix: "/api/purchase")
        #expect(m.matches(method: "POST", path: "/api/purchase", host: nil))
        #expect(m.matches(method: "POST", path: "/api/purchase/42", host: nil))
        #expect(!m.matches(method: "POST", path: "/api/purchases", host: nil))
        #expect(!m.matches(method: "GET", path: "/api/purchase", host: nil))
        #expect(RouteMatch(pathPrefix: "/static/").matches(method: "GET", path: "/static/a.css", host: nil))
        #expect(RouteMatch().matches(method: "DELETE", path: "/anything", host: nil))
        #expect(RouteMatch(exactPath: "/healthz").matches(method: "GET", path: "/healthz", host: nil))
        #expect(!RouteMatch(exactPath: "/healthz").matches(method: "GET", path: "/healthz/x", host: nil))
        let h = RouteMatch(host: "Shop.Example")
        #expect(h.matches(method: "GET", path: "/", host: "shop.example:8080"))
        #expect(!h.matches(method: "GET", path: "/", host: "other.example"))
        #expect(!h.matches(method: "GET", path: "/", host: nil))
    }

    @Test("hosts: case, one trailing dot and any port are folded; IPv6 literals without brackets")
    func hostKeys() {
        let h = RouteMatch(host: "shop.example.com")
        for host in [
            "shop.example.com", "SHOP.Example.com", "shop.example.com.", "shop.example.com:80", "shop.example.com.:80",
            "shop.example.com:443", "Shop.Example.Com.:8443",
        ] {
            #expect(h.matches(method: "GET", path: "/", host: host), "\(host)")
        }
        for host in ["shop.example.com..", "other.example", "shop.example.com.evil", "h/evil@x", "", "xshop.example.com"] {
            #expect(!h.matches(method: "GET", path: "/", host: host), "\(host)")
        }
        #expect(RouteMatch(host: "::1").matches(method: "GET", path: "/", host: "[::1]:8080"))
    }

    @Test("a route that takes GET takes HEAD too (backends run GET's handler for HEAD); not the other way round")
    func headIsGet() {
        let get = RouteMatch(methods: ["GET"], pathPrefix: "/api/account")
        #expect(get.matches(method: "HEAD", path: "/api/account", host: nil))
        #expect(get.methods == ["GET", "HEAD"])
        #expect(!RouteMatch(methods: ["HEAD"]).matches(method: "GET", path: "/", host: nil))
        #expect(!RouteMatch(methods: ["POST"]).matches(method: "HEAD", path: "/", host: nil))
    }

    @Test(
        "fold: what each option folds, on normalised paths",
        arguments: [
            ("/api/purchase", PathFold.all, "/api/purchase"),
            ("/api/purchase;x", [.params], "/api/purchase"),
            ("/api/purchase%3Bx", [.params], "/api/purchase"),
            ("/api%3B/purchase", [.params], "/api/purchase"),
            ("/api;jsessionid=1/purchase;a=b", [.params], "/api/purchase"),
            ("/;x/api/purchase", [.params], "/api/purchase"),
            ("/api/x/..;/purchase", [.params], "/api/purchase"),
            ("/api/x/.;/purchase", [.params], "/api/x/purchase"),
            ("/api/purchase;x/", [.params], "/api/purchase/"),
            ("/api/purchase.json", [.suffix], "/api/purchase"),
            ("/api/purchase.a.b", [.suffix], "/api/purchase"),
            ("/api/purchase.", [.suffix], "/api/purchase"),
            ("/api/.well-known", [.suffix], "/api/.well-known"),
            ("/api/v1.2/purchase", [.suffix], "/api/v1.2/purchase"),
            ("/api/purchase%20", [.trim], "/api/purchase"),
            ("/api/purchase%09%0A%0D%20", [.trim], "/api/purchase"),
            ("/api/%20purchase", [.trim], "/api/purchase"),
            ("/api%20/purchase", [.trim], "/api/purchase"),
            ("/api/purchase.", [.trim], "/api/purchase"),
            ("/api/purchase...%20.", [.trim], "/api/purchase"),
            ("/api/purchase/", [.trim], "/api/purchase"),
            ("/api/x/..%20/purchase", [.trim], "/api/purchase"),
            ("/api/purchase%2A", [.trim], "/api/purchase%2A"),
            ("/api/purchase%21", [.trim], "/api/purchase%21"),
            ("/api/purchase.json%20", [.suffix, .trim], "/api/purchase"),
            ("/api/purchase%20.json;v=1/", PathFold.all, "/api/purchase"),
            ("/API/Purchase.JSON", PathFold.all, "/API/Purchase"),
            ("/", PathFold.all, "/"),
            ("*", PathFold.all, "*"),
            ("/api/purchase;x", [.case], "/api/purchase;x"),
        ] as [(String, PathFold, String)])
    func folds(_ c: (String, PathFold, String)) {
        #expect(PathNormalizer.fold(c.0, c.1) == c.2)
    }

    @Test(
        "a protected route with every fold matches the spellings backends fold; the plain one does not",
        arguments: [
            "/API/purchase", "/api/PURCHASE", "/api/purchase;x", "/api;x/purchase", "/api/purchase.json", "/api/purchase.",
            "/api/purchase%20", "/api/purchase%09", "/api/purchase/", "/api/x/..;/purchase", "/Api/Purchase.Json;jsessionid=1",
        ])
    func foldedMatching(_ target: String) throws {
        let path = try #require(PathNormalizer.normalize(target))
        let folded = RouteMatch(methods: ["POST"], pathPrefix: "/api/purchase", fold: .all)
        #expect(folded.matches(method: "POST", path: path, host: nil), "\(target) → \(path)")
        let exact = RouteMatch(methods: ["POST"], pathPrefix: nil, exactPath: "/api/purchase", fold: .all)
        #expect(exact.matches(method: "POST", path: path, host: nil), "\(target) → \(path)")
        let plain = RouteMatch(methods: ["POST"], pathPrefix: nil, exactPath: "/api/purchase")
        #expect(!plain.matches(method: "POST", path: path, host: nil) || path == "/api/purchase")
    }

    @Test("folding keeps segment boundaries and the route's own path is folded alike")
    func foldBoundaries() {
        let m = RouteMatch(pathPrefix: "/API/Purchase/", fold: .all)
        #expect(m.pathPrefix == "/api/purchase")
        #expect(m.matches(method: "GET", path: "/api/purchase", host: nil))
        #expect(m.matches(method: "GET", path: "/api/purchase/42.json", host: nil))
        #expect(!m.matches(method: "GET", path: "/api/purchases", host: nil))
        #expect(!m.matches(method: "GET", path: "/api/purchasex.json", host: nil))
        #expect(!m.matches(method: "GET", path: "/api/purchase.json/x", host: nil))
        let caseOnly = RouteMatch(pathPrefix: "/api/purchase", fold: [.case])
        #expect(caseOnly.matches(method: "GET", path: "/Api/PURCHASE/x", host: nil))
        #expect(!caseOnly.matches(method: "GET", path: "/api/purchase;x", host: nil))
    }
}
