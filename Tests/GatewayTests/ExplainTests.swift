import AppAttest
import Foundation
import GatewayPolicy
import GatewayProxy
import Synchronization
import Testing

@testable import Gateway

private func object(_ text: String) -> [String: Any]? {
    (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
}

@Suite("explain: the status recorded is the status sent; what an entry keeps, and for how long")
struct ExplainTests {
    static let summary = RequestSummary(
        method: "POST", target: "/api/pay?session=s3cr3t&card=4111111111111111", peer: "192.0.2.7", requestID: "")

    @Test("every code, on a protected route and on the endpoints: explain's status is the HTTP status sent, as the contract says")
    func statusAgreesForEveryCode() throws {
        let contract = try String(
            contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("docs/client-contract.md"), encoding: .utf8)
        let log = ExplainLog()
        for error in GateError.allCases {
            #expect(contract.contains("`\(error.code)`"), "docs/client-contract.md does not list \(error.code)")
            for surface in RefusalSurface.allCases {
                let e = Explanation(step: "headers", error: error, fields: [("detail", "d")])
                let response = Refusals.respond(
                    e, surface: surface, route: surface == .route ? "purchase" : "attest_register",
                    mode: surface == .route ? "enforce" : "endpoint", about: Self.summary, detail: surface == .endpoint, log: log)
                // The contract: the endpoints answer 400 for bad input; a protected route answers 401
                // for every refusal of the request itself (403 for policy, 503 for the store).
                let expected = surface == .route && error.status == 400 ? 401 : error.status
                #expect(response.status == expected, "\(error) on \(surface)")
                let id = try #require(response.headers[AttestHeaders.requestID])
                let entry = try #require(log.entry(id))
                #expect(entry.status == response.status, "\(error) on \(surface): recorded \(entry.status), sent \(response.status)")
                let shown = try #require(object(ExplainLog.json(entry).description))
                #expect(shown["status"] as? Int == response.status, "\(error) on \(surface)")
                #expect(shown["error"] as? String == error.code)
                #expect(shown["verdict"] as? String == "refused", "\(error) on \(surface)")
                let body = try #require(object(String(decoding: response.body, as: UTF8.self)))
                #expect(body["requestId"] as? String == id)
                #expect(body["error"] as? String == error.code)
            }
        }
        #expect(GateError.malformed.status(on: .route) == 401 && GateError.malformed.status(on: .endpoint) == 400)
    }

    @Test("query values are redacted, names kept; bare items and fragments too")
    func queryRedaction() {
        let cases: [(String, String)] = [
            ("/api/pay?session=s3cr3t&card=4111111111111111", "/api/pay?session=<redacted>&card=<redacted>"),
            ("/api/pay", "/api/pay"),
            ("/api/pay?", "/api/pay?"),
            ("/api/pay?empty=&flag", "/api/pay?empty=&<redacted>"),
            ("/a?x=1&&y=2", "/a?x=<redacted>&&y=<redacted>"),
            ("/a?x=a=b", "/a?x=<redacted>"),
            ("/a?x=1#frag", "/a?x=<redacted>#<redacted>"),
            ("/a#frag?x=1", "/a#<redacted>"),
            ("http://a.example/p?token=abc", "http://a.example/p?token=<redacted>"),
            ("/é?ü=ß", "/é?ü=<redacted>"),
        ]
        for (target, expected) in cases { #expect(Explanation.redactQuery(target) == expected, "\(target)") }
    }

    @Test("an entry keeps the redacted target, the status, the details bounded and scrubbed; never values of the query")
    func entryContents() throws {
        let log = ExplainLog()
        var e = Explanation(step: "headers", error: .malformed)
        e.add("detail", "assertion: duplicate map key h'0a1b2c3d4e5f60718293a4b5c6d7e8f9…' and h'00ff'")
        e.add("long", String(repeating: "x", count: 5000))
        for i in 0..<40 { e.add("f\(i)", String(repeating: "y", count: 200)) }
        let id = log.record(
            e, id: "", status: 401, route: "purchase", mode: "enforce", method: String(repeating: "M", count: 500),
            target: Self.summary.target + String(repeating: "&k=v", count: 500), peer: "192.0.2.7")
        let entry = try #require(log.entry(id))
        let json = ExplainLog.json(entry).description
        #expect(!json.contains("s3cr3t") && !json.contains("4111111111111111"))
        #expect(json.contains("session=<redacted>&card=<redacted>"))
        #expect(!json.contains("0a1b2c3d") && !json.contains("00ff"))
        #expect(json.contains("h'…'"))
        #expect(entry.target.utf8.count <= ExplainLog.maxValueBytes)
        #expect(entry.method.utf8.count <= 32)
        let details = entry.explanation.fields
        #expect(details.allSatisfy { $0.1.utf8.count <= ExplainLog.maxValueBytes })
        #expect(details.reduce(0) { $0 + $1.0.utf8.count + $1.1.utf8.count } <= ExplainLog.maxDetailBytes + 64)
        #expect(details.last?.0 == "truncated_fields")
        #expect(json.utf8.count < 4096, "one entry is at most a few KiB: \(json.utf8.count)")
        let shown = try #require(object(json))
        #expect(shown["status"] as? Int == 401)
        #expect(shown["client"] as? String == "192.0.2.7")
    }

    @Test("kept under the exchange's request id; an id used twice names its newest entry, also once the older one is dropped")
    func keyedByRequestID() throws {
        let log = ExplainLog(capacity: 3)
        let e = Explanation(step: "headers", error: .assertionMissing)
        #expect(log.record(e, id: "req-1", status: 401, route: "r", mode: "enforce", method: "GET", target: "/a", peer: nil) == "req-1")
        #expect(log.record(e, id: "req-1", status: 401, route: "r", mode: "enforce", method: "GET", target: "/b", peer: nil) == "req-1")
        #expect(log.entry("req-1")?.target == "/b")
        // The first "/a" entry is the oldest: pushed out, it must not take the id's newest entry with it.
        _ = log.record(e, id: "req-2", status: 401, route: "r", mode: "enforce", method: "GET", target: "/c", peer: nil)
        _ = log.record(e, id: "req-3", status: 401, route: "r", mode: "enforce", method: "GET", target: "/d", peer: nil)
        #expect(log.count == 3)
        #expect(log.entry("req-1")?.target == "/b")
        #expect(log.entry("req-2")?.target == "/c")
        let generated = log.record(e, id: "", status: 401, route: "r", mode: "enforce", method: "GET", target: "/e", peer: nil)
        #expect(generated.utf8.count == 15 && log.entry(generated)?.target == "/e")
    }

    @Test("bounded in count (oldest first) and in age (nothing older than the retention is served)")
    func bounds() throws {
        let now = Mutex<Int64>(1_000_000)
        let log = ExplainLog(capacity: 3, maxAgeMillis: 60_000, clock: { now.withLock { $0 } })
        let e = Explanation(step: "headers", error: .assertionMissing)
        var ids: [String] = []
        for _ in 0..<5 {
            ids.append(log.record(e, id: "", status: 401, route: "r", mode: "enforce", method: "GET", target: "/", peer: nil))
            now.withLock { $0 += 1000 }
        }
        #expect(log.count == 3)
        #expect(log.entry(ids[0]) == nil && log.entry(ids[1]) == nil)
        #expect(log.recent(10).map(\.id) == [ids[4], ids[3], ids[2]])
        #expect(log.recent(2).map(\.id) == [ids[4], ids[3]])
        // ids[2] was recorded at 1_002_000: past the 60 s retention at 1_062_001.
        now.withLock { $0 = 1_062_001 }
        #expect(log.entry(ids[2]) == nil)
        #expect(log.recent(10).map(\.id) == [ids[4], ids[3]])
        now.withLock { $0 = 1_070_000 }
        #expect(log.recent(10).isEmpty && log.count == 0)
        // And it fills again after expiring everything (the ring wraps).
        let more = (0..<4).map { _ in log.record(e, id: "", status: 401, route: "r", mode: "enforce", method: "GET", target: "/", peer: nil)
        }
        #expect(log.recent(10).map(\.id) == more.reversed().prefix(3).map { $0 })
        #expect(ExplainLog.defaultCapacity == 4096 && ExplainLog.defaultMaxAgeMillis == 86_400_000)
    }
}
