import GatewayWire

/// `apps[].android`: the Android build of an app (docs/android.md, "In gateway.yaml"), and the
/// top-level `android` section (the attestation status list).
extension ConfigDecoder {
    func decodeAndroid(_ node: YAMLNode, path: String) -> AndroidConfig? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.android) else { return nil }
        var android = AndroidConfig()
        var valid = true
        if let urlNode = fields["status_url"] {
            if case .scalar(let s) = urlNode, s.text == "off" {
                android.statusURL = nil
            } else if let url = serviceURL(urlNode, fields.path("status_url"), service: "the status list is") {
                android.statusURL = url
            } else {
                valid = false
            }
        }
        fields.read("refresh", into: &android, \.refresh, valid: &valid) {
            duration($0, $1, minimum: AndroidConfig.refreshRange.lowerBound, maximum: AndroidConfig.refreshRange.upperBound)
        }
        android.caFile = fields.optional("ca_file", valid: &valid) { filePath($0, $1) }
        fields.read("connect_timeout", into: &android, \.connectTimeout, valid: &valid) { duration($0, $1, maximum: .seconds(60)) }
        fields.read("response_timeout", into: &android, \.responseTimeout, valid: &valid) { duration($0, $1, maximum: .seconds(300)) }
        return valid ? android : nil
    }

    /// Package names go into `packageNames` (with their positions) for the check that each is
    /// claimed by one app only.
    func decodeAndroidApp(
        _ node: YAMLNode, path: String, packageNames: inout [(name: String, position: SourcePosition)]
    ) -> AndroidAppConfig? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.androidApp) else { return nil }
        var valid = true
        let packages = required("package_names", in: fields).flatMap { decodePackageNames($0, fields.path("package_names")) }
        let digests = required("signing_cert_sha256", in: fields).flatMap {
            decodeCertificateDigests($0, fields.path("signing_cert_sha256"))
        }
        if let packages { packageNames += packages } else { valid = false }
        if digests == nil { valid = false }
        var app = AndroidAppConfig(packageNames: packages?.map(\.name) ?? [], signingCertSHA256: digests ?? [])
        fields.read("min_security_level", into: &app, \.minSecurityLevel, valid: &valid) {
            choice($0, $1, as: AndroidAppConfig.SecurityLevel.self)
        }
        fields.read("require_locked_bootloader", into: &app, \.requireLockedBootloader, valid: &valid) { bool($0, $1) }
        fields.read("require_verified_boot", into: &app, \.requireVerifiedBoot, valid: &valid) { bool($0, $1) }
        fields.read("allow_self_signed_boot", into: &app, \.allowSelfSignedBoot, valid: &valid) { bool($0, $1) }
        if let node = fields["min_patch_level"] {
            if let level = decodePatchLevel(node, fields.path("min_patch_level")) { app.minPatchLevel = level } else { valid = false }
        }
        if app.allowSelfSignedBoot, !app.requireVerifiedBoot, let position = fields.keyPosition("allow_self_signed_boot") {
            report(
                "\(fields.path("allow_self_signed_boot")) only applies with require_verified_boot: true (without it every boot state passes)",
                at: position)
            valid = false
        }
        return valid ? app : nil
    }

    /// Android application ids: at least two dot-separated segments of letters, digits and '_',
    /// each starting with a letter (what the Android build tools accept).
    private func decodePackageNames(_ node: YAMLNode, _ path: String) -> [(name: String, position: SourcePosition)]? {
        guard let items = list(node, path, nonEmpty: true) else { return nil }
        var names: [(name: String, position: SourcePosition)] = []
        var valid = true
        for (index, item) in items.enumerated() {
            let itemPath = Self.element(path, index)
            guard let name = string(item, itemPath) else {
                valid = false
                continue
            }
            let segments = name.split(separator: ".", omittingEmptySubsequences: false)
            let wellFormed =
                segments.count >= 2 && name.utf8.count <= 255
                && segments.allSatisfy { s in
                    guard let first = s.first, first.isASCII, first.isLetter else { return false }
                    return s.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }
                }
            guard wellFormed else {
                report("\(itemPath) must be an Android package name such as com.example.shop, got \(quoted(name))", at: item.position)
                valid = false
                continue
            }
            if names.contains(where: { $0.name == name }) {
                report("\(path) lists \(quoted(name)) more than once", at: item.position)
                valid = false
                continue
            }
            names.append((name, item.position))
        }
        return valid ? names : nil
    }

    /// SHA-256 digests of signing certificates: 64 hex digits, with or without ':' between bytes
    /// (as `apksigner` and `keytool` print them).
    private func decodeCertificateDigests(_ node: YAMLNode, _ path: String) -> [[UInt8]]? {
        guard let items = list(node, path, nonEmpty: true) else { return nil }
        var digests: [[UInt8]] = []
        var valid = true
        for (index, item) in items.enumerated() {
            let itemPath = Self.element(path, index)
            guard let text = string(item, itemPath) else {
                valid = false
                continue
            }
            let hex = text.replacingOccurrences(of: ":", with: "")
            guard hex.utf8.count == 64, let digest = Hex.decode(hex), digest.count == 32 else {
                report(
                    "\(itemPath) must be a signing certificate's SHA-256 digest: 64 hex digits, ':' between bytes allowed, got \(quoted(text))",
                    at: item.position)
                valid = false
                continue
            }
            digests.append(digest)
        }
        return valid ? digests : nil
    }

    /// `YYYYMM` or `YYYYMMDD` (a string or an integer), a real month and day.
    private func decodePatchLevel(_ node: YAMLNode, _ path: String) -> Int64? {
        guard let text = string(node, path) else { return nil }
        let digits = text.utf8.allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
        if digits, text.utf8.count == 6 || text.utf8.count == 8, let v = Int64(text) {
            let month = text.utf8.count == 6 ? v % 100 : v / 100 % 100
            let day = text.utf8.count == 8 ? v % 100 : 1
            if (1...12).contains(month), (0...31).contains(day), v / (text.utf8.count == 6 ? 100 : 10_000) >= 2000 { return v }
        }
        report("\(path) must be a patch level YYYYMM or YYYYMMDD such as 202501, got \(quoted(text))", at: node.position)
        return nil
    }
}
