import AndroidAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayWire

/// A local stand-in for Google's Android attestation status list (`attest-sim google`), for
/// machines that cannot reach Google and for tests that revoke at will: HTTPS (a real TLS server,
/// certificate issued by the test CA for the listen host, so the gateway's `android.ca_file` is the
/// CA's `root.pem`), `GET /attestation/status` answering as Google's does:
///
/// - `200`, `Content-Type: application/json`, the list `{"entries": {"<serial>": {"status":
///   "REVOKED"|"SUSPENDED", "reason": "…"}}}` (serials in lowercase hex without leading zeros, keys
///   sorted, so the same list is the same bytes) and a strong `ETag` (`"` + the first 32 hex digits
///   of the body's SHA-256 + `"`), which changes whenever the list does;
/// - `304` with that `ETag` (and no body) when `If-None-Match` names it (or is `*`);
/// - scripted answers (a status and `Retry-After`) are given before anything else, in order;
/// - any other method is `405`, any other path `404`.
///
/// The list starts with the serials it is given (`attest-sim google` gives the CA directory's
/// revoked batch, `TestAndroidCA.RevokedBatch`). Tests drive it in process (`revoke`, `suspend`,
/// `reinstate`, `script`, `requests`, `etag`) or, for the binary, through `/_sim/` on the same
/// listener (docs/attest-sim.md).
public final class GoogleStandIn: @unchecked Sendable {
    public static let path = "/attestation/status"

    /// One list entry.
    public struct Entry: Sendable, Equatable {
        public var status: String
        public var reason: String

        public init(status: String, reason: String) {
            self.status = status
            self.reason = reason
        }
    }

    /// One request for the list, as answered.
    public struct Logged: Sendable, Equatable {
        public var atMillis: Int64
        public var status: Int
        /// The request's `If-None-Match`, when it sent one.
        public var ifNoneMatch: String?
        /// The `ETag` answered (none for scripted answers).
        public var etag: String?
    }

    public typealias Scripted = AppleStandIn.Scripted

    public let host: String
    public let port: UInt16
    /// The PEM chain served (leaf and the CA's intermediate); the CA's `root.pem` verifies it.
    public let certificateChain: String
    private var server: BlockingTLSServer!
    private let lock = NSLock()
    private var entries: [String: Entry]
    private var scripted: [Scripted] = []
    private var log: [Logged] = []
    private let clock: @Sendable () -> Date

    /// - Parameters:
    ///   - listing: the serials listed from the start (any spelling of hex; normalised), each REVOKED
    ///     with reason `KEY_COMPROMISE`.
    ///   - workDirectory: where the TLS certificate and key are written for a moment (the CA directory).
    public init(
        host: String = "127.0.0.1", port: UInt16 = 0, ca: TestCA, listing serials: [String], workDirectory: URL,
        clock: @escaping @Sendable () -> Date = { Date() }
    ) throws {
        var initial: [String: Entry] = [:]
        for s in serials {
            guard let n = Self.normalise(serial: s) else { throw AttestSimError.usage("\"\(s)\" is not a serial number in hex") }
            initial[n] = Entry(status: "REVOKED", reason: "KEY_COMPROMISE")
        }
        entries = initial
        self.clock = clock
        self.host = host
        let box = StandInBox<GoogleStandIn>()
        let s = try BlockingTLSServer(host: host, port: port, ca: ca, workDirectory: workDirectory, name: "google-standin") { request in
            box.target?.answer(request) ?? .text(503, "stopping")
        }
        self.port = s.port
        certificateChain = s.certificateChain
        server = s
        box.target = self
    }

    deinit { server?.stop() }

    /// `https://HOST:PORT/attestation/status`: the gateway's `android.status_url`.
    public var url: String { "https://\(host):\(port)\(Self.path)" }

    public func stop() { server.stop() }

    /// Blocks until `stop()` (the `attest-sim google` command).
    public func wait() { server.wait() }

    // MARK: - What tests set and read

    /// Lists `serial` as REVOKED (replacing its entry).
    public func revoke(serial: String, reason: String = "KEY_COMPROMISE") throws(AttestSimError) {
        try set(serial: serial, Entry(status: "REVOKED", reason: reason))
    }

    /// Lists `serial` as SUSPENDED (replacing its entry).
    public func suspend(serial: String, reason: String = "SOFTWARE_FLAW") throws(AttestSimError) {
        try set(serial: serial, Entry(status: "SUSPENDED", reason: reason))
    }

    /// Takes `serial` off the list (a suspension lifted); true when it was listed.
    @discardableResult
    public func reinstate(serial: String) throws(AttestSimError) -> Bool {
        guard let n = Self.normalise(serial: serial) else { throw .usage("\"\(serial)\" is not a serial number in hex") }
        return lock.withLock { entries.removeValue(forKey: n) != nil }
    }

    private func set(serial: String, _ entry: Entry) throws(AttestSimError) {
        guard let n = Self.normalise(serial: serial) else { throw .usage("\"\(serial)\" is not a serial number in hex") }
        lock.withLock { entries[n] = entry }
    }

    /// The list now, keyed by normalised serial.
    public var listed: [String: Entry] { lock.withLock { entries } }

    /// Answers given before anything is looked at, in order, each `count` times.
    public func script(_ answer: Scripted) { lock.withLock { scripted.append(answer) } }

    /// The requests for the list so far, oldest first.
    public var requests: [Logged] { lock.withLock { log } }

