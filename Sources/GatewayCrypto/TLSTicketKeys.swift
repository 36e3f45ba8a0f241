import CGatewayOpenSSL
import Synchronization

/// Session ticket keys shared by every event loop (and kept across reloads by passing the same
/// instance to the new `TLSServerContext`): a current key that encrypts new tickets and the
/// previous one, still accepted. Every resumption is answered with a fresh ticket under the current key. Tickets of any older
/// key fall back to a full handshake. The server calls `rotate()` every `tls.ticket_rotation`.
///
/// Each key is a 16-byte name, an AES-256-CBC key and an HMAC-SHA256 key (RFC 5077's layout, which
/// OpenSSL uses for TLS 1.2 and 1.3 tickets alike), all from OpenSSL's CSPRNG; keys live only in memory.
public final class TLSTicketKeys: Sendable {
    struct Key {
        let name: [UInt8]
        let aes: [UInt8]
        let hmac: [UInt8]

        static func random() -> Key {
            Key(name: SecureRandom.bytes(16), aes: SecureRandom.bytes(32), hmac: SecureRandom.bytes(32))
        }
    }

    private struct State {
        var current: Key
        var previous: Key?
        var rotationCount = 0
    }

    private let state = Mutex(State(current: .random()))

    public init() {}

    /// The current key becomes the previous one; a fresh key becomes current; the older key is forgotten.
    public func rotate() {
        let fresh = Key.random()
        state.withLock { s in
            s.previous = s.current
            s.current = fresh
            s.rotationCount += 1
        }
    }

    /// How many times `rotate()` ran (for logs and tests).
    public var rotations: Int { state.withLock { $0.rotationCount } }

    /// OpenSSL's ticket key callback body. Encrypting: 1 (the current key). Decrypting: 2 = accepted,
    /// send a renewed ticket; 0 = unknown key (full handshake); -1 = internal failure.
    func callback(
        keyName: UnsafeMutablePointer<UInt8>, iv: UnsafeMutablePointer<UInt8>, cipher: OpaquePointer, mac: OpaquePointer,
        encrypt: Bool
    ) -> Int32 {
        if encrypt {
            let key = state.withLock { $0.current }
            guard RAND_bytes(iv, 16) == 1 else { return -1 }
            key.name.withUnsafeBufferPointer { keyName.update(from: $0.baseAddress!, count: 16) }
            let ok =
                key.aes.withUnsafeBufferPointer { EVP_EncryptInit_ex(cipher, EVP_aes_256_cbc(), nil, $0.baseAddress, iv) } == 1
                && key.hmac.withUnsafeBufferPointer { cgw_ticket_hmac_init(mac, $0.baseAddress, $0.count) } == 1
            return ok ? 1 : -1
        }
        let name = Array(UnsafeBufferPointer(start: keyName, count: 16))
        let found: Key? = state.withLock { s in
            if ConstantTime.equals(name, s.current.name) { return s.current }
            if let previous = s.previous, ConstantTime.equals(name, previous.name) { return previous }
            return nil
        }
        guard let key = found else { return 0 }
        let ok =
            key.hmac.withUnsafeBufferPointer { cgw_ticket_hmac_init(mac, $0.baseAddress, $0.count) } == 1
            && key.aes.withUnsafeBufferPointer { EVP_DecryptInit_ex(cipher, EVP_aes_256_cbc(), nil, $0.baseAddress, iv) } == 1
        // 2: accept and send a fresh ticket under the current key. OpenSSL sends no new ticket after a
        // TLS 1.3 resumption otherwise, and clients use a TLS 1.3 ticket once (RFC 8446 §C.4).
        return ok ? 2 : -1
    }
}
