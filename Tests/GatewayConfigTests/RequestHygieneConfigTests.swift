import Testing

@testable import GatewayConfig

/// `routes[].match.fold` and `listeners[].underscores_in_headers`: defaults, values, errors.
@Suite("Request hygiene keys")
struct RequestHygieneConfigTests {
    static let routes = """
        listeners: [{name: public, address: "0.0.0.0:8080"}]
        upstreams: [{name: demo, url: demo}]
        apps: [{team_id: ABCDE12345, bundle_ids: [com.example.shop]}]
        routes:
          - {name: protected, match: {path_prefix: /api/purchase}, upstream: demo, assertion: {mode: enforce}}
          - {name: shadowed, match: {path_prefix: /api/x}, upstream: demo, assertion: {mode: shadow}}
          - {name: off, match: {path_prefix: /api/off}, upstream: demo, assertion: {mode: off}}
          - {name: plain, match: {path_prefix: /}, upstream: demo}
        """

    @Test("fold defaults to everything on routes that verify assertions and to nothing on the others")
    func foldDefaults() throws {
        let config = try ConfigFixture.parse(Self.routes)
        #expect(config.routes.map(\.match.fold) == [nil, nil, nil, nil])
        let all = Set(RouteMatch.Fold.allCases)
        #expect(config.routes.map { $0.match.effectiveFold(assertion: $0.assertion.mode) } == [all, all, [], []])
        #expect(all == [.case, .params, .suffix, .trim])
    }

    @Test("fold: a list of case, params, suffix, trim (each once); [] turns folding off")
    func foldValues() throws {
        let yaml = Self.routes
            .replacingOccurrences(of: "{path_prefix: /api/purchase}", with: "{path_prefix: /api/purchase, fold: []}")
            .replacingOccurrences(of: "{path_prefix: /}", with: "{path_prefix: /, fold: [case, trim]}")
        let config = try ConfigFixture.parse(yaml)
        #expect(config.routes[0].match.fold == [])
        #expect(config.routes[0].match.effectiveFold(assertion: .enforce) == [])
        #expect(config.routes[3].match.fold == [.case, .trim])
    }

    @Test("fold errors: unknown words with a suggestion, repeats, not a list")
    func foldErrors() {
        func errors(_ fold: String) -> [String] {
            ConfigFixture.errors(Self.routes.replacingOccurrences(of: "{path_prefix: /}", with: "{path_prefix: /, fold: \(fold)}"))
        }
        #expect(
            errors("[cases]") == [
                "gateway.yaml:8:50: routes[3].match.fold[0] must be one of \"case\", \"params\", \"suffix\" or \"trim\", got \"cases\" (did you mean \"case\"?)"
            ])
        #expect(errors("[case, case]") == ["gateway.yaml:8:56: routes[3].match.fold lists \"case\" more than once"])
        #expect(errors("all") == ["gateway.yaml:8:49: routes[3].match.fold must be a list, got \"all\""])
    }

    @Test("underscores_in_headers: drop by default, allow on request, anything else an error")
    func underscores() throws {
        #expect(try ConfigFixture.parse(ConfigFixture.minimal).listeners[0].underscoresInHeaders == .drop)
        let allow = ConfigFixture.minimal.replacingOccurrences(
            of: "address: 0.0.0.0:8080}", with: "address: 0.0.0.0:8080, underscores_in_headers: allow}")
        #expect(try ConfigFixture.parse(allow).listeners[0].underscoresInHeaders == .allow)
        let bad = ConfigFixture.minimal.replacingOccurrences(
            of: "address: 0.0.0.0:8080}", with: "address: 0.0.0.0:8080, underscores_in_headers: off}")
        #expect(
            ConfigFixture.errors(bad) == [
                "gateway.yaml:2:67: listeners[0].underscores_in_headers must be one of \"drop\" or \"allow\", got \"off\""
            ])
    }
}
