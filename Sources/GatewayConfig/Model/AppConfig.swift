/// An app whose devices may attest: a team, its bundle ids, and what their attestations must show.
public struct AppConfig: Sendable, Equatable {
    /// Apple's attestation environments (the aaguid).
    public enum Environment: String, Sendable, CaseIterable {
        case development
        case production
    }

    /// iOS 27's `apple_validation_category_01` names.
    public enum ValidationCategory: String, Sendable, CaseIterable {
        case os
        case testflight
        case development
        case appStore = "app_store"
        case enterprise
        case developerID = "developer_id"
        case other
    }

    /// 10 characters, `A-Z 0-9`.
    public var teamID: String
    /// At least one, unique across all apps together with the team.
    public var bundleIDs: [String]
    /// Never empty. Default `[production]`.
    public var environments: Set<Environment>
    /// nil: any category (and attestations without one). Otherwise the category must be listed.
    public var validationCategories: Set<ValidationCategory>?
    /// nil: no minimum. Otherwise the attested `apple_bundle_version_01` must be at least this.
    public var minBundleVersion: BundleVersion?
    /// What registration does with the attestation's receipt. Default `verify`.
    public var receipts: ReceiptMode
    /// Keys must carry macOS 27's key access-control policy (Full Security mode and System Integrity
    /// Protection, extension 1.2.840.113635.100.8.6). Default false.
    public var requireMacOSSecurity: Bool

    /// `apps[].receipts`.
    public enum ReceiptMode: String, Sendable, CaseIterable {
        /// Apple's receipt checks (signature, chain to Apple Root CA - G3, fields); a bad receipt
        /// refuses the registration with `receipt_invalid`.
        case verify
        /// The receipt is stored as sent, unchecked.
        case ignore
    }

    public init(
        teamID: String,
        bundleIDs: [String],
        environments: Set<Environment> = [.production],
        validationCategories: Set<ValidationCategory>? = nil,
        minBundleVersion: BundleVersion? = nil,
        receipts: ReceiptMode = .verify,
        requireMacOSSecurity: Bool = false
    ) {
        self.teamID = teamID
        self.bundleIDs = bundleIDs
        self.environments = environments
        self.validationCategories = validationCategories
        self.minBundleVersion = minBundleVersion
        self.receipts = receipts
        self.requireMacOSSecurity = requireMacOSSecurity
    }

    /// `TEAMID.bundle.id` for each bundle id: the strings whose SHA-256 is the rpIdHash.
    public var appIDs: [String] {
        bundleIDs.map { "\(teamID).\($0)" }
    }
}

/// A dotted version such as `4.2` or `4.2.1`, compared number by number (`4.10` > `4.9`; missing
/// trailing numbers count as 0, so `4.2` == `4.2.0`).
public struct BundleVersion: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let components: [Int]

    /// nil unless `text` is 1 to 8 dot-separated numbers of at most 9 digits each.
    public init?(_ text: String) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...8).contains(parts.count) else { return nil }
        var components: [Int] = []
        for part in parts {
            guard (1...9).contains(part.count), part.allSatisfy({ $0.isASCII && $0.isNumber }), let value = Int(part)
            else {
                return nil
            }
            components.append(value)
        }
        self.components = components
    }

    public static func < (a: Self, b: Self) -> Bool {
        for index in 0..<max(a.components.count, b.components.count) {
            let left = index < a.components.count ? a.components[index] : 0
            let right = index < b.components.count ? b.components[index] : 0
            if left != right { return left < right }
        }
        return false
    }

    public static func == (a: Self, b: Self) -> Bool { !(a < b) && !(b < a) }

    public func hash(into hasher: inout Hasher) {
        var trimmed = components
        while trimmed.count > 1, trimmed.last == 0 { trimmed.removeLast() }
        hasher.combine(trimmed)
    }

    public var description: String { components.map(String.init).joined(separator: ".") }
}
