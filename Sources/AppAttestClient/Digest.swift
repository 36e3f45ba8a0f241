import Foundation

#if canImport(CryptoKit)
    import CryptoKit
#elseif canImport(GatewayCrypto)
    import GatewayCrypto
#else
    #error("AppAttestClient needs CryptoKit (Apple platforms) or the package's GatewayCrypto (Linux) for SHA-256")
#endif

/// SHA-256 and lowercase hex: CryptoKit on Apple platforms, so that an app links no OpenSSL; the
/// package's OpenSSL-backed `GatewayCrypto.SHA256` on Linux (Package.swift: a Linux-only dependency).
enum Digest {
    static func sha256(_ data: Data) -> [UInt8] {
        #if canImport(CryptoKit)
            return Array(CryptoKit.SHA256.hash(data: data))
        #else
            return data.withUnsafeBytes { GatewayCrypto.SHA256.hash(parts: [$0]) }
        #endif
    }

    private static let digits = Array("0123456789abcdef".utf8)

    static func hex(_ bytes: some Collection<UInt8>) -> String {
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
