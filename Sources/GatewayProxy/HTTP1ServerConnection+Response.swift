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
        var fields = r.headers
        fields.set("Content-Length", String(r.body.count))
        fields.set(RequestID.field, requestID.text)
        if closeAfterResponse || draining { fields.set("Connection", "close") }
        responseStatus = r.status
        responseVerdict = r.verdict
        responseHeadSent = true
        downstream.write { HTTP1Serializer.appendResponseHead(status: r.status, headers: fields, to: &$0) }
        if close || !hasHead || (method != "HEAD" && r.status != 204 && r.status != 304) {
            downstream.write(r.body)
            responseBytes += r.body.count
        }
        finishExchange(error: error)
    }

    /// The exchange failed. Before the response head, an error with a status is answered (then the
    /// connection closes); otherwise the client's response is cut short: the connection closes
    /// without more. Either way `error` is the exchange's in the access log and metrics.
    func fail(_ error: ProxyError) {
        guard phase != .closed else { return }
        exchange.stop()
        if !responseHeadSent, error.status != nil {
            writeLocal(error.response(requestId: requestID.text), close: true, error: error)
            return
        }
        logExchange(error: error)
        exchange.end()
        cancelTimer()
        phase = .closed
        downstream.close()
    }

    func logExchange(error: ProxyError?) {
        let now = EventLoop.monotonicNanos()
        var record = ExchangeRecord(
            route: routeName, method: method, target: target, status: responseStatus,
            requestBytes: requestBodyBytes, responseBytes: responseBytes, durationSeconds: Double(now - started) / 1e9,
            upstream: exchange.forward?.pool.target.name, upstreamSeconds: exchange.upstreamSeconds, peer: clientHost,
            error: error?.code, protocolName: "http1", requestID: requestID, httpVersion: requestMinor == 0 ? "HTTP/1.0" : "HTTP/1.1",
            verdict: exchange.forward?.verdict ?? responseVerdict)
        guard hasHead else { return router.exchangeDidFinish(record) }
        // Host, User-Agent and Referer are read from the head's bytes during the call, not copied.
        let h = head
        let extras = headExtras
        headBytes.with { buf in
            record.fields = LoggedFields.of(h, extras, buf)
            router.exchangeDidFinish(record)
        }
    }
}

// MARK: - The exchange's host

extension HTTP1ServerConnection: UpstreamExchangeHost {
    func writeUpstreamHead(_ forward: Forward, framing: BodyFraming, to out: inout HeadWriter) {
        let client = downstream.peer == nil ? "unknown" : peerHost
        let h = head
        headBytes.with { buf in
            forward.writeUpstreamHead(h, buf, client: client, proto: scheme, trustedPeer: peerTrusted, requestID: requestID, framing: framing,
                                      dropFoldableNames: limits.dropFoldableNames, to: &out)
        }
    }

    func upstreamRequestDidStart() {
        if bodyTarget == .buffer || bodyDone {
            phase = .awaitingResponse
            if bodyTarget == .upstream { exchange.requestBodyDidEnd(self) }
            return
        }
        sendContinueIfExpected(head)
        phase = .readingBody
        exchange.arm(.body, limits.bodyTimeoutMillis, self)
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
            r, from: buf, forward: exchange.forward, requestMinor: requestMinor, close: closeAfterResponse || draining,
            requestID: requestID, to: downstream)
        responseStatus = r.status
        responseHeadSent = true
        phase = .streamingResponse
        return true
    }

    func sendResponseBody(_ data: UnsafeRawBufferPointer) -> Bool {
        responseBytes += data.count
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
