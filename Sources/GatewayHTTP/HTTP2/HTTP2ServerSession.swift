import CGatewayNGHTTP2

/// One HTTP/2 server connection over nghttp2's session API, as a pure codec: bytes in
/// (`receive`), events out (`HTTP2Event`), bytes to write pulled with `pullOutput`. No sockets, no
/// threads, no blocking: the event loop owns it (it is confined to the loop's queue, not Sendable)
/// and drives it from its edge-triggered readiness handlers. See docs/http2.md.
///
/// Flow control is honoured both ways. Request body bytes stay counted against the client's windows
/// until the consumer calls `consume(streamID:count:)` (automatic WINDOW_UPDATE is off), so a slow
/// upstream slows the client. Response bodies are appended to a per-stream buffer with
/// `sendResponseBody`; nghttp2 pulls from it as the client's windows allow, and `shouldPauseUpstream`
/// says when the buffer is above `HTTP2Settings.responseHighWater`.
public final class HTTP2ServerSession {
    public let settings: HTTP2Settings

    private var session: OpaquePointer!
    private var streams: [Int32: StreamState] = [:]

    /// The streams and the event list are moved out of their properties to be read or changed, so
    /// that every access to the properties is a plain move that the optimizer proves free of
    /// conflicts (no run-time exclusivity check per lookup). `withStreams` must not nest.
    @inline(__always)
    private func withStreams<R>(_ body: (inout [Int32: StreamState]) -> R) -> R {
        precondition(!streamsLent, "HTTP2ServerSession: nested use of the stream table")
        var table: [Int32: StreamState] = [:]
        swap(&table, &streams)
        streamsLent = true
        defer {
            streamsLent = false
            swap(&table, &streams)
        }
        return body(&table)
    }
    private var streamsLent = false

    @inline(__always)
    private func stream(_ id: Int32) -> StreamState? { withStreams { $0[id] } }

    /// A stream whose request was delivered and that is not closed, on a session still running: what
    /// every response call needs.
    private func openStream(_ id: Int32) throws(HTTP2SessionError) -> StreamState {
        guard !terminated, !fatal else { throw HTTP2SessionError(.sessionClosed, "the connection is closing") }
        guard let stream = stream(id), stream.delivered else { throw HTTP2SessionError(.unknownStream, "stream \(id) is not open") }
        return stream
    }
    private var events: [HTTP2Event] = []
    private let clock: () -> UInt64
    private var resetWindowStart: UInt64 = 0
    private var resetCount = 0
    /// Streams the application reset itself (not counted as client misbehaviour).
    private var applicationResets: Set<Int32> = []
    private var drain: DrainState = .none
    /// GOAWAY with an error was queued: nothing more is read or delivered.
    private var terminated = false
    /// The highest stream id a client HEADERS frame used (RFC 9113 §5.1.1: new stream ids only grow).
    private var highestClientStreamID: Int32 = 0
    /// nghttp2 reported a fatal error: the session is only good for flushing what is queued.
    private var fatal = false
    private var fatalFlushed = false
    /// The header list of the response being submitted (one buffer reused for every response).
    private var block = HTTP2HeaderBlock()
    /// The stream whose request header block is being decoded (saves a dictionary lookup per field).
    private var headerStream: StreamState?

    private enum DrainState { case none, noticeSent, goawaySent }
    private static let drainPingData: [UInt8] = Array("gwdrain!".utf8)

    final class StreamState {
        let id: Int32
        var fields: [HTTPFields.Field]
        var headerBytes = 0
        var tooLarge = false
        var delivered = false
        var rejected = false
        var requestEnded = false
        var unconsumed = 0
        var response: [UInt8] = []
        var responseStart = 0
        var responseSubmitted = false
        var bodyEnded = false
        var deferred = false
        var aboveHighWater = false
        /// `stopRequestAfterResponse`: RST_STREAM NO_ERROR once the response's END_STREAM is sent.
        var resetAfterResponse = false
        var buffered: Int { response.count - responseStart }
        /// Response body bytes framed into DATA so far (the stream's send progress).
        var sent = 0

        /// `fields` and `response` are moved out to be changed (see `withStreams`).
        func appendField(_ field: HTTPFields.Field) {
            var list: [HTTPFields.Field] = []
            swap(&list, &fields)
            list.append(field)
            swap(&list, &fields)
        }

