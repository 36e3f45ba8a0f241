import CGatewayOpenSSL

/// What a verifier needs to walk a chain link by link itself, where OpenSSL's chain building
/// (`X509ChainVerifier`) refuses real chains: Android key attestation chains carry intermediates
/// without CA:TRUE and certificates issued by an app's own attestation key (docs/android.md).
/// These read one certificate or check one signature; they build no chain and apply no policy.
extension X509Certificate {
    /// The outcome of checking one certificate's signature with another's public key.
    public enum SignatureCheck: Equatable, Sendable {
        case valid
        /// The signature does not verify with the issuer's key (or the algorithms do not fit).
        case invalid(String)
        /// The issuer's public key cannot be used by this OpenSSL (e.g. ML-DSA under OpenSSL 3.0).
        case unusableIssuerKey(String)
    }

    /// Whether `issuer`'s public key verifies this certificate's signature (`X509_verify`: RSA
    /// PKCS#1 v1.5 and PSS, ECDSA; the digest the signature algorithm names). Names, validity and
    /// extensions are not looked at.
    public func signatureCheck(issuer: X509Certificate) -> SignatureCheck {
        guard let key = X509_get0_pubkey(issuer.x509) else {
            return .unusableIssuerKey("the issuer's public key cannot be decoded (\(OpenSSLError.drain()))")
        }
        let r = X509_verify(x509, key)
        guard r == 1 else {
            return .invalid(r == 0 ? "the signature does not verify (\(OpenSSLError.drain()))" : "cannot verify: \(OpenSSLError.drain())")
        }
        return .valid
    }

    /// Whether this certificate's issuer name is `other`'s subject name (OpenSSL's canonical
    /// comparison, `X509_NAME_cmp`).
    public func issuerNameMatchesSubject(of other: X509Certificate) -> Bool {
        X509_NAME_cmp(X509_get_issuer_name(x509), X509_get_subject_name(other.x509)) == 0
    }

    /// The DER SubjectPublicKeyInfo as the certificate holds it, also for keys OpenSSL cannot
    /// decode (the bytes are re-encoded from the parsed structure, which keeps them as read).
    public var subjectPublicKeyInfoDER: [UInt8] {
        guard let pub = X509_get_X509_PUBKEY(x509) else { return [] }
        let len = i2d_X509_PUBKEY(pub, nil)
        guard len > 0 else {
            OpenSSLError.clear()
            return []
        }
        var out = [UInt8](repeating: 0, count: Int(len))
        out.withUnsafeMutableBufferPointer { buf in
            var p: UnsafeMutablePointer<UInt8>? = buf.baseAddress
            _ = i2d_X509_PUBKEY(pub, &p)
        }
        return out
    }

    /// The serial number: its sign and its big-endian magnitude without leading zeros (`[]` for 0,
    /// and for a serial OpenSSL cannot read).
    public var serialNumber: (isNegative: Bool, magnitude: [UInt8]) {
        guard let bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x509), nil) else {
            OpenSSLError.clear()
            return (false, [])
        }
        defer { BN_free(bn) }
        var out = [UInt8](repeating: 0, count: Int((BN_num_bits(bn) + 7) / 8))
        _ = out.withUnsafeMutableBufferPointer { BN_bn2bin(bn, $0.baseAddress) }
        return (BN_is_negative(bn) == 1, out)
    }

    /// The issuer as a one-line RFC 2253 string, for details and logs.
    public var issuer: String { Self.oneLine(X509_get_issuer_name(x509)) }
}
