import Testing

@testable import GatewayConfig

/// `listeners[].http2`: the SETTINGS an HTTP/2 listener advertises, their RFC 9113 §6.5.2 ranges, and
/// the rule that only a listener serving h2c may have them.
@Suite("HTTP/2 listener settings")
struct HTTP2ListenerTests {
    /// A listener serving `protocols` whose line 5 is `    http2: <http2>`.
    static func yaml(http2: String, protocols: String = "[http1, h2c]") -> String {
        """
        listeners:
          - name: public
            address: 0.0.0.0:8080
            protocols: \(protocols)
            http2: \(http2)
        upstreams:
          - {name: demo, url: demo}
        routes:
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """
    }

    @Test("absent: the HTTP2Settings defaults of docs/http2.md")
    func defaults() throws {
        let config = try ConfigFixture.parse(ConfigFixture.minimal)
        let http2 = try #require(config.listeners.first).http2
        #expect(http2 == HTTP2ListenerConfig())
        #expect(http2.maxConcurrentStreams == 128)
        #expect(http2.maxHeaderListSize == 16 * 1024)
        #expect(http2.initialWindowSize == 64 * 1024)
        #expect(http2.connectionWindowSize == 1024 * 1024)
        #expect(http2.maxFrameSize == 16 * 1024)
        #expect(http2.maxContinuations == 8)
        #expect(http2.maxResets == 200)
        #expect(http2.resetWindow == .seconds(10))
        #expect(http2.maxOutboundAck == 1000)
        #expect(http2.maxSettingsEntries == 32)
    }

