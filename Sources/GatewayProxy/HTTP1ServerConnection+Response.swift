import GatewayHTTP
import GatewayIO

// The response side of `HTTP1ServerConnection`: local answers, failures, the access line, and the
// connection as the host of its `UpstreamExchange` (the upstream's response written for an HTTP/1.1
// client).
extension HTTP1ServerConnection {
    /// A local answer. With `close` (parse errors, limits, failed exchanges; and any answer to a
    /// request whose head could not be read) it says `Connection: close`, carries its body whatever
    /// the method, and the connection closes after it.
    func writeLocal(_ r: LocalResponse, close: Bool = false, error: ProxyError? = nil) {
        if close || !hasHead { closeAfterResponse = true }
        // 7. respond
        var fields = exchange.localFields(r)
        if closeAfterResponse || draining { fields.set("Connection", "close") }
        responseHeadSent = true
        downstream.write { HTTP1Serializer.appendResponseHead(status: r.status, headers: fields, to: &$0) }
        if close || !hasHead || (exchange.method != "HEAD" && r.status != 204 && r.status != 304) {
            downstream.write(r.body)
            exchange.responseBytes += r.body.count
        }
        finishExchange(error: error)
    }

    /// The exchange failed. Before the response head, an error with a status is answered (then the
    /// connection closes); otherwise the client's response is cut short: the connection closes
    /// without more. Either way `error` is the exchange's in the access log and metrics.
    func fail(_ error: ProxyError) {
        guard phase != .closed else { return }
        upstreamExchange.stop()
        if !responseHeadSent, error.status != nil {
            writeLocal(error.response(requestId: exchange.requestID.text), close: true, error: error)
            return
        }
        logExchange(error: error)
        upstreamExchange.end()
        cancelTimer()
        phase = .closed
        downstream.close()
    }

    /// 8. record
    func logExchange(error: ProxyError?) {
        let version: StaticString = requestMinor == 0 ? "HTTP/1.0" : "HTTP/1.1"
        guard hasHead else {
            return exchange.finish(
                error: error, upstream: upstreamExchange, peerHost: peerHost, protocolName: "http1", httpVersion: version,
                fields: LoggedFields())
        }
        // Host, User-Agent and Referer are read from the head's bytes during the call, not copied.
        let h = head
        let extras = headExtras
        headBytes.with { buf in
            exchange.finish(
                error: error, upstream: upstreamExchange, peerHost: peerHost, protocolName: "http1", httpVersion: version,
                fields: LoggedFields.of(h, extras, buf))
        }
    }
}

// MARK: - The upstream exchange's host

extension HTTP1ServerConnection: UpstreamExchangeHost {
    func writeUpstreamHead(_ forward: Forward, framing: BodyFraming, to out: inout HeadWriter) {
        let client = downstream.peer == nil ? "unknown" : peerHost
        let h = head
        headBytes.with { buf in
            forward.writeUpstreamHead(
                h, buf, client: client, proto: scheme, trustedPeer: peerTrusted, requestID: exchange.requestID, framing: framing,
                dropFoldableNames: limits.dropFoldableNames, to: &out)
        }
    }

    func upstreamRequestDidStart() {
        if exchange.bodyTarget != .upstream || bodyDone {
            phase = .awaitingResponse
            if exchange.bodyTarget == .upstream { upstreamExchange.requestBodyDidEnd(self) }
            return
        }
        sendContinueIfExpected(head)
        phase = .readingBody
        upstreamExchange.arm(.body, limits.bodyTimeoutMillis, self)
        downstream.resumeReading()
        pumpRequestBody()
    }

    func requestAnsweredEarly() {
        // Answered early: the body stops here; the connection cannot be reused (nor the upstream one).
        closeAfterResponse = true
        bodyDone = true
    }

    func sendResponseHead(_ r: HTTPResponseHeadLines, from buf: UnsafeRawBufferPointer) -> Bool {
        (chunkedDownstream, closeAfterResponse) = DownstreamResponseHead.sendHTTP1(
            r, from: buf, forward: upstreamExchange.forward, requestMinor: requestMinor, close: closeAfterResponse || draining,
            requestID: exchange.requestID, to: downstream)
        exchange.responseStatus = r.status
        responseHeadSent = true
        phase = .streamingResponse
        return true
    }

    func sendResponseBody(_ data: UnsafeRawBufferPointer) -> Bool {
        exchange.responseBytes += data.count
        if chunkedDownstream {
            downstream.write { HTTP1Serializer.appendChunk(data, to: &$0) }
        } else {
            // Head (queued) and body leave in one send, the body without a copy when the socket takes it.
            downstream.writeThrough(data)
        }
        return true
    }

    var downstreamIsFull: Bool { downstream.outboundBytes > limits.highWaterMark }

    func responseDidComplete() {
        if chunkedDownstream { downstream.write(HTTP1Serializer.lastChunk) }
        finishExchange(error: nil)
    }

    func exchangeDidFail(_ error: ProxyError) { fail(error) }

    func scheduleTimerCheck(at due: Int64) {
        if due < timerDue { scheduleTimerCheck(at: due, now: loop.timers.nowMillis) }
    }
}
