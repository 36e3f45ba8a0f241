import CGatewayOpenSSL

public enum ConstantTime {
    /// Equality whose running time does not depend on where two equal-length inputs differ
    /// (OpenSSL's CRYPTO_memcmp). Lengths are not secret and are compared first.
    public static func equals(_ a: some ContiguousBytesLike, _ b: some ContiguousBytesLike) -> Bool {
        a.withBytes { ra in
            b.withBytes { rb in
                ra.count == rb.count && (ra.count == 0 || CRYPTO_memcmp(ra.baseAddress, rb.baseAddress, ra.count) == 0)
            }
        }
    }
}

/// `[UInt8]` and `ArraySlice<UInt8>`, without pulling Foundation's ContiguousBytes into this module's API.
public protocol ContiguousBytesLike {
    func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R
}

extension Array: ContiguousBytesLike where Element == UInt8 {
    public func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R { try withUnsafeBytes(body) }
}

extension ArraySlice: ContiguousBytesLike where Element == UInt8 {
    public func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R { try withUnsafeBytes(body) }
}

public enum SecureRandom {
    /// `count` bytes from OpenSSL's CSPRNG (seeded by the OS).
    public static func bytes(_ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        let ok = out.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32(count)) }
        guard ok == 1 else { OpenSSLFatal.fail("RAND_bytes") }
        return out
    }

    /// Fills `buffer` from OpenSSL's CSPRNG.
    public static func fill(_ buffer: UnsafeMutableRawBufferPointer) {
        guard let base = buffer.baseAddress, !buffer.isEmpty else { return }
        guard RAND_bytes(base.assumingMemoryBound(to: UInt8.self), Int32(buffer.count)) == 1 else { OpenSSLFatal.fail("RAND_bytes") }
    }
}
