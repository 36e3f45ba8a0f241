import Foundation
import GatewayCrypto
@_spi(Testing) import GatewayHTTP
import Testing

@testable import GatewayProxy

/// The proxy layer's errors (`ProxyError`): one table of codes and statuses, the codec's parse
/// errors wrapped, and one answer shape (`ErrorResponse`).
@Suite("Proxy errors: one table, one answer shape")
struct ProxyErrorTests {
    @Test("codes are unique; a request the codec cannot read answers with its kind as the code")
    func table() {
        let codes = ProxyError.allCases.map(\.code)
        #expect(Set(codes).count == codes.count)
        for kind in HTTPParseError.Kind.allCases where kind != .badStatusLine {
            #expect(ProxyError.request(kind).code == kind.rawValue)
            #expect(ProxyError.allCases.contains(.request(kind)))
        }
        #expect(ProxyError.request(.requestLineTooLong).status == 414)
        #expect(ProxyError.request(.headersTooLarge).status == 431 && ProxyError.request(.tooManyHeaders).status == 431)
        #expect(ProxyError.request(.unsupportedTransferCoding).status == 501)
        #expect(ProxyError.request(.unsupportedVersion).status == 505)
        #expect(ProxyError.request(.badHeader).status == 400 && ProxyError.request(.badHost).status == 400)
        #expect(ProxyError.clientClosed.status == nil && ProxyError.streamReset.status == nil)
    }

    @Test("a failed acquire answers as its failure says")
    func acquireFailures() {
        #expect(UpstreamFailure.connectFailed("x").proxyError == .upstreamUnavailable)
        #expect(UpstreamFailure.connectTimeout.proxyError == .upstreamConnectTimeout)
        #expect(UpstreamFailure.poolExhausted.proxyError == .upstreamBusy)
        #expect(UpstreamFailure.closed.proxyError == .upstreamClosed)
        #expect(UpstreamFailure.tls("x").proxyError == .upstreamTLS)
        #expect(ProxyError.upstreamBusy.status == 503 && ProxyError.upstreamConnectTimeout.status == 504)
    }

    @Test("one shape: error, then action and requestId when there are, then the extra members")
    func shape() throws {
        let plain = ProxyError.bodyTooLarge.response()
        #expect(plain.status == 413 && plain.headers["Content-Type"] == "application/json")
        #expect(String(decoding: plain.body, as: UTF8.self) == "{\"error\":\"body_too_large\"}\n")
        #expect(plain.headers[ErrorResponse.requestIDField] == nil)
        let full = ErrorResponse.make(
            status: 429, code: "rate_limited", action: "retry_later", requestId: "r1",
            extra: [("detail", .string("a \"quoted\" word")), ("retryAfter", .int(3))],
            headers: HTTPFields([("Retry-After", "3")]))
        #expect(
            String(decoding: full.body, as: UTF8.self)
                == "{\"error\":\"rate_limited\",\"action\":\"retry_later\",\"requestId\":\"r1\",\"detail\":\"a \\\"quoted\\\" word\",\"retryAfter\":3}\n"
        )
        #expect(full.headers.map(\.name) == ["X-Request-Id", "Retry-After", "Content-Type"])
        let withID = ProxyError.upstreamTimeout.response(requestId: "abc")
        #expect(withID.headers["X-Request-Id"] == "abc" && String(decoding: withID.body, as: UTF8.self).contains("\"requestId\":\"abc\""))
    }

    @Test("plain HTTP on a TLS port gets https_required as the HTTP/1.1 connection writes a closing answer")
    func httpsRequired() {
        let r = ProxyError.httpsRequired.response()
        var fields = r.headers
        fields.set("Content-Length", String(r.body.count))
        fields.set("Connection", "close")
        let expected = HTTP1Serializer.responseHead(status: r.status, headers: fields) + r.body
        #expect(TLSSession.plainHTTPRejection == expected, "\(String(decoding: expected, as: UTF8.self))")
    }
}
