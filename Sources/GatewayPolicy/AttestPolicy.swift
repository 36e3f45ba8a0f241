import AndroidAttest
import AppAttest
import GatewayCrypto
import GatewayStore
import GatewayWire

/// The `apps`, `trust` and `attest` sections compiled once into what registration and assertion
/// checks read: verifiers built once, apps by app id. Immutable; a reload builds a new one.
public final class AttestPolicy: Sendable {
    /// (A class: every verified request reads its key's app, and a reference is one retain where
    /// the struct's copy retained each of its seven.)
    public final class App: Sendable {
        public let appID: AppID
        public let environments: Set<KeyEnvironment>
        /// Raw `apple_validation_category_01` values allowed; nil: any (and none).
        public let validationCategories: Set<UInt32>?
        public let minBundleVersion: BundleVersion?
        /// Accepts exactly this app's rpIdHash.
        public let assertionVerifier: AssertionVerifier
        /// `apps[].receipts`: registration verifies the attestation's receipt.
        public let verifiesReceipts: Bool
        /// `apps[].require_macos_security`.
        public let requiresMacOSSecurity: Bool

        init(
            appID: AppID, environments: Set<KeyEnvironment>, validationCategories: Set<UInt32>?, minBundleVersion: BundleVersion?,
            assertionVerifier: AssertionVerifier, verifiesReceipts: Bool, requiresMacOSSecurity: Bool
        ) {
            self.appID = appID
            self.environments = environments
            self.validationCategories = validationCategories
            self.minBundleVersion = minBundleVersion
            self.assertionVerifier = assertionVerifier
            self.verifiesReceipts = verifiesReceipts
            self.requiresMacOSSecurity = requiresMacOSSecurity
        }
    }

    /// One Android package name of an app (`apps[].android`).
    public struct AndroidApp: Sendable {
        public let packageName: String
        /// `android:<package name>`, as the store keeps it (`AndroidAppID`).
        public let appID: String
        public let policy: AndroidAttestationPolicy
    }

    public struct CompileError: Error, CustomStringConvertible {
        public let description: String
    }

    /// By `TEAMID.bundle.id`.
    public let apps: [String: App]
    /// By package name.
    public let androidApps: [String: AndroidApp]
    /// Google's pinned roots and `trust.extra_android_roots`.
    public let androidVerifier: AndroidAttestationVerifier
    public let attestationVerifier: AttestationVerifier
    /// Apple Root CA - G3 and `trust.extra_receipt_roots`.
    public let receiptVerifier: ReceiptVerifier
    public let challengeTTLMillis: Int64
    /// `limits.max_receipt`'s default (16 KiB).
    public static let defaultMaxReceiptBytes = 16 << 10
    /// `limits.max_receipt`: a registration whose `attStmt.receipt` is larger is refused
    /// (`receipt_too_large`) before its certificate chain is verified.
    public let maxReceiptBytes: Int
    /// How far a key's first risk refresh is spread after its attest receipt's not-before
    /// (`RiskSchedule.registered`): a tenth of `risk.refresh`, at most a minute.
    public let firstRefreshSpreadMillis: Int64

