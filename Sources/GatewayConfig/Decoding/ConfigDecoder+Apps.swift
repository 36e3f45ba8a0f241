import GatewayWire

/// `apps`: the teams and bundle ids whose devices may attest, and what their attestations must show.
extension ConfigDecoder {
    func decodeApps(_ node: YAMLNode, path: String) -> [AppConfig]? {
        guard let items = list(node, path) else { return nil }
        var apps: [AppConfig] = []
        var appIDs: [(name: String, position: SourcePosition)] = []
        var packageNames: [(name: String, position: SourcePosition)] = []
        for (index, item) in items.enumerated() {
            guard let fields = fields(of: item, path: Self.element(path, index), keys: ConfigKeys.app) else { continue }
            // An app with only `android` has no Apple part: team_id and bundle_ids come together or not at all.
            let apple = fields["android"] == nil || fields["team_id"] != nil || fields["bundle_ids"] != nil
            let teamID = apple ? required("team_id", in: fields).flatMap { decodeTeamID($0, fields.path("team_id")) } : ""
            let bundleIDs =
                apple
                ? required("bundle_ids", in: fields).flatMap {
                    decodeBundleIDs($0, fields.path("bundle_ids"))
                } : []
            if let teamID, let bundleIDs {
                appIDs += bundleIDs.map { ("\(teamID).\($0.id)", $0.position) }
            }
            var app = AppConfig(teamID: teamID ?? "", bundleIDs: bundleIDs?.map(\.id) ?? [])
            var valid = teamID != nil && bundleIDs != nil
            if let node = fields["android"] {
                app.android = decodeAndroidApp(node, path: fields.path("android"), packageNames: &packageNames)
                if app.android == nil { valid = false }
            }
            if let node = fields["environments"] {
                if let value = choiceSet(node, fields.path("environments"), as: AppConfig.Environment.self) {
                    app.environments = value
                } else {
                    valid = false
                }
            }
            if let node = fields["validation_categories"] {
                app.validationCategories = choiceSet(
                    node,
                    fields.path("validation_categories"),
                    as: AppConfig.ValidationCategory.self
                )
                if app.validationCategories == nil { valid = false }
            }
            if let node = fields["min_bundle_version"] {
                app.minBundleVersion = decodeBundleVersion(node, fields.path("min_bundle_version"))
                if app.minBundleVersion == nil { valid = false }
            }
            if let node = fields["receipts"] {
                if let mode = choice(node, fields.path("receipts"), as: AppConfig.ReceiptMode.self) {
                    app.receipts = mode
                } else {
                    valid = false
                }
            }
            if let node = fields["require_macos_security"] {
                if let required = bool(node, fields.path("require_macos_security")) {
                    app.requireMacOSSecurity = required
                } else {
                    valid = false
                }
            }
            if valid { apps.append(app) }
        }
        checkUnique(appIDs, what: "app id")
        checkUnique(packageNames, what: "Android package name")
        return apps
    }

    func decodeTeamID(_ node: YAMLNode, _ path: String) -> String? {
        guard let text = string(node, path) else { return nil }
        let valid = text.count == 10 && text.allSatisfy { $0.isASCII && ($0.isUppercase || $0.isNumber) }
        guard valid else {
            let hint = text.count == 10 && text.uppercased() != text ? " (letters must be uppercase)" : ""
            report(
                "\(path) must be Apple's 10-character team id (A-Z, 0-9), got \(quoted(text))\(hint)",
                at: node.position
            )
            return nil
        }
        return text
    }

    /// Bundle ids: letters, digits, '-', '_' and '.' (Apple's own sample app uses '_'), each once in the list.
    private func decodeBundleIDs(_ node: YAMLNode, _ path: String) -> [(id: String, position: SourcePosition)]? {
        guard let items = list(node, path, nonEmpty: true) else { return nil }
        var ids: [(id: String, position: SourcePosition)] = []
        var valid = true
        for (index, item) in items.enumerated() {
            let itemPath = Self.element(path, index)
            guard let id = string(item, itemPath) else {
                valid = false
                continue
            }
            let characters = id.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "-_.".contains($0)) }
            guard characters, !id.hasPrefix("."), !id.hasSuffix("."), !id.contains("..") else {
                report("\(itemPath) must be a bundle id such as com.example.shop, got \(quoted(id))", at: item.position)
                valid = false
                continue
            }
            if ids.contains(where: { $0.id == id }) {
                report("\(path) lists \(quoted(id)) more than once", at: item.position)
                valid = false
                continue
            }
            ids.append((id, item.position))
        }
        return valid ? ids : nil
    }

    private func decodeBundleVersion(_ node: YAMLNode, _ path: String) -> BundleVersion? {
        guard let text = string(node, path) else { return nil }
        guard let version = BundleVersion(text) else {
            report("\(path) must be a dotted version such as '4.2' or '4.2.1', got \(quoted(text))", at: node.position)
            return nil
        }
        return version
    }
}
