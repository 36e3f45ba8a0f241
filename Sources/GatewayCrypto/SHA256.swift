import CGatewayOpenSSL
import GatewayWire

#if canImport(Glibc)
    import Glibc
#endif

/// SHA-256 through OpenSSL's EVP interface (SHA-NI where the CPU has it).
public enum SHA256 {
    public static let byteCount = 32

    /// Fetched once: an implicit fetch on every call costs a lock and a lookup.
    nonisolated(unsafe) private static let md: OpaquePointer = {
        guard let md = EVP_MD_fetch(nil, "SHA256", nil) else { OpenSSLFatal.fail("EVP_MD_fetch(SHA256)") }
        return md
    }()

    static var evpMD: OpaquePointer { md }

    public static func hash(_ data: [UInt8]) -> [UInt8] {
        data.withUnsafeBytes { digest(md, byteCount, $0) }
    }

    public static func hash(_ data: ArraySlice<UInt8>) -> [UInt8] {
        data.withUnsafeBytes { digest(md, byteCount, $0) }
    }

    public static func hash(_ text: String) -> [UInt8] {
        var t = text
        return t.withUTF8 { digest(md, byteCount, UnsafeRawBufferPointer($0)) }
    }

    /// SHA-256(a ‖ b) without building the concatenation (App Attest's nonce).
    public static func hash(_ a: [UInt8], _ b: [UInt8]) -> [UInt8] {
        a.withUnsafeBytes { ra in b.withUnsafeBytes { rb in digest(md, byteCount, ra, rb) } }
    }

    public static func hash(parts: [UnsafeRawBufferPointer]) -> [UInt8] {
        digest(md, byteCount, parts)
    }

    /// One EVP digest of `parts` (also SHA-1's, below).
    static func digest(_ md: OpaquePointer, _ byteCount: Int, _ parts: [UnsafeRawBufferPointer]) -> [UInt8] {
        bytes(byteCount) { out in
            withContext(md) { ctx in
                for p in parts where p.count > 0 {
                    guard EVP_DigestUpdate(ctx, p.baseAddress, p.count) == 1 else { OpenSSLFatal.fail("EVP_DigestUpdate") }
                }
                final(ctx, out, byteCount)
            }
        }
    }

