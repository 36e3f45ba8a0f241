/// How an Android key's app id is written in the store: `android:<package name>`. App Attest's app
/// ids are `TEAMID.bundle.id` (a bundle id has no ':'), so the two never meet, and the stores
/// (memory, journal, snapshots, Redis) keep Android keys with no change of format.
public enum AndroidAppID {
    public static let prefix = "android:"

    public static func of(package: String) -> String { prefix + package }

    /// The package name of an Android key's app id; nil for an App Attest one.
    public static func package(of appID: String) -> Substring? {
        guard appID.hasPrefix(prefix) else { return nil }
        return appID.dropFirst(prefix.count)
    }
}
