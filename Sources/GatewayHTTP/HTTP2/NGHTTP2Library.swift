import CGatewayNGHTTP2

/// The nghttp2 the process runs with (the shared library loaded).
public enum NGHTTP2Library {
    /// `1.52.0`.
    public static var version: String {
        guard let info = nghttp2_version(0), let text = info.pointee.version_str else { return "unknown" }
        return String(cString: text)
    }
}
