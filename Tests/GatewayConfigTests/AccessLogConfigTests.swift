import Testing

@testable import GatewayConfig

/// `logging.access_log`: `true`/`false` as before, or `{path, format, buffer, flush}`.
@Suite("logging.access_log")
struct AccessLogConfigTests {
    static func parse(_ accessLog: String) throws(ConfigError) -> LoggingConfig {
        try ConfigFixture.parse(minimalPlus: "\nlogging: {access_log: \(accessLog)}").logging
    }

    static func errors(_ accessLog: String) -> [String] {
        ConfigFixture.errors(ConfigFixture.minimal + "\nlogging: {access_log: \(accessLog)}")
    }

    @Test("defaults: on, JSON lines to stdout, 64 KiB per loop, flushed every second")
    func defaults() throws {
        let logging = try ConfigFixture.parse(ConfigFixture.minimal).logging
        #expect(logging.accessLog)
        #expect(
            logging.accessLogOptions == AccessLogConfig(destination: .stdout, format: .json, bufferBytes: 64 * 1024, flush: .seconds(1)))
        #expect(try !Self.parse("false").accessLog)
        #expect(try Self.parse("true").accessLogOptions == AccessLogConfig())
    }

    @Test("a mapping sets each option; the rest keep their defaults")
    func mapping() throws {
        let full = try Self.parse("{path: /var/log/gw/access.log, format: combined, buffer: 256KiB, flush: 5s}")
        #expect(full.accessLog)
        #expect(
            full.accessLogOptions
                == AccessLogConfig(
                    destination: .file("/var/log/gw/access.log"), format: .combined,
                    bufferBytes: 256 * 1024, flush: .seconds(5)))
        #expect(try Self.parse("{path: stdout}").accessLogOptions == AccessLogConfig())
        #expect(try Self.parse("{buffer: 0}").accessLogOptions.bufferBytes == 0)
        #expect(try Self.parse("{format: combined}").accessLogOptions == AccessLogConfig(format: .combined))
    }

    @Test("bad values point at the key")
    func errors() {
        #expect(Self.errors("{format: xml}").count == 1)
        #expect(
            Self.errors("{format: xml}").first?.contains("logging.access_log.format must be one of \"json\" or \"combined\"") == true,
            "\(Self.errors("{format: xml}"))")
        #expect(Self.errors("{buffer: 64MiB}").first?.contains("logging.access_log.buffer") == true, "\(Self.errors("{buffer: 64MiB}"))")
        #expect(Self.errors("{flush: 10ms}").first?.contains("logging.access_log.flush") == true, "\(Self.errors("{flush: 10ms}"))")
        #expect(
            Self.errors("{buffer: 0, flush: 2s}") == [
                "gateway.yaml:7:35: logging.access_log.flush has no effect with buffer: 0 (each line is written as it is made); remove it"
            ])
        #expect(
            Self.errors("{paht: /tmp/a.log}").first?.contains("unknown key \"paht\" in logging.access_log (did you mean \"path\"?)")
                == true,
            "\(Self.errors("{paht: /tmp/a.log}"))")
        #expect(
            Self.errors("yes") == [
                "gateway.yaml:7:23: logging.access_log must be true, false or a mapping such as {path: /var/log/attest-gateway/access.log}, got \"yes\""
            ])
    }
}
