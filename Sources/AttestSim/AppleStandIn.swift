import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayWire
import Glibc

/// A local stand-in for Apple's App Attest data service (`attest-sim apple`), for machines that
/// cannot reach Apple: HTTPS (a real TLS server, certificate issued by the test CA for the listen
/// host), `POST /v1/attestationData` with Apple's request and response ("Assessing fraud risk"):
///
/// - the body is the base64 of the receipt; `Authorization` the bare ES256 token (no `Bearer`);
/// - the token must verify with the team key's public key, say `alg` ES256 and the key's `kid`, the
///   team id as `iss` and an `iat` within the last hour (else `401`);
/// - the receipt must be one the test CA's receipt chain signed (else `400`); a `RECEIPT` asked for
///   before its not-before gets `304`;
/// - otherwise `200` and the base64 of a new `RECEIPT`, DER, signed by the receipt chain, shaped
///   like Apple's (`ReceiptContents.refreshed`), with the key's risk metric (1 unless set) and a
///   not-before `receiptNotBeforeSeconds` after its creation (Apple: a day);
/// - a key marked as having no data gets `404`; scripted answers (a status and `Retry-After`) are
///   given before anything else is looked at, in order.
///
/// Tests drive it in process (`setMetric`, `setNoData`, `script`, `requests`) or, for the binary,
/// through `/_sim/` on the same listener (docs/attest-sim.md).
///
/// DeviceCheck's three endpoints are served by the same server ("Accessing and modifying per-device
/// data"): `POST /v1/validate_device_token`, `/v1/query_two_bits`, `/v1/update_two_bits`, JSON
/// `device_token` (base64), `transaction_id`, `timestamp` (ms, within five minutes of the clock),
/// `bit0`/`bit1` for an update; the ES256 token as `Authorization: Bearer` (missing or bare: `400`
/// "Missing or incorrectly formatted authorization token"; not the team's: `401`); a device token
/// must be one a `SimulatedDeviceCheck` of the CA made within the hour (else `400` "Missing or
/// incorrectly formatted device token payload"); a bad timestamp is `400` "Missing or incorrectly
/// formatted time stamp". A query of a device whose bits were never set is `200` with the plain-text
/// body `Bit State Not Found`; else `200` `{"bit0","bit1","last_update_time":"YYYY-MM"}`. Bits are
/// kept per team and device (every token of a device, every app of the team). Its own scripted
/// answers (`scriptDeviceCheck`) and request log (`deviceCheckRequests`).
///
/// Blocking sockets, a thread per connection: a test tool, not the gateway.
public final class AppleStandIn: @unchecked Sendable {
    public struct Options: Sendable {
        /// `HOST` to listen on (an IPv4 address or `localhost`) and the port (0: any).
        public var host: String
        public var port: UInt16
        public var teamID: String
        public var keyID: String
        /// The public half of the team key (the `.p8` the gateway signs with).
        public var teamKey: P256PublicKey
        /// Field 19 of the receipts it returns: this long after their creation (Apple: one day).
        public var receiptNotBeforeSeconds: Int64
        /// The metric of a key nobody set one for.
        public var defaultMetric: Int64

        public init(
            host: String = "127.0.0.1", port: UInt16 = 0, teamID: String, keyID: String, teamKey: P256PublicKey,
            receiptNotBeforeSeconds: Int64 = 86_400, defaultMetric: Int64 = 1
        ) {
            self.host = host
            self.port = port
            self.teamID = teamID
            self.keyID = keyID
            self.teamKey = teamKey
            self.receiptNotBeforeSeconds = receiptNotBeforeSeconds
            self.defaultMetric = defaultMetric
        }
    }

    /// One request to the data service, as answered.
    public struct Logged: Sendable, Equatable {
        public var atMillis: Int64
        /// The key the receipt is about (base64 of SHA-256 of field 3's public key), when it parsed.
        public var keyID: String?
        public var status: Int
        /// Why a 4xx was answered (empty for 200 and scripted answers).
        public var reason: String
    }