    /// One EVP digest of `first ‖ second` (no array of parts to allocate: the hot path's form).
    static func digest(
        _ md: OpaquePointer, _ byteCount: Int, _ first: UnsafeRawBufferPointer,
        _ second: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0)
    ) -> [UInt8] {
        bytes(byteCount) { out in digest(md, byteCount, first, second, into: out) }
    }

    /// SHA-256(`first` ‖ `second`) in a buffer on the stack, handed to `body` (no array at all: the
    /// assertion's nonce and the digest its signature is checked over).
    public static func withDigest<R>(
        _ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0),
        _ body: (UnsafeRawBufferPointer) -> R
    ) -> R {
        var d: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        return withUnsafeMutableBytes(of: &d) { out in
            digest(md, byteCount, first, second, into: out.baseAddress!)
            return body(UnsafeRawBufferPointer(out))
        }
    }

    private static func digest(
        _ md: OpaquePointer, _ byteCount: Int, _ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer,
        into out: UnsafeMutableRawPointer
    ) {
        withContext(md) { ctx in
            guard first.isEmpty || EVP_DigestUpdate(ctx, first.baseAddress, first.count) == 1,
                second.isEmpty || EVP_DigestUpdate(ctx, second.baseAddress, second.count) == 1
            else { OpenSSLFatal.fail("EVP_DigestUpdate") }
            final(ctx, out, byteCount)
        }
    }

    private static func final(_ ctx: OpaquePointer, _ out: UnsafeMutableRawPointer, _ byteCount: Int) {
        var len: UInt32 = 0
        guard EVP_DigestFinal_ex(ctx, out.assumingMemoryBound(to: UInt8.self), &len) == 1, Int(len) == byteCount else {
            OpenSSLFatal.fail("EVP_DigestFinal_ex")
        }
    }

    /// An array of `count` bytes written by `fill` straight into its storage.
    private static func bytes(_ count: Int, _ fill: (UnsafeMutableRawPointer) -> Void) -> [UInt8] {
        ByteArrays.make(capacity: count) { buffer in
            fill(UnsafeMutableRawPointer(buffer.baseAddress!))
            return count
        }
    }

    /// Each thread's own digest context, kept for the thread's life (freed when it exits) and reset
    /// by every digest: a digest costs OpenSSL one allocation (its state) instead of two, and two
    /// event loops never share a cache line for it.
    private static let contextKey: pthread_key_t = {
        var key = pthread_key_t()
        guard pthread_key_create(&key, { p in if let p { EVP_MD_CTX_free(OpaquePointer(p)) } }) == 0 else {
            OpenSSLFatal.fail("pthread_key_create for the digest context")
        }
        return key
    }()

    private static func withContext(_ md: OpaquePointer, _ body: (OpaquePointer) -> Void) {
        let ctx: OpaquePointer
        if let kept = pthread_getspecific(contextKey) {
            ctx = OpaquePointer(kept)
        } else {
            guard let made = EVP_MD_CTX_new() else { OpenSSLFatal.fail("EVP_MD_CTX_new") }
            guard pthread_setspecific(contextKey, UnsafeRawPointer(made)) == 0 else { OpenSSLFatal.fail("pthread_setspecific") }
            ctx = made
        }
        guard EVP_DigestInit_ex(ctx, md, nil) == 1 else { OpenSSLFatal.fail("EVP_DigestInit_ex") }
        body(ctx)
    }

    /// An incremental hasher for streamed bodies (the request binding hashes a body as it arrives).
    public final class Hasher {
        private let ctx: OpaquePointer

        public init() {
            guard let c = EVP_MD_CTX_new() else { OpenSSLFatal.fail("EVP_MD_CTX_new") }
            guard EVP_DigestInit_ex(c, SHA256.md, nil) == 1 else { OpenSSLFatal.fail("EVP_DigestInit_ex") }
            ctx = c
        }

        deinit { EVP_MD_CTX_free(ctx) }

        public func update(_ bytes: UnsafeRawBufferPointer) {
            guard bytes.count > 0 else { return }
            guard EVP_DigestUpdate(ctx, bytes.baseAddress, bytes.count) == 1 else { OpenSSLFatal.fail("EVP_DigestUpdate") }
        }

        public func update(_ bytes: [UInt8]) { bytes.withUnsafeBytes { update($0) } }

        public func finalize() -> [UInt8] {
            var out = [UInt8](repeating: 0, count: 32)
            var len: UInt32 = 0
            let ok = out.withUnsafeMutableBufferPointer { EVP_DigestFinal_ex(ctx, $0.baseAddress, &len) }
            guard ok == 1 else { OpenSSLFatal.fail("EVP_DigestFinal_ex") }
            return out
        }
    }
}

/// Allocation failures and broken invariants inside OpenSSL are fatal (docs/architecture.md, crash policy).
@_spi(Issuing) public enum OpenSSLFatal {
    public static func fail(_ what: String) -> Never {
        fatalError("OpenSSL: \(what) failed: \(OpenSSLError.drain())")
    }
}

/// Reads and clears OpenSSL's thread-local error queue, for error details.
public enum OpenSSLError {
    public static func drain() -> String {
        var parts: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            var buf = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buf, buf.count)
            parts.append(String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        return parts.isEmpty ? "no OpenSSL error" : parts.joined(separator: "; ")
    }

    @_spi(Issuing) public static func clear() { ERR_clear_error() }
}

/// SHA-1, for names only (Redis identifies Lua scripts by it); never for anything security rests on.
public enum SHA1 {
    nonisolated(unsafe) private static let md: OpaquePointer = {
        guard let md = EVP_MD_fetch(nil, "SHA1", nil) else { OpenSSLFatal.fail("EVP_MD_fetch(SHA1)") }
        return md
    }()

    public static func hash(_ text: String) -> [UInt8] {
        var t = text
        return t.withUTF8 { SHA256.digest(md, 20, UnsafeRawBufferPointer($0)) }
    }
}
