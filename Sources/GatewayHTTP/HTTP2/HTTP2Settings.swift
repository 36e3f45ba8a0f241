/// What an `HTTP2ServerSession` advertises in its SETTINGS frame (RFC 9113 §6.5.2) and the limits
/// it enforces against a misbehaving client. Every default is documented in docs/http2.md.
public struct HTTP2Settings: Sendable, Equatable {
    /// SETTINGS_MAX_CONCURRENT_STREAMS. Streams opened beyond it are refused (REFUSED_STREAM) before
    /// the client acknowledged our SETTINGS, and are a connection error (PROTOCOL_ERROR) after.
    public var maxConcurrentStreams: UInt32 = 128
    /// SETTINGS_MAX_HEADER_LIST_SIZE: the decoded size of a request's fields (name + value + 32 each,
    /// RFC 9113 §6.5.2). A larger list is answered 431 without being delivered; the decoder stops
    /// keeping fields past the limit, so an HPACK bomb costs no memory.
    public var maxHeaderListSize: UInt32 = 16 * 1024
    /// SETTINGS_INITIAL_WINDOW_SIZE: how many request body bytes a client may send on one stream
    /// before the consumer acknowledges them with `consume(streamID:count:)`.
    public var initialWindowSize: UInt32 = 64 * 1024
    /// SETTINGS_MAX_FRAME_SIZE (16384 ... 16777215).
    public var maxFrameSize: UInt32 = 16 * 1024
    /// SETTINGS_HEADER_TABLE_SIZE: the HPACK dynamic table the client may use to compress requests.
    public var headerTableSize: UInt32 = 4096
    /// The connection-level receive window (raised from RFC 9113's 65535 with a WINDOW_UPDATE on
    /// stream 0 at start), shared by all streams' request bodies.
    public var connectionWindowSize: UInt32 = 1024 * 1024
    /// Upper bound of the HPACK table our encoder uses for responses, whatever the client allows.
    public var maxDeflateDynamicTableSize: Int = 4096
    /// CONTINUATION frames accepted after one HEADERS frame (CVE-2024-27316 / CVE-2024-28182);
    /// more is a connection error.
    public var maxContinuations: Int = 8
    /// Rapid reset defence (CVE-2023-44487, and "MadeYouReset" CVE-2025-8671): streams reset by the
    /// client before they finished, plus streams we had to reset because of a client error, counted
    /// in a fixed window. Above `maxResetsPerWindow`, GOAWAY ENHANCE_YOUR_CALM and close.
    public var maxResetsPerWindow: Int = 200
    public var resetWindowNanoseconds: UInt64 = 10_000_000_000
    /// Queued SETTINGS/PING acknowledgements (and RST_STREAMs) the client may make us owe before it
    /// reads them; more is a flood and ends the connection (nghttp2_option_set_max_outbound_ack).
    public var maxOutboundAck: Int = 1000
    /// Entries accepted in one SETTINGS frame (nghttp2_option_set_max_settings).
    public var maxSettingsEntries: Int = 32
    /// Response bytes buffered per stream above which `shouldPauseUpstream` says to stop reading the
    /// upstream; `.responseWritable` is reported when the buffer drains below it again.
    public var responseHighWater: Int = 64 * 1024

    public init() {}

    /// Checks the ranges RFC 9113 §6.5.2 allows and that the limits are usable.
    public func validate() throws(HTTP2SessionError) {
        func fail(_ detail: String) -> HTTP2SessionError { HTTP2SessionError(.invalidSettings, detail) }
        guard maxFrameSize >= 16384, maxFrameSize <= 16_777_215 else {
            throw fail("max frame size \(maxFrameSize) outside 16384...16777215")
        }
        guard initialWindowSize <= 0x7fff_ffff else { throw fail("initial window size \(initialWindowSize) above 2^31-1") }
        guard connectionWindowSize >= 65535, connectionWindowSize <= 0x7fff_ffff else {
            throw fail("connection window size \(connectionWindowSize) outside 65535...2^31-1")
        }
        guard maxConcurrentStreams >= 1 else { throw fail("max concurrent streams must be at least 1") }
        guard maxHeaderListSize >= 1024 else { throw fail("max header list size \(maxHeaderListSize) below 1024") }
        guard maxContinuations >= 1, maxResetsPerWindow >= 1, resetWindowNanoseconds > 0, maxOutboundAck >= 1,
            maxSettingsEntries >= 6, responseHighWater >= 1, maxDeflateDynamicTableSize >= 0
        else { throw fail("flood limits must be positive (max settings entries at least 6)") }
    }
}