    /// A scripted answer: `status` (with `Retry-After: retryAfter` when given), `count` times.
    public struct Scripted: Sendable {
        public var status: Int
        public var retryAfter: Int?
        public var count: Int

        public init(status: Int, retryAfter: Int? = nil, count: Int = 1) {
            self.status = status
            self.retryAfter = retryAfter
            self.count = count
        }

        /// The answer at the head of `queue`, its count taken one down (removed at zero); nil when
        /// none is scripted. The stand-ins call it under their lock.
        static func next(in queue: inout [Scripted]) -> Scripted? {
            guard var first = queue.first else { return nil }
            first.count -= 1
            if first.count <= 0 { queue.removeFirst() } else { queue[0] = first }
            return first
        }
    }

    public let options: Options
    public let port: UInt16
    /// The PEM chain served (leaf and the CA's intermediate); the CA's `root.pem` verifies it.
    public let certificateChain: String
    private let ca: TestCA
    private var server: BlockingTLSServer!
    private let lock = NSLock()
    private var metrics: [String: Int64] = [:]
    private var noData: Set<String> = []
    private var scripted: [Scripted] = []
    private var log: [Logged] = []
    private var dcScripted: [Scripted] = []
    private var dcLog: [DeviceCheckLogged] = []
    /// Per team id and device (hex): the two bits and the month they were last written.
    private var bitState: [String: (bit0: Bool, bit1: Bool, month: String)] = [:]
    private let verifier: ReceiptVerifier
    private let clock: @Sendable () -> Date

    public static let path = "/v1/attestationData"

    /// One request to DeviceCheck, as answered.
    public struct DeviceCheckLogged: Sendable, Equatable {
        public var atMillis: Int64
        /// `validate_device_token`, `query_two_bits` or `update_two_bits`.
        public var endpoint: String
        /// The device the token was made by (hex), when it was one of the CA's.
        public var deviceID: String?
        public var status: Int
        /// Why a 4xx was answered (empty for 200 and scripted answers).
        public var reason: String
        /// The bits an update asked for (`bit0=1; bit1=0`), else empty.
        public var bits: String
    }

    /// The endpoints, after the base url.
    public static let deviceCheckEndpoints = ["validate_device_token", "query_two_bits", "update_two_bits"]

    /// - Parameter workDirectory: where the TLS certificate and key are written (the CA directory).
    public init(options: Options, ca: TestCA, workDirectory: URL, clock: @escaping @Sendable () -> Date = { Date() }) throws {
        self.options = options
        self.ca = ca
        self.clock = clock
        verifier = ReceiptVerifier(roots: [ca.receiptRoot])
        let box = StandInBox<AppleStandIn>()
        let server = try BlockingTLSServer(
            host: options.host, port: options.port, ca: ca, workDirectory: workDirectory, name: "apple-standin"
        ) { request in
            box.target?.answer(request) ?? .text(503, "stopping")
        }
        port = server.port
        certificateChain = server.certificateChain
        self.server = server
        box.target = self
    }

    deinit { server?.stop() }

    /// `https://HOST:PORT`: the gateway's `apple.attest_data_url`.
    public var url: String { "https://\(options.host):\(port)" }

    // MARK: - What tests set and read

    /// The risk metric of key `keyID` (base64 of the 32-byte key id); nil: every key without its own.
    public func setMetric(_ metric: Int64, keyID: String? = nil) {
        lock.withLock {
            if let keyID { metrics[keyID] = metric } else { metrics["*"] = metric }
        }
    }

    /// Apple has no data (any more) for the key's receipts: `404` until cleared.
    public func setNoData(_ on: Bool, keyID: String) {
        lock.withLock {
            if on { noData.insert(keyID) } else { noData.remove(keyID) }
        }
    }

    /// Answers given before anything is looked at, in order, each `count` times.
    public func script(_ answer: Scripted) { lock.withLock { scripted.append(answer) } }

    /// The data service's requests so far, oldest first.
    public var requests: [Logged] { lock.withLock { log } }

    /// DeviceCheck's answers given before anything is looked at, in order, each `count` times.
    public func scriptDeviceCheck(_ answer: Scripted) { lock.withLock { dcScripted.append(answer) } }

