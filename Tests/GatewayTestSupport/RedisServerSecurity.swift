import Foundation

/// How a test `redis-server` (`RedisProcess`, `RedisClusterProcess`) guards itself: `requirepass`,
/// ACL users, and TLS (then the TLS port is the only port). `serverArguments` goes to
/// `redis-server`, `cliArguments` to `redis-cli` so that the fixtures' own commands get in.
public struct RedisServerSecurity: Sendable {
    /// `requirepass`: the `default` user's password.
    public var password: String?
    /// ACL users (`user NAME on >PASSWORD RULES…`).
    public var users: [(name: String, password: String)]
    /// Their permissions. Default: everything (`~* &* +@all`).
    public var userRules: [String]
    /// Turn the `default` user off (only the ACL users can log in).
    public var defaultUserOff: Bool
    public var tls: TestCertificates?
    /// `tls-auth-clients yes`: clients must present a certificate from the CA.
    public var requireClientCertificate: Bool

    public init(
        password: String? = nil, users: [(name: String, password: String)] = [], userRules: [String] = ["~*", "&*", "+@all"],
        defaultUserOff: Bool = false, tls: TestCertificates? = nil, requireClientCertificate: Bool = false
    ) {
        self.password = password
        self.users = users
        self.userRules = userRules
        self.defaultUserOff = defaultUserOff
        self.tls = tls
        self.requireClientCertificate = requireClientCertificate
    }

    /// Arguments for `redis-server` on `port` (the TLS port when `tls` is set).
    public func serverArguments(port: UInt16, cluster: Bool = false) -> [String] {
        var args: [String] = []
        if let tls {
            args += [
                "--port", "0", "--tls-port", String(port), "--tls-cert-file", tls.serverCertificate, "--tls-key-file", tls.serverKey,
                "--tls-ca-cert-file", tls.caCertificate, "--tls-auth-clients", requireClientCertificate ? "yes" : "no",
            ]
            if cluster { args += ["--tls-cluster", "yes", "--tls-replication", "yes"] }
        } else {
            args += ["--port", String(port)]
        }
        if let password {
            args += ["--requirepass", password]
            if cluster { args += ["--masterauth", password] }
        }
        for u in users { args += ["--user", u.name, "on", ">" + u.password] + userRules }
        if defaultUserOff { args += ["--user", "default", "off"] }
        return args
    }

    /// Arguments for `redis-cli` to get in: TLS with the CA (and the client certificate), then the
    /// first ACL user, or the `default` password.
    public var cliArguments: [String] {
        var args: [String] = []
        if let tls {
            args += ["--tls", "--cacert", tls.caCertificate]
            if requireClientCertificate { args += ["--cert", tls.clientCertificate, "--key", tls.clientKey] }
        }
        if let u = users.first {
            args += ["--user", u.name, "--pass", u.password, "--no-auth-warning"]
        } else if let password {
            args += ["-a", password, "--no-auth-warning"]
        }
        return args
    }
}

/// Certificates made with the openssl CLI in a temporary directory, for TLS tests on loopback: a
/// CA and a server certificate from it for `localhost` and `127.0.0.1` (EC P-256), a client
/// certificate from the same CA, and a second CA that signed nothing here (to show a wrong trust
/// anchor is refused). The server certificate is good for clients too (a TLS Redis Cluster uses it on
/// its bus). Keys are mode 0600. `remove()` deletes the directory.
public struct TestCertificates: Sendable {
    public let directory: URL
    public var caCertificate: String { path("ca.pem") }
    public var otherCACertificate: String { path("other-ca.pem") }
    public var serverCertificate: String { path("server.pem") }
    public var serverKey: String { path("server.key") }
    public var clientCertificate: String { path("client.pem") }
    public var clientKey: String { path("client.key") }

    public static let openssl = URL(fileURLWithPath: "/usr/bin/openssl")

    public init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("test-certs-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        do {
            for ca in ["ca", "other-ca"] {
                try run([
                    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", path("\(ca).key"),
                    "-out", path("\(ca).pem"), "-days", "2", "-subj", "/CN=attest-gateway test \(ca)",
                    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                ])
            }
            try issue(
                "server", subject: "/CN=localhost",
                extensions: "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth")
            try issue("client", subject: "/CN=attest-gateway test client", extensions: "extendedKeyUsage=clientAuth")
        } catch {
            remove()
            throw error
        }
    }

    public func path(_ name: String) -> String { directory.appendingPathComponent(name).path }

    public func remove() { try? FileManager.default.removeItem(at: directory) }

    private func issue(_ name: String, subject: String, extensions: String) throws {
        try run([
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", path("\(name).key"),
            "-out", path("\(name).csr"), "-subj", subject,
        ])
        let ext = path("\(name).ext")
        try extensions.write(toFile: ext, atomically: true, encoding: .utf8)
        try run([
            "x509", "-req", "-in", path("\(name).csr"), "-CA", path("ca.pem"), "-CAkey", path("ca.key"), "-CAcreateserial",
            "-out", path("\(name).pem"), "-days", "2", "-extfile", ext,
        ])
        chmod(path("\(name).key"), 0o600)
    }

    private func run(_ args: [String]) throws {
        let r = try runProcess(Self.openssl, args, timeout: 30)
        guard r.status == 0 else {
            throw NSError(
                domain: "TestCertificates", code: 1, userInfo: [NSLocalizedDescriptionKey: "openssl \(args.first ?? ""): \(r.stderr)"])
        }
    }
}