        @inline(__always)
        func withResponse<R>(_ body: (inout [UInt8]) -> R) -> R {
            var bytes: [UInt8] = []
            swap(&bytes, &response)
            defer { swap(&bytes, &response) }
            return body(&bytes)
        }
        init(id: Int32) {
            self.id = id
            var list: [HTTPFields.Field] = []
            list.reserveCapacity(12)  // a typical request's fields, without regrowing
            fields = list
        }
    }

    /// Builds the session and queues the server's SETTINGS (and the connection window increase).
    /// `clock` gives monotonic nanoseconds for the rapid reset window (injected by tests).
    public init(
        settings: HTTP2Settings = HTTP2Settings(),
        clock: @escaping () -> UInt64 = HTTP2ServerSession.monotonicNanoseconds
    ) throws(HTTP2SessionError) {
        try settings.validate()
        self.settings = settings
        self.clock = clock
        self.resetWindowStart = clock()

        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else {
            throw HTTP2SessionError(.library, "nghttp2_session_callbacks_new failed")
        }
        defer { nghttp2_session_callbacks_del(callbacks) }
        Self.install(callbacks)

        var option: OpaquePointer?
        guard nghttp2_option_new(&option) == 0, let option else {
            throw HTTP2SessionError(.library, "nghttp2_option_new failed")
        }
        defer { nghttp2_option_del(option) }
        nghttp2_option_set_no_auto_window_update(option, 1)
        nghttp2_option_set_max_deflate_dynamic_table_size(option, settings.maxDeflateDynamicTableSize)
        nghttp2_option_set_max_continuations(option, settings.maxContinuations)
        nghttp2_option_set_max_outbound_ack(option, settings.maxOutboundAck)
        nghttp2_option_set_max_settings(option, settings.maxSettingsEntries)

        var s: OpaquePointer?
        let rv = nghttp2_session_server_new2(&s, callbacks, Unmanaged.passUnretained(self).toOpaque(), option)
        guard rv == 0, let s else { throw Self.libraryError(Int(rv), "nghttp2_session_server_new2") }
        session = s

        let entries: [(nghttp2_settings_id, UInt32)] = [
            (NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, settings.maxConcurrentStreams),
            (NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, settings.initialWindowSize),
            (NGHTTP2_SETTINGS_MAX_FRAME_SIZE, settings.maxFrameSize),
            (NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, settings.maxHeaderListSize),
            (NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, settings.headerTableSize),
            (NGHTTP2_SETTINGS_ENABLE_PUSH, 0),
        ]
        let iv = entries.map { nghttp2_settings_entry(settings_id: Int32($0.0.rawValue), value: $0.1) }
        let sv = nghttp2_submit_settings(s, UInt8(NGHTTP2_FLAG_NONE.rawValue), iv, iv.count)
        guard sv == 0 else { throw Self.libraryError(Int(sv), "nghttp2_submit_settings") }
        if settings.connectionWindowSize > 65535 {
            let wv = nghttp2_session_set_local_window_size(
                s, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, Int32(settings.connectionWindowSize))
            guard wv == 0 else { throw Self.libraryError(Int(wv), "nghttp2_session_set_local_window_size") }
        }
    }

    deinit {
        if let session { nghttp2_session_del(session) }
    }

    // MARK: - Bytes in, bytes out

    /// Feeds bytes read from the client (the connection preface first) and returns the events they
    /// caused, together with any left pending by earlier calls. Client errors never throw: they
    /// become RST_STREAM or GOAWAY in the output and `.connectionError` in the events.
    @discardableResult
    public func receive(_ bytes: UnsafeRawBufferPointer) -> [HTTP2Event] {
        feed(bytes)
        return takeEvents()
    }

    /// The same without taking the events (`takeEvents(into:)` then does, without an allocation).
    public func feed(_ bytes: UnsafeRawBufferPointer) {
        if !terminated, !fatal, let base = bytes.baseAddress, bytes.count > 0 {
            let rv = nghttp2_session_mem_recv(session, base.assumingMemoryBound(to: UInt8.self), bytes.count)
            if rv < 0 { failFatally(Int(rv)) }
        }
    }

    @discardableResult
    public func receive(_ bytes: [UInt8]) -> [HTTP2Event] { bytes.withUnsafeBytes { receive($0) } }

