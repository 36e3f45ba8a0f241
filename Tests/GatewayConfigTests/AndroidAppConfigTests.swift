import Testing

@testable import GatewayConfig

/// `apps[].android` and `trust.extra_android_roots` (docs/configuration.md, docs/android.md).
@Suite("Config: Android apps")
struct AndroidAppConfigTests {
    static let digest = String(repeating: "ab", count: 32)

    static func yaml(_ apps: String, trust: String = "") -> String {
        ConfigFixture.minimal + "\napps:\n" + apps + (trust.isEmpty ? "" : "\ntrust: " + trust)
    }

    @Test("both platforms in one app, an Android-only app, defaults and every key")
    func decodes() throws {
        let config = try ConfigFixture.parse(
            Self.yaml(
                """
                  - team_id: ABCDE12345
                    bundle_ids: [com.example.shop]
                    android: {package_names: [com.example.shop], signing_cert_sha256: ["\(Self.digest)"]}
                  - android:
                      package_names: [com.example.wallet, com.example.wallet_lite]
                      signing_cert_sha256: ["\(Array(repeating: "CD", count: 32).joined(separator: ":"))"]
                      min_security_level: strongbox
                      require_locked_bootloader: false
                      allow_self_signed_boot: true
                      min_patch_level: "20250105"
                """, trust: "{extra_android_roots: [certs/android-root.pem]}"))
        #expect(config.apps.count == 2)
        let both = try #require(config.apps[0].android)
        #expect(config.apps[0].appIDs == ["ABCDE12345.com.example.shop"])
        #expect(both == AndroidAppConfig(packageNames: ["com.example.shop"], signingCertSHA256: [Array(repeating: 0xab, count: 32)]))
        #expect(both.minSecurityLevel == .tee && both.requireLockedBootloader && both.requireVerifiedBoot && !both.allowSelfSignedBoot)
        let only = try #require(config.apps[1].android)
        #expect(config.apps[1].teamID == "" && config.apps[1].bundleIDs.isEmpty && config.apps[1].appIDs.isEmpty)
        #expect(only.packageNames == ["com.example.wallet", "com.example.wallet_lite"])
        #expect(only.signingCertSHA256 == [Array(repeating: 0xcd, count: 32)])
        #expect(only.minSecurityLevel == .strongbox && !only.requireLockedBootloader && only.allowSelfSignedBoot)
        #expect(only.minPatchLevel == 20_250_105)
        #expect(config.trust.extraAndroidRoots == ["/etc/attest-gateway/certs/android-root.pem"])
    }

    @Test("bad values are refused with their positions")
    func errors() {
        let errors = ConfigFixture.errors(
            Self.yaml(
                """
                  - android: {package_names: [com.example.shop, shop, com.example.shop], signing_cert_sha256: ["abc"], min_patch_level: 202513}
                  - android: {package_names: [com.example.shop], signing_cert_sha256: ["\(Self.digest)"], min_security_level: software}
                  - android: {package_names: [com.example.tv], signing_cert_sha256: ["\(Self.digest)"], require_verified_boot: false, allow_self_signed_boot: true}
                  - team_id: ABCDE12345
                    android: {signing_cert_sha256: ["\(Self.digest)"], colour: green}
                """))
        let expected = [
            "gateway.yaml:8:49: apps[0].android.package_names[1] must be an Android package name such as com.example.shop, got \"shop\"",
            "gateway.yaml:8:55: apps[0].android.package_names lists \"com.example.shop\" more than once",
            "gateway.yaml:8:96: apps[0].android.signing_cert_sha256[0] must be a signing certificate's SHA-256 digest: 64 hex digits, ':' between bytes allowed, got \"abc\"",
            "gateway.yaml:8:121: apps[0].android.min_patch_level must be a patch level YYYYMM or YYYYMMDD such as 202501, got \"202513\"",
        ]
        for e in expected { #expect(errors.contains(e), "missing \(e) in \(errors)") }
        #expect(
            errors.contains { $0.hasPrefix("gateway.yaml:9:") && $0.contains("min_security_level") && $0.contains("software") }, "\(errors)"
        )
        #expect(
            errors.contains {
                $0.hasPrefix("gateway.yaml:10:") && $0.contains("allow_self_signed_boot only applies with require_verified_boot")
            }, "\(errors)")
        #expect(errors.contains { $0.hasPrefix("gateway.yaml:11:") && $0.contains("missing required key \"bundle_ids\"") }, "\(errors)")
        #expect(errors.contains { $0.hasPrefix("gateway.yaml:12:") && $0.contains("missing required key \"package_names\"") }, "\(errors)")
        #expect(errors.contains { $0.hasPrefix("gateway.yaml:12:") && $0.contains("unknown key \"colour\"") }, "\(errors)")
    }

    @Test("a package name belongs to one app")
    func uniquePackages() {
        let errors = ConfigFixture.errors(
            Self.yaml(
                """
                  - android: {package_names: [com.example.shop], signing_cert_sha256: ["\(Self.digest)"]}
                  - android: {package_names: [com.example.shop], signing_cert_sha256: ["\(Self.digest)"]}
                """))
        #expect(
            errors.count == 1 && errors[0].hasPrefix("gateway.yaml:9:") && errors[0].contains("duplicate Android package name"), "\(errors)"
        )
    }
}