    /// DeviceCheck's requests so far, oldest first.
    public var deviceCheckRequests: [DeviceCheckLogged] { lock.withLock { dcLog } }

    /// Sets a device's bits for the team, as an update from another app of the team would.
    public func setBits(deviceID: [UInt8], bit0: Bool, bit1: Bool, month: String = "2026-11") {
        lock.withLock { bitState[options.teamID + ":" + Hex.encode(deviceID)] = (bit0, bit1, month) }
    }

    /// A device's bits for the team; nil while never set.
    public func bits(deviceID: [UInt8]) -> (bit0: Bool, bit1: Bool, month: String)? {
        lock.withLock { bitState[options.teamID + ":" + Hex.encode(deviceID)] }
    }

    public func stop() { server.stop() }

    /// Blocks until `stop()` (the `attest-sim apple` command).
    public func wait() { server.wait() }

    typealias Response = BlockingTLSServer.Response

    func answer(_ r: HTTPMessage) -> Response {
        if r.target.hasPrefix("/_sim/") { return control(r) }
        if r.target.hasPrefix("/v1/"), Self.deviceCheckEndpoints.contains(String(r.target.dropFirst(4))) {
            guard r.method == "POST" else { return .text(405, "Method Not Allowed") }
            return deviceCheck(r, endpoint: String(r.target.dropFirst(4)))
        }
        guard r.target == Self.path else { return .text(404, "Not Found") }
        guard r.method == "POST" else { return .text(405, "Method Not Allowed") }
        let now = clock()
        let nowMillis = Int64(now.timeIntervalSince1970 * 1000)
        func logged(_ response: Response, key: String?, reason: String) -> Response {
            lock.withLock { log.append(Logged(atMillis: nowMillis, keyID: key, status: response.status, reason: reason)) }
            return response
        }
        let receiptBytes =
            (try? Base64.decode(String(decoding: r.body, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))) ?? []
        let parsed = receiptBytes.isEmpty ? nil : try? AppAttestReceipt.parseStored(receiptBytes)
        let keyID = parsed.flatMap(Self.keyID)
        if let s = nextScripted() {
            var headers: [(String, String)] = []
            if let after = s.retryAfter { headers.append(("Retry-After", String(after))) }
            return logged(.text(s.status, Self.reason(s.status), headers: headers), key: keyID, reason: "scripted")
        }
        if let why = checkToken(r.header("Authorization"), now: now) {
            return logged(.text(401, "Unauthorized"), key: keyID, reason: why)
        }
        guard !receiptBytes.isEmpty else { return logged(.text(400, "Bad Payload"), key: nil, reason: "the body is not base64") }
        let verified: VerifiedReceipt
        do {
            verified = try verifier.verify(receiptBytes, expecting: .init(), at: now)
        } catch {
            return logged(.text(400, "Bad Payload"), key: keyID, reason: "not a receipt of the test CA: \(error)")
        }
        let receipt = verified.receipt
        let key = Self.keyID(receipt) ?? ""
        if receipt.kind == .receipt, let notBefore = receipt.notBefore, notBefore.millis > nowMillis {
            return logged(Response(status: 304), key: key, reason: "before the receipt's not-before \(notBefore)")
        }
        let (metric, missing) = lock.withLock { (metrics[key] ?? metrics["*"] ?? options.defaultMetric, noData.contains(key)) }
        if missing { return logged(.text(404, "No Data Found"), key: key, reason: "no data for the receipt") }
        var contents = ReceiptContents(receipt).refreshed(riskMetric: metric, at: now)
        contents.notBefore = now.addingTimeInterval(Double(options.receiptNotBeforeSeconds))
        guard let signed = try? ca.issueReceipt(contents) else {
            return logged(.text(500, "Server Error"), key: key, reason: "signing failed")
        }
        return logged(
            Response(status: 200, headers: [("Content-Type", "base64")], body: Array(Base64.encode(signed).utf8)), key: key, reason: "")
    }

    private func nextScripted() -> Scripted? { lock.withLock { Scripted.next(in: &scripted) } }

