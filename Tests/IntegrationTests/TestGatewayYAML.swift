import AttestSim
import Foundation

/// The start most integration tests' `gateway.yaml` share, written once: two workers, the public and
/// admin listeners on ephemeral ports, a drain timeout, the demo upstream (then `upstreams`, YAML list
/// items), the test app `ABCDE12345.com.example.shop` (in both environments unless
/// `environments` is false) and the test CA in `caDir` trusted (its receipt root too unless
/// `receiptRoot` is false). A test appends its own attest, store, apple and routes sections.
enum TestGatewayYAML {
    static func base(
        caDir dir: URL, drain: String = "5s", upstreams: [String] = [], environments: Bool = true, receiptRoot: Bool = true,
        limits: String = ""
    ) -> String {
        let root = dir.appendingPathComponent("root.pem").path
        let receipts = receiptRoot ? ", extra_receipt_roots: [\(dir.appendingPathComponent("receipt-root.pem").path)]" : ""
        return """
            workers: 2
            listeners:
              - {name: public, address: 127.0.0.1:0}
            admin: {address: 127.0.0.1:0}
            limits: {drain_timeout: \(drain)\(limits.isEmpty ? "" : ", " + limits)}
            upstreams:
              - {name: demo, url: demo}
            \(upstreams.map { "  - \($0)\n" }.joined())apps:
              - {team_id: ABCDE12345, bundle_ids: [com.example.shop]\(environments ? ", environments: [development, production]" : "")}
            trust: {extra_roots: [\(root)]\(receipts)}
            """
    }
}

extension AppleTeamFixture {
    /// The `apple:` section for the stand-in at `apple`, as `service` (`attest_data_url` or
    /// `devicecheck_url`) with this team's key.
    func appleSection(_ apple: AppleStandIn, service: String, teamID: String = AppleTeamFixture.teamID) -> String {
        """
        apple:
          team_id: \(teamID)
          key_id: \(Self.keyID)
          private_key: \(keyPath)
          \(service): \(apple.url)
          ca_file: \(dir.appendingPathComponent("root.pem").path)
          connect_timeout: 1s
          response_timeout: 2s
        """
    }
}