    /// - Parameter extraReceiptRoots: roots trusted for receipts besides Apple Root CA - G3
    ///   (`trust.extra_receipt_roots`: the simulator's receipt root, in tests).
    public init(
        apps configs: [AppPolicy], extraRoots: [X509Certificate], extraReceiptRoots: [X509Certificate] = [],
        challengeTTLMillis: Int64, maxReceiptBytes: Int = AttestPolicy.defaultMaxReceiptBytes,
        firstRefreshSpreadMillis: Int64 = RiskSchedule.firstRefreshSpreadMillis, extraAndroidRoots: [X509Certificate] = []
    ) throws(CompileError) {
        var apps: [String: App] = [:]
        var androidApps: [String: AndroidApp] = [:]
        var allIDs: [AppID] = []
        var allEnvironments: Set<AttestEnvironment> = []
        for config in configs {
            let environments = Set(config.environments.map { $0 == .development ? KeyEnvironment.development : .production })
            for e in config.environments { allEnvironments.insert(e == .development ? .development : .production) }
            let categories: Set<UInt32>? = config.validationCategories.map { names in
                Set(names.compactMap { ValidationCategory(name: $0)?.rawValue })
            }
            for bundle in config.bundleIDs {
                let id: AppID
                do {
                    id = try AppID(teamID: config.teamID, bundleID: bundle)
                } catch {
                    throw CompileError(description: "app \(config.teamID).\(bundle): \(error)")
                }
                allIDs.append(id)
                apps[id.description] = App(
                    appID: id, environments: environments, validationCategories: categories,
                    minBundleVersion: config.minBundleVersion, assertionVerifier: AssertionVerifier(appIDs: [id]),
                    verifiesReceipts: config.verifiesReceipts, requiresMacOSSecurity: config.requiresMacOSSecurity)
            }
        }
        for config in configs {
            guard let android = config.android else { continue }
            for package in android.packageNames {
                guard androidApps[package] == nil else { throw CompileError(description: "Android package \(package) is listed twice") }
                // The app's one policy: its packages (all of them allowed) and its device rules.
                androidApps[package] = AndroidApp(packageName: package, appID: AndroidAppID.of(package: package), policy: android)
            }
        }
        self.apps = apps
        self.androidApps = androidApps
        androidVerifier = AndroidAttestationVerifier(extraRoots: extraAndroidRoots)
        attestationVerifier = AttestationVerifier(
            policy: AttestationVerifier.Policy(appIDs: allIDs, environments: allEnvironments), extraRoots: extraRoots)
        receiptVerifier = ReceiptVerifier(extraRoots: extraReceiptRoots)
        self.challengeTTLMillis = challengeTTLMillis
        self.maxReceiptBytes = maxReceiptBytes
        self.firstRefreshSpreadMillis = max(0, firstRefreshSpreadMillis)
    }

    /// `apps[].require_macos_security` at registration: the credential certificate must carry
    /// macOS 27's key policy, Full Security mode and System Integrity Protection (extension
    /// 1.2.840.113635.100.8.6 with the value Apple documents). Returns nil when allowed.
    public func macOSSecurityRefusal(app: App, keyAccessControl: KeyAccessControl?) -> Explanation? {
        guard app.requiresMacOSSecurity, keyAccessControl?.requiresMacOSFullSecurity != true else { return nil }
        return Explanation(
            step: "app_policy", error: .macOSSecurityRequired,
            fields: [
                ("key_access_control", keyAccessControl?.summary ?? "absent (no extension \(KeyAccessControl.oid))"),
                ("required", "macos_full_security (Full Security mode and System Integrity Protection)"),
            ])
    }

    /// The per-app rules that hold at registration and on every assertion: the environment, and the
    /// iOS 27 signals when the device sent them. Devices before iOS 27 send neither signal; their keys
    /// are accepted (nothing to check), which the README states. Returns nil when allowed.
    public func refusal(app: App, environment: KeyEnvironment, validationCategory: UInt32?, bundleVersion: String?)
        -> Explanation?
    {
        guard app.environments.contains(environment) else {
            return Explanation(
                step: "app_policy", error: .environmentNotAllowed,
                fields: [("environment", environment.name), ("allowed", app.environments.map(\.name).sorted().joined(separator: ","))])
        }
        if let allowed = app.validationCategories, let category = validationCategory, !allowed.contains(category) {
            return Explanation(
                step: "app_policy", error: .validationCategoryNotAllowed,
                fields: [
                    ("validation_category", ValidationCategory(rawValue: category).name),
                    ("allowed", allowed.map { ValidationCategory(rawValue: $0).name }.sorted().joined(separator: ",")),
                ])
        }
        if let minimum = app.minBundleVersion, let presented = bundleVersion {
            guard let version = BundleVersion(presented), version >= minimum else {
                return Explanation(
                    step: "app_policy", error: .bundleVersionTooOld,
                    fields: [("bundle_version", String(presented.prefix(64))), ("minimum", minimum.description)])
            }
        }
        return nil
    }
}

/// `rollout: N%` on an enforce route: a stable share of keys is enforced, the rest shadowed. The
/// share is taken from the key id itself (SHA-256 output, uniformly spread), so a key stays on the
/// same side across requests, instances and restarts. A request without a usable key id is enforced
/// only at 100 %.
public enum Rollout {
    public static func enforces(keyID: [UInt8]?, basisPoints: Int) -> Bool {
        if basisPoints >= 10_000 { return true }
        guard let k = keyID, k.count >= 4 else { return false }
        let n = UInt32(k[0]) << 24 | UInt32(k[1]) << 16 | UInt32(k[2]) << 8 | UInt32(k[3])
        return Int(n % 10_000) < basisPoints
    }
}
