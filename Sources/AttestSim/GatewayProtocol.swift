import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayWire

/// What the client data of an assertion covers (the route's `assertion.bind`).
public enum Binding: String, Sendable, CaseIterable {
    /// `challenge \n METHOD \n request-target \n hex(SHA256(body))`, then (version 2) `\n authority`.
    case request
    /// The body itself.
    case body

    /// The client data a device signs on such a route: the request form (challenge required) in
    /// `version` (the route's `assertion.client_data`), over `authority` already normalised
    /// (`RequestAuthority.normalize`), or the body.
    public func clientData(
        challenge: String?, method: String, target: String, body: [UInt8], version: ClientDataVersion = .v2,
        authority: String = ""
    ) -> [UInt8] {
        switch self {
        case .request:
            ClientData.forRequest(version, challenge: challenge ?? "", method: method, target: target, authority: authority, body: body)
        case .body: body
        }
    }
}

/// The Host a simulated device sends and, with client data version 2, signs: `--host`, or the
/// gateway's own `HOST[:PORT]`.
public struct RequestHost: Sendable, Equatable {
    /// The `Host` field value sent.
    public let value: String
    /// Its normal form, the client data's authority line (the simulator speaks http).
    public let authority: String

    public init(_ value: String) throws(AttestSimError) {
        guard let a = RequestAuthority.normalize(value, scheme: "http") else {
            throw .usage("--host must be HOST[:PORT] (a name, an IPv4 address or a bracketed IPv6 address), got \"\(value)\"")
        }
        self.value = value
        authority = a
    }

    /// The endpoint's own Host (always valid: parsed from --gateway).
    public init(endpoint: HTTPEndpoint) {
        value = endpoint.hostHeader
        authority = RequestAuthority.normalize(value, scheme: "http") ?? value.lowercased()
    }
}

/// The gateway's App Attest endpoints (header names: `AttestHeaders`).
public struct GatewayPaths: Sendable, Equatable {
    public var challenge: String
    public var register: String

    public init(challenge: String = "/v1/attest/challenge", register: String = "/v1/attest/register") {
        self.challenge = challenge
        self.register = register
    }

}

/// A challenge as the gateway issued it; its text is used exactly as received.
public struct IssuedChallenge: Sendable, Equatable {
    public let value: String
    /// RFC 3339 text, when the gateway sent it.
    public let expiresAt: String?

    public init(value: String, expiresAt: String?) {
        self.value = value
        self.expiresAt = expiresAt
    }

    /// `expiresAt` as a date (with or without fractional seconds); nil when absent or unparseable.
    public var expiryDate: Date? {
        guard let expiresAt else { return nil }
        let f = ISO8601DateFormatter()
        if let d = f.date(from: expiresAt) { return d }
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return f.date(from: expiresAt)
    }
}

/// What a challenge binds to (the optional JSON body of the challenge request).
public enum ChallengePurpose: String, Sendable {
    case register
    case assert
}

/// A refusal or acceptance as the gateway reports it: status and, for errors, `error` and `action`.
public struct Verdict: Sendable, Hashable, CustomStringConvertible {
    public let status: Int
    public let error: String?
    public let action: String?

    public init(status: Int, error: String?, action: String?) {
        self.status = status
        self.error = error
        self.action = action
    }

    public init(_ response: HTTPResponse) {
        let json = (200..<300).contains(response.status) ? nil : response.jsonObject
        self.init(status: response.status, error: json?["error"] as? String, action: json?["action"] as? String)
    }

    public var accepted: Bool { (200..<300).contains(status) }

    public var description: String { error.map { "\(status) \($0)" } ?? "\(status)" }
}

/// Builds the simulator's requests to the gateway. Pure: no I/O, so every byte can be unit-tested.
public enum GatewayRequests {
    /// `POST <challenge path>`, with `{"purpose":…,"keyId":…}` when a purpose or key is given.
    public static func challenge(paths: GatewayPaths, purpose: ChallengePurpose?, keyID: [UInt8]?) -> HTTPRequest {
        guard purpose != nil || keyID != nil else { return HTTPRequest(method: "POST", target: paths.challenge) }
        var o = JSONObject()
        if let purpose { o.set("purpose", purpose.rawValue) }
        if let keyID { o.set("keyId", Base64.encode(keyID)) }
        return HTTPRequest(
            method: "POST", target: paths.challenge, headers: [("Content-Type", "application/json")], body: Array(o.description.utf8))
    }

    /// `POST <register path>` with `{"keyId","attestation","challenge"}`.
    public static func register(paths: GatewayPaths, keyID: [UInt8], attestation: [UInt8], challenge: String) -> HTTPRequest {
        var o = JSONObject()
        o.set("keyId", Base64.encode(keyID))
        o.set("attestation", Base64.encode(attestation))
        o.set("challenge", challenge)
        return HTTPRequest(
            method: "POST", target: paths.register, headers: [("Content-Type", "application/json")], body: Array(o.description.utf8))
    }

