import Foundation
import GatewayConfig
import Testing

@testable import Gateway

@Suite("admin token: the file's rules, what it guards, the Authorization check")
struct AdminAccessTests {
    static let token = "0123456789abcdef0123456789abcdef"

    func withFile(_ content: String?, mode: Int = 0o600, _ body: (String) throws -> Void) throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("admin-token-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("token").path
        if let content {
            #expect(FileManager.default.createFile(atPath: path, contents: Data(content.utf8)))
            #expect(chmod(path, mode_t(mode)) == 0)
        }
        try body(path)
    }

    func load(_ path: String) -> Result<AdminAccess, AdminAccess.LoadError> {
        Result { () throws(AdminAccess.LoadError) in try AdminAccess(AdminConfig(tokenFile: path)) }
    }

    @Test("a good file: one line, a trailing newline ignored, owner-only or group-readable")
    func goodFiles() throws {
        for (content, mode) in [
            (Self.token, 0o400), (Self.token + "\n", 0o600), (Self.token + "\r\n", 0o440), (Self.token + "\n\n", 0o640),
        ] {
            try withFile(content, mode: mode) { path in
                let access = try load(path).get()
                #expect(access.requiresToken)
                #expect(access.authorizes("Bearer \(Self.token)"), "\(mode)")
            }
        }
    }

    @Test("missing, empty, short, multi-line, world-readable or group-writable files are refused, naming the file, never the token")
    func badFiles() throws {
        let cases: [(String?, Int, String)] = [
            (nil, 0o600, "does not exist"),
            ("", 0o600, "is empty"),
            ("\n", 0o600, "is empty"),
            ("short", 0o600, "shorter than 16 characters"),
            (Self.token + "\nsecond-line-of-the-token", 0o600, "one line of visible ASCII"),
            ("has a space in the token", 0o600, "one line of visible ASCII"),
            (Self.token, 0o644, "lets other users read or change the token"),
            (Self.token, 0o604, "lets other users read or change the token"),
            (Self.token, 0o602, "lets other users read or change the token"),
            (Self.token, 0o660, "lets other users read or change the token"),
            (String(repeating: "a", count: 5000), 0o600, "larger than 4096 bytes"),
        ]
        for (content, mode, message) in cases {
            try withFile(content, mode: mode) { path in
                guard case .failure(let e) = load(path) else {
                    Issue.record("accepted: \(content ?? "(none)") mode \(String(mode, radix: 8))")
                    return
                }
                #expect(e.description.hasPrefix("admin.token_file \(path): "), "\(e)")
                #expect(e.description.contains(message), "\(e)")
                #expect(!e.description.contains(Self.token) && !e.description.contains("second-line"), "\(e)")
            }
        }
        // A directory is not a token file.
        #expect(throws: AdminAccess.LoadError.self) { try AdminAccess(AdminConfig(tokenFile: FileManager.default.temporaryDirectory.path)) }
    }

    @Test("Authorization: Bearer, the scheme without case; anything else is refused")
    func authorization() {
        let a = AdminAccess(token: Self.token)
        for ok in ["Bearer \(Self.token)", "bearer \(Self.token)", "BEARER  \(Self.token)"] { #expect(a.authorizes(ok), "\(ok)") }
        for bad in [
            nil, "", "Bearer", "Bearer ", "Bearer \(Self.token)x", "Bearer \(Self.token.dropLast())", "Basic \(Self.token)",
            "Bearer\(Self.token)", Self.token, "Bearer \(Self.token.uppercased())",
        ] as [String?] {
            #expect(!a.authorizes(bad), "\(bad ?? "nil")")
        }
        // Without a token file everything is open.
        #expect(AdminAccess(token: nil).authorizes(nil))
    }

    @Test("guarded paths: everything but the health endpoints, and /metrics only with protect_metrics")
    func guardedPaths() {
        let a = AdminAccess(token: Self.token)
        for open in ["/healthz", "/readyz", "/metrics"] { #expect(!a.guards(path: open), "\(open)") }
        for guarded in ["/explain", "/explain/0123456789abcdef", "/", "/anything", "/healthz/x", "/metrics2"] {
            #expect(a.guards(path: guarded), "\(guarded)")
        }
        #expect(AdminAccess(token: Self.token, protectMetrics: true).guards(path: "/metrics"))
        #expect(!AdminAccess(token: nil).guards(path: "/explain"))
    }
}

@Suite("admin.allow: who may connect")
struct AdminAllowAccessTests {
    static func access(_ networks: [String]) throws -> AdminAccess {
        let yaml = """
            listeners:
              - {name: public, address: 0.0.0.0:8080}
            admin: {allow: [\(networks.map { "'\($0)'" }.joined(separator: ", "))]}
            upstreams:
              - {name: demo, url: demo}
            routes:
              - {name: default, match: {path_prefix: /}, upstream: demo}
            """
        return try AdminAccess(try GatewayConfig.parse(yaml: yaml, file: "gateway.yaml", baseDirectory: "/").admin)
    }

    @Test("without allow everyone connects; with it, only addresses in its networks (IPv4-mapped peers as IPv4)")
    func admits() throws {
        #expect(try AdminAccess(AdminConfig()).admits(address: [203, 0, 113, 9]))
        let a = try Self.access(["10.0.0.0/8", "192.168.1.7", "2001:db8::/32"])
        #expect(a.admits(address: [10, 1, 2, 3]))
        #expect(a.admits(address: [192, 168, 1, 7]))
        #expect(!a.admits(address: [192, 168, 1, 8]))
        #expect(!a.admits(address: [127, 0, 0, 1]))
        #expect(a.admits(address: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1]))
        #expect(!a.admits(address: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 11, 0, 0, 1]))
        #expect(a.admits(address: [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]))
        #expect(!a.admits(address: [UInt8](repeating: 0, count: 15) + [1]))
    }
}
