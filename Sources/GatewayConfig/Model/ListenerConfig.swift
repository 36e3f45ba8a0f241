/// The protocols a listener may offer: `http1` (HTTP/1.1) and `h2c` (HTTP/2 with prior knowledge, cleartext).
public enum ListenerProtocol: String, Sendable, Hashable, CaseIterable {
    case http1
    case h2c
}

/// A downstream listener: where clients connect, which protocols it speaks, and its TLS.
public struct ListenerConfig: Sendable, Equatable {
    /// Unique among listeners; used in logs and metric labels.
    public var name: String
    public var address: SocketAddressSpec
    /// Never empty. Default: `[http1]`.
    public var protocols: Set<ListenerProtocol>
    /// nil: plain TCP.
    public var tls: TLSConfig?

    public init(
        name: String,
        address: SocketAddressSpec,
        protocols: Set<ListenerProtocol> = [.http1],
        tls: TLSConfig? = nil
    ) {
        self.name = name
        self.address = address
        self.protocols = protocols
        self.tls = tls
    }
}

/// Server-side TLS for a listener: one certificate, or several chosen by SNI.
///
/// YAML accepts `{certificate, private_key}` (one certificate, no server names) or
/// `{certificates: [{certificate, private_key, server_names}]}`. Both become `certificates`.
public struct TLSConfig: Sendable, Equatable {
    /// A certificate chain and its key, as PEM file paths resolved against the config file's directory.
    public struct Certificate: Sendable, Equatable {
        public var certificatePath: String
        public var privateKeyPath: String
        /// SNI names this certificate answers (`*.example.com` allowed, stored lowercased). Empty only
        /// for the first certificate, which is also the default when no name matches.
        public var serverNames: [String]

        public init(certificatePath: String, privateKeyPath: String, serverNames: [String] = []) {
            self.certificatePath = certificatePath
            self.privateKeyPath = privateKeyPath
            self.serverNames = serverNames
        }
    }

    /// Never empty; the first is the default certificate.
    public var certificates: [Certificate]

    public init(certificates: [Certificate]) {
        self.certificates = certificates
    }
}