    /// A protected request sent with `Host: host.value`: the device asserts over the client data of
    /// `binding` in `version` (signed for `signedAuthority`, by default `host.authority`; another value
    /// forges a request signed for another host) and the request carries the key id, the challenge
    /// (when given) and the assertion.
    public static func protected(
        device: SimulatedDevice, challenge: String?, method: String, target: String, body: [UInt8], binding: Binding,
        version: ClientDataVersion = .v2, host: RequestHost, signedAuthority: String? = nil, mutations: AssertionMutations = .none,
        account: String? = nil
    ) -> HTTPRequest {
        let clientData = binding.clientData(
            challenge: challenge, method: method, target: target, body: body, version: version,
            authority: signedAuthority ?? host.authority)
        let assertion = device.assert(clientDataHash: SHA256.hash(clientData), mutations: mutations)
        return signed(
            keyID: device.keyID, challenge: challenge, assertion: assertion, method: method, target: target, body: body, host: host,
            account: account)
    }

    /// A protected request with its three headers (either platform's assertion), the body's type,
    /// and with `account` the `X-Demo-Account` the demo upstream names as the key's account (`--account`).
    static func signed(
        keyID: [UInt8], challenge: String?, assertion: [UInt8], method: String, target: String, body: [UInt8], host: RequestHost,
        account: String?
    ) -> HTTPRequest {
        var headers: [(String, String)] = [(AttestHeaders.keyID, Base64.encode(keyID))]
        if let challenge { headers.append((AttestHeaders.challenge, challenge)) }
        headers.append((AttestHeaders.assertion, Base64.encode(assertion)))
        if !body.isEmpty { headers.append(("Content-Type", "application/octet-stream")) }
        if let account { headers.append(("X-Demo-Account", account)) }
        var request = HTTPRequest(method: method, target: target, headers: headers, body: body)
        request.host = host.value
        return request
    }

    /// The challenge of a 201 challenge response; nil when the response is not one.
    public static func parseChallenge(_ response: HTTPResponse) -> IssuedChallenge? {
        guard response.status == 201, let json = response.jsonObject, let c = json["challenge"] as? String, !c.isEmpty else {
            return nil
        }
        return IssuedChallenge(value: c, expiresAt: json["expiresAt"] as? String)
    }

    /// The next challenge a verified response carries.
    public static func nextChallenge(_ response: HTTPResponse) -> IssuedChallenge? {
        guard let c = response.header(AttestHeaders.nextChallenge), !c.isEmpty else { return nil }
        return IssuedChallenge(value: c, expiresAt: response.header(AttestHeaders.nextChallengeExpires))
    }
}

/// A device's conversation with the gateway over one client (one thread).
public final class GatewaySession {
    public let client: HTTPClient
    public let paths: GatewayPaths

    public init(client: HTTPClient, paths: GatewayPaths) {
        self.client = client
        self.paths = paths
    }

    /// Fetches a challenge; the response and, when it is a 201 with a challenge, that challenge.
    public func fetchChallenge(purpose: ChallengePurpose?, keyID: [UInt8]?) throws(HTTPClientError)
        -> (HTTPResponse, IssuedChallenge?)
    {
        let r = try client.send(GatewayRequests.challenge(paths: paths, purpose: purpose, keyID: keyID))
        return (r, GatewayRequests.parseChallenge(r))
    }

    /// Attests the device's key over `challenge` and registers it.
    public func register(device: SimulatedDevice, challenge: String) throws(AttestSimError) -> HTTPResponse {
        let request = try registration(device: device, challenge: challenge)
        do {
            return try client.send(request)
        } catch {
            throw .transport(error)
        }
    }

    /// The registration of the device's key attested over `challenge` (sent again as is after a 429).
    public func registration(device: SimulatedDevice, challenge: String) throws(AttestSimError) -> HTTPRequest {
        let attestation: [UInt8]
        do {
            attestation = try device.attest(clientDataHash: ClientData.registrationHash(challenge: challenge))
        } catch {
            throw .file("the CA cannot issue a credential certificate: \(error)")
        }
        return GatewayRequests.register(paths: paths, keyID: device.keyID, attestation: attestation, challenge: challenge)
    }

    /// Sends `request`; on `429` waits as the client contract says (`Retry-After` plus up to as much
    /// again at random, doubling after each further 429, at most `maxWait` seconds) and sends it
    /// again, at most `retries` times. `waited` counts the 429s waited out.
    public func sendHonouringRetryAfter(
        _ request: HTTPRequest, retries: Int = 4, maxWait: Double = 30, waited: inout Int
    ) throws(HTTPClientError) -> HTTPResponse {
        var attempt = 0
        while true {
            let r = try client.send(request)
            guard r.status == 429, attempt < retries else { return r }
            let retryAfter = Double(r.header("Retry-After").flatMap { Int($0) } ?? 1)
            let base = min(maxWait, max(1, retryAfter) * Double(1 << attempt))
            usleep(UInt32(min(maxWait, base + Double.random(in: 0...base)) * 1_000_000))
            waited += 1
            attempt += 1
        }
    }
}
