import Foundation
import Glibc

/// One HTTP/1.1 request on a fresh loopback connection (`Connection: close`), read to EOF: for
/// tests that need request and response headers without spawning curl per request.
public struct HTTPCall: Sendable {
    public let status: Int
    /// Lowercased names.
    public let headers: [String: String]
    public let body: String

    public var json: [String: Any]? { (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any] }
    /// `json["error"]` of a refusal.
    public var error: String? { json?["error"] as? String }

    /// `host`: the Host field (default `127.0.0.1:PORT`). `source`: the local address to connect from
    /// (e.g. 127.0.0.2: another client).
    public static func send(
        port: UInt16, method: String, target: String, headers: [(String, String)] = [], body: [UInt8] = [], host: String? = nil,
        source: String? = nil
    ) throws -> HTTPCall {
        let client = try LoopbackClient(port: port, source: source)
        defer { client.close() }
        var head = "\(method) \(target) HTTP/1.1\r\nHost: \(host ?? "127.0.0.1:\(port)")\r\nConnection: close\r\n"
        for (k, v) in headers { head += "\(k): \(v)\r\n" }
        if !body.isEmpty || method == "POST" || method == "PUT" { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        client.send(Array(head.utf8) + body)
        var raw: [UInt8] = []
        while true {
            let chunk = client.receiveSome()
            if chunk.isEmpty { break }
            raw += chunk
        }
        guard let split = raw.firstRange(of: Array("\r\n\r\n".utf8)) else {
            throw HTTPCallError(
                "\(method) \(target) on port \(port): \(raw.isEmpty ? "no answer (closed or reset, errno \(client.lastErrno))" : "no complete head in \(raw.count) bytes: \(String(decoding: raw.prefix(200), as: UTF8.self))")"
            )
        }
        let headText = String(decoding: raw[..<split.lowerBound], as: UTF8.self)
        var lines = headText.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else {
            throw HTTPCallError("\(method) \(target): bad status line \(headText.prefix(100))")
        }
        var fields: [String: String] = [:]
        for l in lines {
            guard let c = l.firstIndex(of: ":") else { continue }
            fields[l[..<c].lowercased()] = l[l.index(after: c)...].trimmingCharacters(in: .whitespaces)
        }
        return HTTPCall(status: status, headers: fields, body: String(decoding: raw[split.upperBound...], as: UTF8.self))
    }

    /// The port of a `GatewayProcess` listener (by name, or "admin").
    public static func port(_ gw: GatewayProcess, _ listener: String) -> UInt16 {
        UInt16(gw.addresses[listener]?.split(separator: ":").last ?? "0") ?? 0
    }
}

public struct HTTPCallError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