    /// nil when the token is Apple's: bare (no `Bearer`), ES256 with the team key, `kid`, `iss`,
    /// `iat` within the last hour (a minute ahead tolerated); else why not.
    func checkToken(_ value: String?, now: Date) -> String? {
        guard let value, !value.isEmpty else { return "no Authorization" }
        if value.lowercased().hasPrefix("bearer ") { return "the data service takes the bare token, not Bearer" }
        let parts: (header: [UInt8], claims: [UInt8])
        do {
            parts = try ES256JWT.verify(value, publicKey: options.teamKey)
        } catch {
            return "token: \(error)"
        }
        guard let header = (try? JSONSerialization.jsonObject(with: Data(parts.header))) as? [String: Any],
            let claims = (try? JSONSerialization.jsonObject(with: Data(parts.claims))) as? [String: Any]
        else { return "token: header or claims are not JSON objects" }
        guard header["alg"] as? String == "ES256" else { return "token: alg is not ES256" }
        guard header["kid"] as? String == options.keyID else { return "token: kid is not \(options.keyID)" }
        guard claims["iss"] as? String == options.teamID else { return "token: iss is not \(options.teamID)" }
        guard let iat = (claims["iat"] as? NSNumber)?.int64Value else { return "token: no iat" }
        let seconds = Int64(now.timeIntervalSince1970)
        guard iat <= seconds + 60 else { return "token: iat is in the future" }
        guard seconds - iat <= 3600 else { return "token: iat is more than an hour old" }
        return nil
    }

    // MARK: - DeviceCheck

    private func deviceCheck(_ r: HTTPMessage, endpoint: String) -> Response {
        let now = clock()
        let nowMillis = Int64(now.timeIntervalSince1970 * 1000)
        var device: String?
        var asked = ""
        func logged(_ response: Response, _ reason: String) -> Response {
            lock.withLock {
                dcLog.append(
                    DeviceCheckLogged(
                        atMillis: nowMillis, endpoint: endpoint, deviceID: device, status: response.status, reason: reason, bits: asked))
            }
            return response
        }
        let body = (try? JSONSerialization.jsonObject(with: Data(r.body))) as? [String: Any]
        if let text = body?["device_token"] as? String, let bytes = try? Base64.decode(text),
            let read = SimulatedDeviceCheck.read(bytes, ca: ca)
        {
            device = Hex.encode(read.deviceID)
        }
        if let s = nextDeviceCheckScripted() {
            var headers: [(String, String)] = []
            if let after = s.retryAfter { headers.append(("Retry-After", String(after))) }
            return logged(.text(s.status, Self.reason(s.status), headers: headers), "scripted")
        }
        let authorization = r.header("Authorization") ?? ""
        guard authorization.hasPrefix("Bearer "), authorization.count > 7 else {
            return logged(
                .text(400, "Missing or incorrectly formatted authorization token"), "DeviceCheck takes Authorization: Bearer <token>")
        }
        if let why = checkToken(String(authorization.dropFirst(7)), now: now) {
            return logged(.text(401, "Unable to verify authorization token"), why)
        }
        guard let body else {
            return logged(.text(400, "Missing or incorrectly formatted device token payload"), "the body is not a JSON object")
        }
        guard let ts = body["timestamp"] as? NSNumber, !(body["timestamp"] is Bool), abs(ts.int64Value - nowMillis) <= 300_000 else {
            return logged(.text(400, "Missing or incorrectly formatted time stamp"), "timestamp missing or more than 5 minutes off")
        }
        guard let transaction = body["transaction_id"] as? String, !transaction.isEmpty else {
            return logged(.text(400, "Missing or incorrectly formatted device token payload"), "no transaction_id")
        }
        guard let text = body["device_token"] as? String, let bytes = try? Base64.decode(text),
            let read = SimulatedDeviceCheck.read(bytes, ca: ca), nowMillis - read.issuedAtMillis <= 3_600_000,
            read.issuedAtMillis <= nowMillis + 60_000
        else {
            return logged(
                .text(400, "Missing or incorrectly formatted device token payload"), "not a token of a device of the CA from the last hour")
        }
        let key = options.teamID + ":" + Hex.encode(read.deviceID)
        switch endpoint {
        case "validate_device_token":
            return logged(Response(status: 200), "")
        case "query_two_bits":
            guard let state = lock.withLock({ bitState[key] }) else { return logged(.text(200, "Bit State Not Found"), "") }
            return logged(.json(200, ["bit0": state.bit0, "bit1": state.bit1, "last_update_time": state.month]), "")
        default:
            func bit(_ name: String) -> Bool?? {
                guard let v = body[name] else { return .some(nil) }
                guard let b = v as? Bool else { return nil }
                return .some(b)
            }
            guard let b0 = bit("bit0"), let b1 = bit("bit1"), b0 != nil || b1 != nil else {
                return logged(.text(400, "Missing or incorrectly formatted bits"), "bit0/bit1 are not booleans")
            }
            asked = [b0.map { "bit0=\($0 ? 1 : 0)" }, b1.map { "bit1=\($0 ? 1 : 0)" }].compactMap { $0 }.joined(separator: "; ")
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(identifier: "UTC")
            formatter.dateFormat = "yyyy-MM"
            let month = formatter.string(from: now)
            lock.withLock {
                let old = bitState[key]
                bitState[key] = (b0 ?? old?.bit0 ?? false, b1 ?? old?.bit1 ?? false, month)
            }
            return logged(Response(status: 200), "")
        }
    }

