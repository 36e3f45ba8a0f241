import GatewayProxy
import Testing

@Suite("Path normalisation and route matching")
struct RouteMatchTests {
    @Test("paths that an upstream would resolve to a protected route normalise to it", arguments: [
        ("/api/purchase", "/api/purchase"),
        ("/api//purchase", "/api/purchase"),
        ("//api/purchase", "/api/purchase"),
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

    @Test("ambiguous paths are refused", arguments: [
        "/api%2Fpurchase", "/api%2fpurchase", "/api%5Cpurchase", "/api\\purchase", "/a%00", "/..", "/a/../../b", "/%zz",
        "/%4", "api/purchase",
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
}