    /// Appends frames to write to `output` until nothing is left or at least `softLimit` bytes were
    /// added (a frame is never split), and returns how many bytes were added. Call it whenever the
    /// socket can take more and after every `receive` or submit. Events it causes (`.responseWritable`,
    /// `.streamClosed`) are returned by the next `takeEvents` or `receive`.
    @discardableResult
    public func pullOutput(into output: inout [UInt8], softLimit: Int = 256 * 1024) -> Int {
        if fatal {
            if fatalFlushed { return 0 }
            fatalFlushed = true
        }
        var total = 0
        while total < softLimit {
            var data: UnsafePointer<UInt8>?
            let n = nghttp2_session_mem_send(session, &data)
            if n < 0 {
                failFatally(n)
                break
            }
            guard n > 0, let data else { break }
            output.append(contentsOf: UnsafeBufferPointer(start: data, count: n))
            total += n
        }
        return total
    }

    /// Everything `pullOutput` has now (tests, small writes).
    public func pullOutput() -> [UInt8] {
        var out: [UInt8] = []
        pullOutput(into: &out, softLimit: .max)
        return out
    }

    /// Events caused since the last `receive`/`takeEvents` (by output, submits or timers).
    public func takeEvents() -> [HTTP2Event] {
        // Handed over, not copied: keeping the capacity of an array just returned would copy it.
        guard !events.isEmpty else { return [] }
        let taken = events
        events = []
        return taken
    }

    /// The same into the caller's empty array, which the session keeps for its next events: two
    /// arrays trade places, so steady traffic allocates no event array.
    public func takeEvents(into out: inout [HTTP2Event]) {
        precondition(out.isEmpty, "HTTP2ServerSession.takeEvents(into:): the array must be empty")
        swap(&events, &out)
    }

    /// Appends an event. The array is moved out of the property to be changed, so that the
    /// property's accesses are plain moves the optimizer proves free of conflicts (no run-time
    /// exclusivity check per event).
    private func emit(_ event: HTTP2Event) {
        var list: [HTTP2Event] = []
        swap(&list, &events)
        list.append(event)
        swap(&list, &events)
    }

    /// The client may still send something we want (else: finish writing, then close).
    public var wantsRead: Bool { !fatal && !terminated && nghttp2_session_want_read(session) != 0 }
    /// There are frames to write now.
    public var wantsWrite: Bool { fatal ? !fatalFlushed : nghttp2_session_want_write(session) != 0 }
    /// Nothing more to read or write: close the connection.
    public var isFinished: Bool {
        if fatal { return fatalFlushed }
        return nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0
    }

    /// Streams whose request was delivered and that are not closed yet.
    public var openStreamCount: Int { withStreams { $0.values.filter(\.delivered).count } }

    // MARK: - Responses

    /// Queues the response head for a delivered stream. Hop-by-hop fields are removed (RFC 9110
    /// §7.6.1, RFC 9113 §8.2.2), names lowercased, fields that HTTP/2 cannot carry dropped. With
    /// `endStream` the HEADERS frame ends the stream (no body); otherwise send the body with
    /// `sendResponseBody`. Status must be 200...999 (interim responses are not supported).
    public func submitResponse(streamID: Int32, status: Int, headers: HTTPFields, endStream: Bool)
        throws(HTTP2SessionError)
    {
        let stream = try openStream(streamID)
        guard !stream.responseSubmitted else {
            throw HTTP2SessionError(.responseAlreadySubmitted, "stream \(streamID) already has a response")
        }
        guard (200...999).contains(status) else { throw HTTP2SessionError(.invalidStatus, "status \(status)") }
        buildBlock(status: status, headers)
        try submit(stream, endStream: endStream)
    }

    /// Queues a response head whose fields `fields` appends to the session's header block (after
    /// `:status`), under the block's HTTP/2 rules: a proxy writes a response read from an upstream's
    /// bytes this way, without a string per field. Then as `submitResponse(streamID:status:headers:…)`.
    public func submitResponse(
        streamID: Int32, status: Int, endStream: Bool, fields: (inout HTTP2HeaderBlock) -> Void
    ) throws(HTTP2SessionError) {
        let stream = try openStream(streamID)
        guard !stream.responseSubmitted else {
            throw HTTP2SessionError(.responseAlreadySubmitted, "stream \(streamID) already has a response")
        }
        guard (200...999).contains(status) else { throw HTTP2SessionError(.invalidStatus, "status \(status)") }
        block.reset()
        block.appendStatus(status)
        fields(&block)
        try submit(stream, endStream: endStream)
    }