    private func nextDeviceCheckScripted() -> Scripted? {
        lock.withLock {
            guard var first = dcScripted.first else { return nil }
            first.count -= 1
            if first.count <= 0 { dcScripted.removeFirst() } else { dcScripted[0] = first }
            return first
        }
    }

    /// The key a receipt is about: base64 of SHA-256 of field 3's public key (the key id).
    static func keyID(_ receipt: AppAttestReceipt) -> String? {
        guard let cert = try? X509Certificate(der: receipt.attestedCertificate), let key = cert.p256PublicKey() else { return nil }
        return Base64.encode(SHA256.hash(key.x962))
    }

    // MARK: - /_sim/: the binary's controls

    /// `POST /_sim/metric {"metric":N[,"keyId":"…"]}`, `POST /_sim/no-data {"keyId":"…","on":true}`,
    /// `POST /_sim/answer {"status":429[,"retryAfter":S][,"count":N]}`, `GET /_sim/requests`; for
    /// DeviceCheck `POST /_sim/devicecheck/answer` (the same body) and `GET /_sim/devicecheck/requests`.
    private func control(_ r: HTTPMessage) -> Response {
        let body = (try? JSONSerialization.jsonObject(with: Data(r.body.isEmpty ? Array("{}".utf8) : r.body))) as? [String: Any]
        switch (r.method, r.target) {
        case ("GET", "/_sim/requests"):
            return .json(
                200,
                [
                    "requests": requests.map {
                        ["at": $0.atMillis, "keyId": $0.keyID ?? NSNull(), "status": $0.status, "reason": $0.reason] as [String: Any]
                    }
                ])
        case ("POST", "/_sim/metric"):
            guard let metric = (body?["metric"] as? NSNumber)?.int64Value, metric >= 0 else { return .json(400, ["error": "metric"]) }
            setMetric(metric, keyID: body?["keyId"] as? String)
            return .json(200, ["ok": true])
        case ("POST", "/_sim/no-data"):
            guard let key = body?["keyId"] as? String else { return .json(400, ["error": "keyId"]) }
            setNoData(body?["on"] as? Bool ?? true, keyID: key)
            return .json(200, ["ok": true])
        case ("GET", "/_sim/devicecheck/requests"):
            return .json(
                200,
                [
                    "requests": deviceCheckRequests.map {
                        [
                            "at": $0.atMillis, "endpoint": $0.endpoint, "deviceId": $0.deviceID ?? NSNull(), "status": $0.status,
                            "reason": $0.reason, "bits": $0.bits,
                        ] as [String: Any]
                    }
                ])
        case ("POST", "/_sim/devicecheck/answer"):
            guard let status = (body?["status"] as? NSNumber)?.intValue, (100...599).contains(status) else {
                return .json(400, ["error": "status"])
            }
            scriptDeviceCheck(
                Scripted(
                    status: status, retryAfter: (body?["retryAfter"] as? NSNumber)?.intValue,
                    count: (body?["count"] as? NSNumber)?.intValue ?? 1))
            return .json(200, ["ok": true])
        case ("POST", "/_sim/answer"):
            guard let status = (body?["status"] as? NSNumber)?.intValue, (100...599).contains(status) else {
                return .json(400, ["error": "status"])
            }
            script(
                Scripted(
                    status: status, retryAfter: (body?["retryAfter"] as? NSNumber)?.intValue,
                    count: (body?["count"] as? NSNumber)?.intValue ?? 1))
            return .json(200, ["ok": true])
        default:
            return .json(404, ["error": "no such control"])
        }
    }

