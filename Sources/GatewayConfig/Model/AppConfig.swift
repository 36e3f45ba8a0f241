import GatewayWire

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

    /// 10 characters, `A-Z 0-9`; "" for an app with only `android`.
    public var teamID: String
    /// At least one (none for an app with only `android`), unique across all apps together with the team.
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
    /// `apps[].android`: the app's Android build; nil (default): none. An app with only `android`
    /// has no team id and no bundle ids.
    public var android: AndroidAppConfig?

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
        requireMacOSSecurity: Bool = false,
        android: AndroidAppConfig? = nil
    ) {
        self.android = android
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