    @Test("the flood limits: every key, and each bound accepted")
    func floodLimits() throws {
        let all = try ConfigFixture.parse(
            Self.yaml(
                http2: "{max_continuations: 4, max_resets: 20, reset_window: 30s, max_outbound_ack: 500, "
                    + "max_settings_entries: 16}"))
        #expect(
            all.listeners[0].http2
                == HTTP2ListenerConfig(
                    maxContinuations: 4, maxResets: 20, resetWindow: .seconds(30), maxOutboundAck: 500, maxSettingsEntries: 16))
        let low = try ConfigFixture.parse(
            Self.yaml(
                http2: "{max_continuations: 1, max_resets: 1, reset_window: 100ms, max_outbound_ack: 1, "
                    + "max_settings_entries: 6}"))
        #expect(
            low.listeners[0].http2
                == HTTP2ListenerConfig(
                    maxContinuations: 1, maxResets: 1, resetWindow: .milliseconds(100), maxOutboundAck: 1, maxSettingsEntries: 6))
        let high = try ConfigFixture.parse(
            Self.yaml(
                http2: "{max_continuations: 1000, max_resets: 1000000, reset_window: 1h, max_outbound_ack: 100000, "
                    + "max_settings_entries: 1000}"))
        #expect(
            high.listeners[0].http2
                == HTTP2ListenerConfig(
                    maxContinuations: 1000, maxResets: 1_000_000, resetWindow: .seconds(3600), maxOutboundAck: 100_000,
                    maxSettingsEntries: 1000))
    }

    @Test(
        "each bad flood limit is refused with its diagnostic",
        arguments: [
            (
                "{max_continuations: 0}",
                "gateway.yaml:5:32: listeners[0].http2.max_continuations must be an integer from 1 to 1000, got 0"
            ),
            (
                "{max_resets: 1000001}",
                "gateway.yaml:5:25: listeners[0].http2.max_resets must be an integer from 1 to 1000000, got 1000001"
            ),
            (
                "{reset_window: 50ms}",
                "gateway.yaml:5:27: listeners[0].http2.reset_window must be at least 100ms, got 50ms"
            ),
            (
                "{reset_window: 2h}",
                "gateway.yaml:5:27: listeners[0].http2.reset_window must be at most 1h, got 2h"
            ),
            (
                "{reset_window: 10}",
                "gateway.yaml:5:27: listeners[0].http2.reset_window needs a unit, one of ms, s, m or h (e.g. 10s), got \"10\""
            ),
            (
                "{max_outbound_ack: -1}",
                "gateway.yaml:5:31: listeners[0].http2.max_outbound_ack must be an integer from 1 to 100000, got -1"
            ),
            (
                "{max_settings_entries: 5}",
                "gateway.yaml:5:35: listeners[0].http2.max_settings_entries must be an integer from 6 to 1000, got 5"
            ),
            (
                "{max_reset: 20}",
                "gateway.yaml:5:13: unknown key \"max_reset\" in listeners[0].http2 (did you mean \"max_resets\"?)"
            ),
        ])
    func badFloodLimit(http2: String, diagnostic: String) {
        #expect(ConfigFixture.errors(Self.yaml(http2: http2)) == [diagnostic])
    }

    @Test("every key, with sizes in the size syntax; absent keys keep their defaults")
    func valid() throws {
        let all = try ConfigFixture.parse(
            Self.yaml(
                http2: "{max_concurrent_streams: 7, max_header_list_size: 8KiB, initial_window_size: 1MiB, "
                    + "connection_window_size: 16MiB, max_frame_size: 32768}"))
        #expect(
            all.listeners[0].http2
                == HTTP2ListenerConfig(
                    maxConcurrentStreams: 7, maxHeaderListSize: 8192, initialWindowSize: 1 << 20,
                    connectionWindowSize: 16 << 20, maxFrameSize: 32768))
        let some = try ConfigFixture.parse(Self.yaml(http2: "{max_concurrent_streams: 2}"))
        #expect(some.listeners[0].http2 == HTTP2ListenerConfig(maxConcurrentStreams: 2))
        let h2Only = try ConfigFixture.parse(Self.yaml(http2: "{max_frame_size: 1MiB}", protocols: "[h2c]"))
        #expect(h2Only.listeners[0].http2.maxFrameSize == 1 << 20)
    }

    @Test("the RFC 9113 §6.5.2 bounds themselves are accepted")
    func bounds() throws {
        let low = try ConfigFixture.parse(
            Self.yaml(
                http2: "{max_concurrent_streams: 1, max_header_list_size: 1KiB, initial_window_size: 0, "
                    + "connection_window_size: 65535, max_frame_size: 16KiB}"))
        #expect(
            low.listeners[0].http2
                == HTTP2ListenerConfig(
                    maxConcurrentStreams: 1, maxHeaderListSize: 1024, initialWindowSize: 0, connectionWindowSize: 65535,
                    maxFrameSize: 16384))
        let high = try ConfigFixture.parse(
            Self.yaml(
                http2: "{max_concurrent_streams: 2147483647, initial_window_size: 2147483647, "
                    + "connection_window_size: 2147483647, max_frame_size: 16777215}"))
        #expect(
            high.listeners[0].http2
                == HTTP2ListenerConfig(
                    maxConcurrentStreams: 0x7fff_ffff, initialWindowSize: 0x7fff_ffff, connectionWindowSize: 0x7fff_ffff,
                    maxFrameSize: 16_777_215))
    }

    @Test(
        "each bad value is refused with its diagnostic",
        arguments: [
            (
                "{max_concurrent_streams: 0}",
                "gateway.yaml:5:37: listeners[0].http2.max_concurrent_streams must be an integer from 1 to 2147483647, got 0"
            ),
            (
                "{max_concurrent_streams: \"8\"}",
                "gateway.yaml:5:37: listeners[0].http2.max_concurrent_streams must be an integer from 1 to 2147483647, "
                    + "got the quoted string \"8\" (write it without quotes)"
            ),
            (
                "{max_concurrent_streams: 2147483648}",
                "gateway.yaml:5:37: listeners[0].http2.max_concurrent_streams must be an integer from 1 to 2147483647, got 2147483648"
            ),
            (
                "{max_frame_size: 16383}",
                "gateway.yaml:5:29: listeners[0].http2.max_frame_size must be from 16384 (16KiB) to 16777215 bytes, got 16383"
            ),
            (
                "{max_frame_size: 16MiB}",
                "gateway.yaml:5:29: listeners[0].http2.max_frame_size must be from 16384 (16KiB) to 16777215 bytes, "
                    + "got 16777216 (16MiB)"
            ),
            (
                "{initial_window_size: 2GiB}",
                "gateway.yaml:5:34: listeners[0].http2.initial_window_size must be from 0 to 2147483647 bytes, "
                    + "got 2147483648 (2GiB)"
            ),
            (
                "{connection_window_size: 64000}",
                "gateway.yaml:5:37: listeners[0].http2.connection_window_size must be from 65535 to 2147483647 bytes, got 64000 (64KB)"
            ),
            (
                "{max_header_list_size: 512}",
                "gateway.yaml:5:35: listeners[0].http2.max_header_list_size must be from 1024 (1KiB) to 2147483647 bytes, got 512"
            ),
            (
                "{max_header_list_size: 16kib}",
                "gateway.yaml:5:35: listeners[0].http2.max_header_list_size has an unknown unit \"kib\" (did you mean \"16KiB\"?)"
            ),
            (
                "{max_frame_size: large}",
                "gateway.yaml:5:29: listeners[0].http2.max_frame_size must be a size: a whole number of bytes, optionally with "
                    + "a unit B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024), e.g. 64KiB, got \"large\""
            ),
            (
                "{max_concurent_streams: 8}",
                "gateway.yaml:5:13: unknown key \"max_concurent_streams\" in listeners[0].http2 (did you mean \"max_concurrent_streams\"?)"
            ),
            ("[128]", "gateway.yaml:5:12: listeners[0].http2 must be a mapping, got a list"),
        ])
    func badValue(http2: String, diagnostic: String) {
        #expect(ConfigFixture.errors(Self.yaml(http2: http2)) == [diagnostic])
    }

    @Test("only a listener that serves h2c may have http2 settings")
    func onlyWithH2c() {
        #expect(
            ConfigFixture.errors(Self.yaml(http2: "{max_concurrent_streams: 8}", protocols: "[http1]")) == [
                "gateway.yaml:5:5: listeners[0].http2 is only allowed on a listener that serves HTTP/2: "
                    + "add h2c to listeners[0].protocols"
            ])
        let noProtocols = """
            listeners:
              - {name: public, address: 0.0.0.0:8080, http2: {max_frame_size: 32KiB}}
            upstreams: [{name: demo, url: demo}]
            routes: [{name: default, match: {path_prefix: /}, upstream: demo}]
            """
        #expect(
            ConfigFixture.errors(noProtocols) == [
                "gateway.yaml:2:43: listeners[0].http2 is only allowed on a listener that serves HTTP/2: "
                    + "add h2c to listeners[0].protocols"
            ])
    }

    @Test("h2 is HTTP/2 on a TLS listener (ALPN), h2c on one without; each on the other kind is an error saying which to write")
    func h2Names() throws {
        func yaml(_ protocols: String, tls: Bool) -> String {
            """
            listeners:
              - name: public
                address: 0.0.0.0:8443
                protocols: \(protocols)
            \(tls ? "    tls: {certificate: s.pem, private_key: s.key}\n" : "")upstreams: [{name: demo, url: demo}]
            routes: [{name: default, match: {path_prefix: /}, upstream: demo}]
            """
        }
        let tls = try ConfigFixture.parse(yaml("[http1, h2]", tls: true))
        #expect(tls.listeners[0].protocols == [.http1, .h2] && tls.listeners[0].servesHTTP2)
        #expect(try ConfigFixture.parse(yaml("[h2]", tls: true)).listeners[0].protocols == [.h2])
        let plain = try ConfigFixture.parse(yaml("[http1, h2c]", tls: false))
        #expect(plain.listeners[0].protocols == [.http1, .h2c] && plain.listeners[0].servesHTTP2)
        #expect(!(try ConfigFixture.parse(yaml("[http1]", tls: true))).listeners[0].servesHTTP2)
        #expect(
            ConfigFixture.errors(yaml("[http1, h2c]", tls: true)) == [
                "gateway.yaml:4:24: listeners[0].protocols[1] is h2c, HTTP/2 over cleartext with prior knowledge, but this listener "
                    + "has tls, where HTTP/2 is chosen by ALPN: write h2"
            ])
        #expect(
            ConfigFixture.errors(yaml("[h2, http1]", tls: false)) == [
                "gateway.yaml:4:17: listeners[0].protocols[0] is h2, HTTP/2 over TLS chosen by ALPN, but this listener has no tls: "
                    + "write h2c (cleartext HTTP/2 with prior knowledge), or add tls"
            ])
        // http2 settings follow either name; on a TLS listener without h2 the hint says h2.
        let withSettings = """
            listeners:
              - name: public
                address: 0.0.0.0:8443
                protocols: [http1, h2]
                tls: {certificate: s.pem, private_key: s.key}
                http2: {max_concurrent_streams: 9}
            upstreams: [{name: demo, url: demo}]
            routes: [{name: default, match: {path_prefix: /}, upstream: demo}]
            """
        #expect(try ConfigFixture.parse(withSettings).listeners[0].http2.maxConcurrentStreams == 9)
        #expect(
            ConfigFixture.errors(withSettings.replacingOccurrences(of: "[http1, h2]", with: "[http1]")) == [
                "gateway.yaml:6:5: listeners[0].http2 is only allowed on a listener that serves HTTP/2: add h2 to listeners[0].protocols"
            ])
    }

    @Test("several bad values are all reported, in order")
    func several() {
        #expect(
            ConfigFixture.errors(Self.yaml(http2: "{max_concurrent_streams: 0, max_frame_size: 1KiB}")) == [
                "gateway.yaml:5:37: listeners[0].http2.max_concurrent_streams must be an integer from 1 to 2147483647, got 0",
                "gateway.yaml:5:56: listeners[0].http2.max_frame_size must be from 16384 (16KiB) to 16777215 bytes, "
                    + "got 1024 (1KiB)",
            ])
    }
}