    /// The list's body and `ETag` now.
    public var current: (body: [UInt8], etag: String) { Self.render(lock.withLock { entries }) }

    /// The `ETag` of the list now.
    public var etag: String { current.etag }

    /// Lowercase hex without leading zeros ("0" for zero); nil when `text` is not hex.
    public static func normalise(serial text: String) -> String? {
        guard !text.isEmpty, text.utf8.count <= 128, text.allSatisfy(\.isHexDigit) else { return nil }
        return AttestationStatusList.normalise(text)
    }

    /// The JSON Google serves (keys sorted) and its strong `ETag`.
    static func render(_ entries: [String: Entry]) -> (body: [UInt8], etag: String) {
        var object = JSONObject()
        var list = JSONObject()
        for key in entries.keys.sorted() {
            var e = JSONObject()
            e.set("status", entries[key]!.status)
            e.set("reason", entries[key]!.reason)
            list.set(key, .object(e))
        }
        object.set("entries", .object(list))
        let body = Array(object.description.utf8)
        return (body, "\"\(Hex.encode(SHA256.hash(body)).prefix(32))\"")
    }

    /// Whether an `If-None-Match` value names `etag` (weak comparison, as RFC 9110 13.1.2 says for GET).
    static func matches(ifNoneMatch: String, etag: String) -> Bool {
        let tags = ifNoneMatch.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        return tags.contains { $0 == "*" || ($0.hasPrefix("W/") ? String($0.dropFirst(2)) : $0) == etag }
    }

    // MARK: - Answers

    func answer(_ r: HTTPMessage) -> BlockingTLSServer.Response {
        let target = r.target.split(separator: "?", maxSplits: 1).first.map(String.init) ?? r.target
        if target.hasPrefix("/_sim/") { return control(r, target) }
        guard target == Self.path else { return .text(404, "Not Found") }
        guard r.method == "GET" else { return .text(405, "Method Not Allowed", headers: [("Allow", "GET")]) }
        let at = Int64(clock().timeIntervalSince1970 * 1000)
        let condition = r.header("If-None-Match")
        if let s = nextScripted() {
            lock.withLock { log.append(Logged(atMillis: at, status: s.status, ifNoneMatch: condition, etag: nil)) }
            return .text(s.status, "scripted answer", headers: s.retryAfter.map { [("Retry-After", String($0))] } ?? [])
        }
        let (body, etag) = current
        let notModified = condition.map { Self.matches(ifNoneMatch: $0, etag: etag) } ?? false
        lock.withLock { log.append(Logged(atMillis: at, status: notModified ? 304 : 200, ifNoneMatch: condition, etag: etag)) }
        if notModified { return BlockingTLSServer.Response(status: 304, headers: [("ETag", etag)]) }
        return BlockingTLSServer.Response(
            status: 200, headers: [("Content-Type", "application/json"), ("ETag", etag)], body: body)
    }

    private func nextScripted() -> Scripted? { lock.withLock { Scripted.next(in: &scripted) } }

    // MARK: - /_sim/: the binary's controls

    /// `POST /_sim/revoke {"serial":"…"[,"reason":"…"]}`, `POST /_sim/suspend` (the same),
    /// `POST /_sim/reinstate {"serial":"…"}`, `POST /_sim/answer {"status":503[,"retryAfter":S][,"count":N]}`,
    /// `GET /_sim/requests`. Each change answers the new `etag`.
    private func control(_ r: HTTPMessage, _ target: String) -> BlockingTLSServer.Response {
        let body = (try? JSONSerialization.jsonObject(with: Data(r.body.isEmpty ? Array("{}".utf8) : r.body))) as? [String: Any]
        switch (r.method, target) {
        case ("GET", "/_sim/requests"):
            return .json(
                200,
                [
                    "requests": requests.map {
                        [
                            "at": $0.atMillis, "status": $0.status, "ifNoneMatch": $0.ifNoneMatch ?? NSNull(),
                            "etag": $0.etag ?? NSNull(),
                        ] as [String: Any]
                    }
                ])
        case ("POST", "/_sim/revoke"), ("POST", "/_sim/suspend"), ("POST", "/_sim/reinstate"):
            guard let serial = body?["serial"] as? String, Self.normalise(serial: serial) != nil else {
                return .json(400, ["error": "serial: hex digits expected"])
            }
            let reason = body?["reason"] as? String
            do {
                switch target {
                case "/_sim/revoke": try revoke(serial: serial, reason: reason ?? "KEY_COMPROMISE")
                case "/_sim/suspend": try suspend(serial: serial, reason: reason ?? "SOFTWARE_FLAW")
                default: try reinstate(serial: serial)
                }
            } catch {
                return .json(400, ["error": "\(error)"])
            }
            return .json(200, ["ok": true, "etag": etag] as [String: Any])
        case ("POST", "/_sim/answer"):
            guard let status = (body?["status"] as? NSNumber)?.intValue, (100...599).contains(status) else {
                return .json(400, ["error": "status"])
            }
            let count = (body?["count"] as? NSNumber)?.intValue ?? 1
            guard count >= 1 else { return .json(400, ["error": "count"]) }
            script(Scripted(status: status, retryAfter: (body?["retryAfter"] as? NSNumber)?.intValue, count: count))
            return .json(200, ["ok": true])
        default:
            return .json(404, ["error": "no such control"])
        }
    }
}