    /// :status first, then the fields HTTP/2 can carry: hop-by-hop removed, names lowercased,
    /// invalid names or values (which a strict upstream parser never lets through) dropped.
    private func buildBlock(status: Int, _ headers: HTTPFields) {
        block.reset()
        Self.fill(&block, status: status, headers)
    }

    private static func fill(_ block: inout HTTP2HeaderBlock, status: Int, _ headers: HTTPFields) {
        var fields = headers
        HopByHop.strip(&fields, isRequest: false)
        block.appendStatus(status)
        for f in fields { block.append(name: f.name, value: f.value) }
    }

    /// The header list `submitResponse` would send (tests).
    static func responseFields(status: Int, _ headers: HTTPFields) -> [(String, String)] {
        var block = HTTP2HeaderBlock()
        fill(&block, status: status, headers)
        return block.pairs
    }

    /// Sends an interim response (RFC 9110 §15.2: 100 Continue, 103 Early Hints) before the final one;
    /// 101 does not exist in HTTP/2 (RFC 9113 §8.6). Hop-by-hop fields are removed as for final heads.
    public func submitInterimResponse(streamID: Int32, status: Int, headers: HTTPFields = HTTPFields())
        throws(HTTP2SessionError)
    {
        let stream = try openStream(streamID)
        guard !stream.responseSubmitted else {
            throw HTTP2SessionError(.responseAlreadySubmitted, "stream \(streamID) already has a response")
        }
        guard (100...199).contains(status), status != 101 else { throw HTTP2SessionError(.invalidStatus, "status \(status)") }
        buildBlock(status: status, headers)
        let rv: Int32 = block.withNVArray { nva in
            nghttp2_submit_headers(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, nil, nva.baseAddress, nva.count, nil)
        }
        guard rv >= 0 else { throw Self.libraryError(Int(rv), "nghttp2_submit_headers") }
    }

    /// Appends response body bytes for `streamID` (after `submitResponse` without `endStream`);
    /// `endStream` ends the body once they are sent. Pausing the upstream is the caller's part:
    /// see `shouldPauseUpstream` and `.responseWritable`.
    public func sendResponseBody(streamID: Int32, _ bytes: UnsafeRawBufferPointer, endStream: Bool)
        throws(HTTP2SessionError)
    {
        let stream = try openStream(streamID)
        guard stream.responseSubmitted else { throw HTTP2SessionError(.noResponse, "stream \(streamID) has no response head") }
        guard !stream.bodyEnded else { throw HTTP2SessionError(.bodyAlreadyEnded, "stream \(streamID) body already ended") }
        let start = stream.responseStart
        let compact = start > 0 && start >= (stream.buffered + start) / 2
        stream.withResponse { r in
            if compact { r.removeFirst(start) }
            r.append(contentsOf: bytes)
        }
        if compact { stream.responseStart = 0 }
        if endStream { stream.bodyEnded = true }
        if stream.buffered >= settings.responseHighWater { stream.aboveHighWater = true }
        if stream.deferred {
            stream.deferred = false
            let rv = nghttp2_session_resume_data(session, streamID)
            if rv != 0, Self.isFatal(Int(rv)) { failFatally(Int(rv)) }
        }
    }

    public func sendResponseBody(streamID: Int32, _ bytes: [UInt8], endStream: Bool) throws(HTTP2SessionError) {
        let result: Result<Void, HTTP2SessionError> = bytes.withUnsafeBytes { b in
            do throws(HTTP2SessionError) {
                try sendResponseBody(streamID: streamID, b, endStream: endStream)
                return .success(())
            } catch { return .failure(error) }
        }
        try result.get()
    }

    /// Response bytes queued for `streamID` and not yet framed (0 for an unknown stream).
    @_spi(Testing) public func bufferedResponseBytes(streamID: Int32) -> Int { stream(streamID)?.buffered ?? 0 }

    /// What the stream's response has left to send and how much it sent so far: nil for a stream
    /// that is not open. `waiting` is response body bytes not yet framed (held by the client's
    /// flow-control windows, or by the transport's queue when output is not pulled); `sent` only grows.
    public func responseSendState(streamID: Int32) -> (waiting: Int, sent: Int)? {
        guard let s = stream(streamID), s.delivered else { return nil }
        return (s.buffered, s.sent)
    }