    static func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 304: "Not Modified"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 429: "Too Many Requests"
        case 500: "Internal Server Error"
        case 503: "Service Unavailable"
        default: "Status"
        }
    }
}

/// A TLS session over a blocking socket (server side): ciphertext in from `recv`, out with `send`.
final class TLSSocket {
    let fd: Int32
    let session: TLSSession

    init(fd: Int32, session: TLSSession) {
        self.fd = fd
        self.session = session
    }

    private func flush() -> Bool {
        while session.pendingCiphertextCount > 0 {
            var failed = false
            session.sendCiphertext { bytes in
                let n = Glibc.send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
                if n <= 0 { failed = true }
                return max(0, n)
            }
            if failed { return false }
        }
        return true
    }

    /// Some plaintext, or nil at the end (closed, failed, timed out).
    func read() -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let r = buffer.withUnsafeMutableBytes { session.readPlaintext(into: $0) }
            guard flush() else { return nil }
            switch r {
            case .bytes(let n): return Array(buffer[0..<n])
            case .closed, .failed: return nil
            case .needMoreInput:
                let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                guard n > 0 else { return nil }
                buffer.withUnsafeBytes { session.feed(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            }
        }
    }

    func write(_ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let taken: Int
            do {
                taken = try bytes[offset...].withUnsafeBytes { try session.writePlaintext($0) }
            } catch {
                return false
            }
            offset += taken
            guard flush() else { return false }
        }
        return true
    }
}

/// A request read off a connection: the head and a Content-Length body.
struct HTTPMessage {
    var method: String
    var target: String
    var headers: [(String, String)]
    var body: [UInt8]

    func header(_ name: String) -> String? {
        headers.first { $0.0.caseInsensitiveCompare(name) == .orderedSame }?.1
    }

    /// The next request from `socket` (bytes past it stay in `buffer`), or nil at the end.
    static func readRequest(_ socket: TLSSocket, _ buffer: inout [UInt8]) -> HTTPMessage? {
        func headEnd() -> Int? {
            guard buffer.count >= 4 else { return nil }
            for i in 0...(buffer.count - 4) where buffer[i] == 13 && buffer[i + 1] == 10 && buffer[i + 2] == 13 && buffer[i + 3] == 10 {
                return i
            }
            return nil
        }
        var end = headEnd()
        while end == nil {
            guard buffer.count < 64 * 1024, let more = socket.read() else { return nil }
            buffer += more
            end = headEnd()
        }
        let lines = String(decoding: buffer[0..<end!], as: UTF8.self).components(separatedBy: "\r\n")
        buffer.removeFirst(end! + 4)
        let start = lines[0].split(separator: " ")
        guard start.count == 3 else { return nil }
        var headers: [(String, String)] = []
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { return nil }
            headers.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        var message = HTTPMessage(method: String(start[0]), target: String(start[1]), headers: headers, body: [])
        let length = Int(message.header("Content-Length") ?? "0") ?? -1
        guard length >= 0, length <= 1 << 20 else { return nil }
        while buffer.count < length {
            guard let more = socket.read() else { return nil }
            buffer += more
        }
        message.body = Array(buffer[0..<length])
        buffer.removeFirst(length)
        return message
    }
}