    /// True when the stream's response buffer is at or above the high-water mark (or the stream is
    /// gone): stop reading the upstream until `.responseWritable` (or `.streamClosed`).
    public func shouldPauseUpstream(streamID: Int32) -> Bool {
        guard let s = stream(streamID) else { return true }
        return s.buffered >= settings.responseHighWater
    }

    // MARK: - Request flow control, resets, shutdown

    /// Acknowledges `count` request body bytes of `streamID` as processed (forwarded upstream), which
    /// lets nghttp2 send WINDOW_UPDATE for the stream and the connection. Extra or late counts for a
    /// closed stream are ignored (its bytes were given back when it closed).
    public func consume(streamID: Int32, count: Int) {
        guard count > 0, let s = stream(streamID), s.unconsumed > 0 else { return }
        let n = min(count, s.unconsumed)
        s.unconsumed -= n
        let rv = nghttp2_session_consume(session, streamID, n)
        if rv != 0, Self.isFatal(Int(rv)) { failFatally(Int(rv)) }
    }

    /// Resets a stream (RST_STREAM `code`, e.g. `.cancel` or `.internalError` when the upstream
    /// failed mid-response, `.noError` to stop a request body after a complete early response).
    public func resetStream(streamID: Int32, code: HTTP2ErrorCode) {
        guard !terminated, !fatal, stream(streamID) != nil else { return }
        applicationResets.insert(streamID)
        _ = nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, code.rawValue)
    }

    /// For a response submitted before the request ended (a refusal from the head): once the
    /// response's last frame (END_STREAM) is sent, RST_STREAM NO_ERROR tells the client to stop
    /// sending the request body (RFC 9113 §8.1). Not at once: nghttp2 sends RST_STREAM before
    /// pending DATA, and the reset would cancel the response's body. DATA still arriving meanwhile
    /// is the consumer's to `consume` (not to keep); after the reset nghttp2 drops it. Nothing
    /// happens if the request ends first.
    public func stopRequestAfterResponse(streamID: Int32) {
        guard let s = stream(streamID), s.delivered, !s.requestEnded else { return }
        s.resetAfterResponse = true
    }

    /// Graceful shutdown (RFC 9113 §6.8), first step: GOAWAY with the maximum stream id and a PING.
    /// When the PING's acknowledgement arrives (one round trip, so requests already in flight are
    /// counted), the final GOAWAY with the last processed stream id is sent by itself; streams at or
    /// below it finish, then `isFinished` becomes true. `finishDrain()` sends the final GOAWAY at once.
    public func beginDrain() {
        guard drain == .none, !terminated, !fatal else { return }
        drain = .noticeSent
        _ = nghttp2_submit_shutdown_notice(session)
        Self.drainPingData.withUnsafeBufferPointer { p in
            _ = nghttp2_submit_ping(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), p.baseAddress)
        }
    }

    /// Sends the final GOAWAY (NO_ERROR, last processed stream id) if not sent yet.
    public func finishDrain() {
        guard drain != .goawaySent, !terminated, !fatal else { return }
        drain = .goawaySent
        _ = nghttp2_submit_goaway(
            session, UInt8(NGHTTP2_FLAG_NONE.rawValue), nghttp2_session_get_last_proc_stream_id(session),
            HTTP2ErrorCode.noError.rawValue, nil, 0)
    }

    /// Ends the connection now with GOAWAY `code` (e.g. an idle timeout with `.noError`): after
    /// `pullOutput` has given the GOAWAY, `isFinished` is true. Delivered streams get `.streamClosed`.
    public func terminate(code: HTTP2ErrorCode, detail: String) {
        guard !terminated, !fatal else { return }
        terminated = true
        _ = nghttp2_session_terminate_session(session, code.rawValue)
        if code != .noError { emit(.connectionError(code: code, detail: detail)) }
        abandonStreams(code)
    }

    public static func monotonicNanoseconds() -> UInt64 {
        let (seconds, attoseconds) = clockOrigin.duration(to: .now).components
        return UInt64(seconds) &* 1_000_000_000 &+ UInt64(attoseconds / 1_000_000_000)
    }

    private static let clockOrigin = ContinuousClock.now

    // MARK: - Internals

    /// Submits the response head in `block`.
    private func submit(_ stream: StreamState, endStream: Bool) throws(HTTP2SessionError) {
        let session = self.session
        let rv: Int32 = block.withNVArray { nva in
            if endStream {
                return nghttp2_submit_response(session, stream.id, nva.baseAddress, nva.count, nil)
            }
            var provider = nghttp2_data_provider()
            provider.read_callback = { _, streamID, buf, length, flags, _, userData in
                HTTP2ServerSession.from(userData).readResponse(streamID, buf!, length, flags!)
            }
            return nghttp2_submit_response(session, stream.id, nva.baseAddress, nva.count, &provider)
        }
        guard rv == 0 else { throw Self.libraryError(Int(rv), "nghttp2_submit_response") }
        stream.responseSubmitted = true
        if endStream { stream.bodyEnded = true }
    }

    private func readResponse(
        _ streamID: Int32, _ buf: UnsafeMutablePointer<UInt8>, _ length: Int, _ flags: UnsafeMutablePointer<UInt32>
    ) -> Int {
        guard let s = stream(streamID) else { return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue) }
        let n = min(length, s.buffered)
        if n > 0 {
            let start = s.responseStart
            let drained = s.withResponse { r in
                r.withUnsafeBufferPointer { src in buf.update(from: src.baseAddress! + start, count: n) }
                if start + n == r.count {
                    r.removeAll(keepingCapacity: r.capacity <= 256 * 1024)
                    return true
                }
                return false
            }
            s.responseStart = drained ? 0 : start + n
            s.sent &+= n
        }
        if s.buffered == 0 {
            if s.bodyEnded {
                flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue
            } else if n == 0 {
                s.deferred = true
                return Int(NGHTTP2_ERR_DEFERRED.rawValue)
            }
        }
        if s.aboveHighWater, s.buffered < settings.responseHighWater {
            s.aboveHighWater = false
            emit(.responseWritable(streamID: streamID))
        }
        return n
    }

    /// A stream reset early by the client, or reset by us because of a client error (RFC 9113 §8.1.1,
    /// "MadeYouReset"): too many within the window ends the connection (CVE-2023-44487).
    private func noteReset() {
        let now = clock()
        if now &- resetWindowStart >= settings.resetWindowNanoseconds {
            resetWindowStart = now
            resetCount = 0
        }
        resetCount += 1
        if resetCount > settings.maxResetsPerWindow, !terminated {
            terminate(
                code: .enhanceYourCalm,
                detail:
                    "rapid reset: more than \(settings.maxResetsPerWindow) streams reset within \(settings.resetWindowNanoseconds / 1_000_000) ms"
            )
        }
    }

    private func abandonStreams(_ code: HTTP2ErrorCode) {
        for id in withStreams({ $0.keys.sorted() }) {
            guard let s = stream(id), s.delivered else { continue }
            s.delivered = false
            s.rejected = true
            emit(.streamClosed(streamID: id, code: code))
        }
    }

    private func failFatally(_ rv: Int) {
        guard !fatal else { return }
        let code: HTTP2ErrorCode =
            switch Int32(rv) {
            case NGHTTP2_ERR_FLOODED.rawValue, NGHTTP2_ERR_TOO_MANY_CONTINUATIONS.rawValue: .enhanceYourCalm
            case NGHTTP2_ERR_BAD_CLIENT_MAGIC.rawValue: .protocolError
            default: .internalError
            }
        let detail = String(cString: nghttp2_strerror(Int32(rv)))
        if !terminated {
            // Queue a GOAWAY saying why, if the session can still frame one; it is flushed once.
            _ = nghttp2_session_terminate_session(session, code.rawValue)
            terminated = true
            emit(.connectionError(code: code, detail: detail))
            abandonStreams(code)
        }
        fatal = true
    }

    private static func isFatal(_ rv: Int) -> Bool { nghttp2_is_fatal(Int32(rv)) != 0 }

    private static func libraryError(_ rv: Int, _ call: String) -> HTTP2SessionError {
        HTTP2SessionError(.library, "\(call): \(String(cString: nghttp2_strerror(Int32(rv))))")
    }

    fileprivate static func from(_ userData: UnsafeMutableRawPointer?) -> HTTP2ServerSession {
        Unmanaged<HTTP2ServerSession>.fromOpaque(userData!).takeUnretainedValue()
    }

    // MARK: - nghttp2 callbacks

    private static func install(_ cbs: OpaquePointer) {
        nghttp2_session_callbacks_set_on_begin_frame_callback(cbs) { _, hd, userData in
            HTTP2ServerSession.from(userData).onBeginFrame(hd!.pointee)
        }
        nghttp2_session_callbacks_set_on_begin_headers_callback(cbs) { _, frame, userData in
            HTTP2ServerSession.from(userData).onBeginHeaders(frame!.pointee)
        }
        nghttp2_session_callbacks_set_on_header_callback(cbs) { _, frame, name, nameLen, value, valueLen, _, userData in
            HTTP2ServerSession.from(userData).onHeader(frame!.pointee, name!, nameLen, value!, valueLen)
        }
        // Header fields nghttp2 would silently drop (invalid characters) make the request malformed.
        nghttp2_session_callbacks_set_on_invalid_header_callback(cbs) { _, _, _, _, _, _, _, _ in
            NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue
        }
        nghttp2_session_callbacks_set_on_frame_recv_callback(cbs) { _, frame, userData in
            HTTP2ServerSession.from(userData).onFrameRecv(frame!.pointee)
        }
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs) { _, _, streamID, data, len, userData in
            HTTP2ServerSession.from(userData).onData(streamID, data!, len)
        }
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs) { _, streamID, code, userData in
            HTTP2ServerSession.from(userData).onStreamClose(streamID, code)
        }
        nghttp2_session_callbacks_set_on_frame_send_callback(cbs) { _, frame, userData in
            HTTP2ServerSession.from(userData).onFrameSend(frame!.pointee)
        }
    }

    /// RFC 9113 §5.1.1: a client's new stream id must exceed every id it used before; a HEADERS frame
    /// on a lower id that is not an open stream (trailers are) is a connection error PROTOCOL_ERROR.
    /// nghttp2 ignores such a frame silently, so the check is made on the frame header.
    private func onBeginFrame(_ hd: nghttp2_frame_hd) -> Int32 {
        guard !terminated, hd.type == UInt8(NGHTTP2_HEADERS.rawValue), hd.stream_id > 0, hd.stream_id % 2 == 1 else { return 0 }
        if hd.stream_id > highestClientStreamID {
            highestClientStreamID = hd.stream_id
        } else if stream(hd.stream_id) == nil, nghttp2_session_find_stream(session, hd.stream_id) == nil {
            terminate(
                code: .protocolError,
                detail: "HEADERS on stream \(hd.stream_id), lower than stream \(highestClientStreamID) already used (RFC 9113 §5.1.1)")
        }
        return 0
    }

    private func onBeginHeaders(_ frame: nghttp2_frame) -> Int32 {
        guard !terminated, frame.hd.type == UInt8(NGHTTP2_HEADERS.rawValue),
            frame.headers.cat == NGHTTP2_HCAT_REQUEST
        else { return 0 }
        let s = StreamState(id: frame.hd.stream_id)
        withStreams { $0[frame.hd.stream_id] = s }
        headerStream = s
        return 0
    }

    private func onHeader(
        _ frame: nghttp2_frame, _ name: UnsafePointer<UInt8>, _ nameLen: Int, _ value: UnsafePointer<UInt8>, _ valueLen: Int
    ) -> Int32 {
        let id = frame.hd.stream_id
        let found: StreamState?
        if let h = headerStream, h.id == id { found = h } else { found = stream(id) }
        guard let s = found, !s.rejected else { return 0 }
        s.headerBytes += nameLen + valueLen + 32
        if s.headerBytes > Int(settings.maxHeaderListSize) {
            // Keep decoding (the HPACK state must stay in sync) but keep nothing: answered 431.
            s.tooLarge = true
            s.fields = []
            return 0
        }
        guard !s.tooLarge, frame.headers.cat == NGHTTP2_HCAT_REQUEST else { return 0 }  // trailers: not passed on
        s.appendField(HTTPFields.Field(latin1String(name, nameLen), latin1String(value, valueLen)))
        return 0
    }

    private func onFrameRecv(_ frame: nghttp2_frame) -> Int32 {
        let id = frame.hd.stream_id
        let endStream = frame.hd.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
        switch UInt32(frame.hd.type) {
        case NGHTTP2_HEADERS.rawValue:
            let cached = headerStream
            headerStream = nil
            guard !terminated, let s = cached?.id == id ? cached : stream(id), !s.rejected else { return 0 }
            if endStream { s.requestEnded = true }
            if frame.headers.cat == NGHTTP2_HCAT_REQUEST {
                if s.tooLarge {
                    // Answered by the loop (the JSON `headers_too_large`, recorded as any refusal).
                    s.fields = []
                    s.delivered = true
                    emit(.requestHeadTooLarge(streamID: id, endStream: endStream))
                    if endStream { emit(.requestEnd(streamID: id)) }
                    return 0
                }
                let head: HTTPRequestHead
                do {
                    head = try HTTP2RequestHead.make(fields: s.fields, endStream: endStream)
                } catch {
                    s.rejected = true
                    s.fields = []
                    _ = nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), id, HTTP2ErrorCode.protocolError.rawValue)
                    return 0
                }
                s.fields = []
                s.delivered = true
                emit(.request(streamID: id, head: head))
                if endStream { emit(.requestEnd(streamID: id)) }
            } else if endStream, s.delivered {
                emit(.requestEnd(streamID: id))
            }
        case NGHTTP2_DATA.rawValue:
            guard endStream, let s = stream(id) else { return 0 }
            s.requestEnded = true
            if s.delivered, !terminated { emit(.requestEnd(streamID: id)) }
        case NGHTTP2_RST_STREAM.rawValue:
            guard let s = stream(id) else { return 0 }
            if s.delivered, !terminated {
                emit(.streamReset(streamID: id, code: HTTP2ErrorCode(frame.rst_stream.error_code)))
            }
            noteReset()
        case NGHTTP2_GOAWAY.rawValue:
            emit(.goaway(lastStreamID: frame.goaway.last_stream_id, code: HTTP2ErrorCode(frame.goaway.error_code)))
        case NGHTTP2_PING.rawValue:
            guard frame.hd.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) != 0, drain == .noticeSent else { return 0 }
            let d = frame.ping.opaque_data
            if [d.0, d.1, d.2, d.3, d.4, d.5, d.6, d.7] == Self.drainPingData { finishDrain() }
        default:
            break
        }
        return 0
    }

    private func onData(_ streamID: Int32, _ data: UnsafePointer<UInt8>, _ len: Int) -> Int32 {
        guard let s = stream(streamID), s.delivered, !terminated else {
            // Nobody will consume these bytes: give the window back at once.
            _ = nghttp2_session_consume(session, streamID, len)
            return 0
        }
        s.unconsumed += len
        emit(.requestData(streamID: streamID, bytes: Array(UnsafeBufferPointer(start: data, count: len))))
        return 0
    }

    private func onStreamClose(_ streamID: Int32, _ code: UInt32) -> Int32 {
        if headerStream?.id == streamID { headerStream = nil }
        if !applicationResets.isEmpty { applicationResets.remove(streamID) }
        guard let s = withStreams({ $0.removeValue(forKey: streamID) }) else { return 0 }
        if s.unconsumed > 0 { _ = nghttp2_session_consume_connection(session, s.unconsumed) }
        if s.delivered { emit(.streamClosed(streamID: streamID, code: HTTP2ErrorCode(code))) }
        return 0
    }

    private func onFrameSend(_ frame: nghttp2_frame) -> Int32 {
        if frame.hd.type == UInt8(NGHTTP2_GOAWAY.rawValue) {
            // A connection error nghttp2 detected by itself (bad stream id, flow control, too many
            // streams or SETTINGS entries…): reported like ours.
            let code = HTTP2ErrorCode(frame.goaway.error_code)
            guard code != .noError, !terminated else { return 0 }
            terminated = true
            var detail = "GOAWAY \(code)"
            if let p = frame.goaway.opaque_data, frame.goaway.opaque_data_len > 0 {
                detail += ": " + String(decoding: UnsafeBufferPointer(start: p, count: frame.goaway.opaque_data_len), as: UTF8.self)
            }
            emit(.connectionError(code: code, detail: detail))
            abandonStreams(code)
            return 0
        }
        if frame.hd.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0,
            frame.hd.type == UInt8(NGHTTP2_DATA.rawValue) || frame.hd.type == UInt8(NGHTTP2_HEADERS.rawValue)
        {
            let id = frame.hd.stream_id
            if let s = stream(id), s.resetAfterResponse, !s.requestEnded, !terminated, !fatal {
                s.resetAfterResponse = false
                applicationResets.insert(id)
                _ = nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), id, HTTP2ErrorCode.noError.rawValue)
            }
            return 0
        }
        guard frame.hd.type == UInt8(NGHTTP2_RST_STREAM.rawValue) else { return 0 }
        let code = HTTP2ErrorCode(frame.rst_stream.error_code)
        if applicationResets.remove(frame.hd.stream_id) == nil, code != .noError, code != .cancel { noteReset() }
        return 0
    }
}
