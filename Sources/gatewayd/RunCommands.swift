import ArgumentParser
import Foundation
import Gateway
import GatewayConfig
import Prometheus

struct Run: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Serve: the reverse proxy described by the configuration file.",
        discussion: """
            SIGTERM or SIGINT: stop accepting, finish in-flight requests up to limits.drain_timeout, exit 0.
            SIGHUP: reload the configuration; an invalid one is logged and the running one kept.
            Access-log lines (JSON) go to stdout, the gateway's own events to stderr.
            """
    )

    @Option(help: ArgumentHelp("Configuration file.", valueName: "FILE"))
    var config = "gateway.yaml"

    func run() throws {
        let cfg: GatewayConfig
        do {
            cfg = try GatewayConfig.load(path: config)
        } catch {
            FileHandle.standardError.write(Data("\(error)\n".utf8))
            throw ExitCode(2)
        }
        // What can be known before starting (names, data_dir) is said at the value it is about.
        let problems = ConfigPreflight.problems(cfg)
        guard problems.isEmpty else {
            FileHandle.standardError.write(
                Data(("gatewayd: cannot start:\n" + problems.map(\.description).joined(separator: "\n") + "\n").utf8))
            throw ExitCode(1)
        }
        MetricsExposition.prepare()
        // The only place that picks the metrics backend: Prometheus, exposed on the admin /metrics.
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = [
            .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
            .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2), .seconds(5),
            .seconds(10), .seconds(30),
        ]
        // The two per-request latencies are recorded as seconds (Double): the same buckets and
        // series, without a Duration comparison per bucket on every request.
        let seconds = factory.defaultDurationHistogramBuckets.map {
            Double($0.components.seconds) + Double($0.components.attoseconds) / 1e18
        }
        factory.valueHistogramBuckets[GatewayMetrics.requestDuration] = seconds
        factory.valueHistogramBuckets[GatewayMetrics.upstreamDuration] = seconds
        factory.valueHistogramBuckets[RiskMetrics.riskMetric] = RiskMetrics.buckets
        factory.valueHistogramBuckets[AccountMetrics.keys] = AccountMetrics.buckets
        let server: GatewayServer
        do {
            server = try GatewayServer(
                config: cfg, configPath: config, metrics: GatewayMetrics(factory: factory),
                exposition: { MetricsExposition.render(registry.emitToBuffer()) })
        } catch let error as GatewayRuntime.CompileError {
            FileHandle.standardError.write(Data("gatewayd: cannot start:\n\(error)\n".utf8))
            throw ExitCode(1)
        } catch {
            FileHandle.standardError.write(Data("gatewayd: cannot start: \(error)\n".utf8))
            throw ExitCode(1)
        }
        server.run()
    }
}

struct Check: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Validate a configuration file without serving (like nginx -t); exit 0 if valid, 2 if not."
    )

    @Option(help: ArgumentHelp("Configuration file.", valueName: "FILE"))
    var config = "gateway.yaml"

    func run() throws {
        let cfg: GatewayConfig
        do {
            cfg = try GatewayConfig.load(path: config)
        } catch {
            FileHandle.standardError.write(Data("\(error)\n".utf8))
            throw ExitCode(2)
        }
        // Then what `run` would do with it: files read, names resolved, data_dir created (and undone).
        var problems = ConfigPreflight.problems(cfg)
        var warnings: [String] = []
        do {
            warnings = try GatewayRuntime(cfg, coreCount: ProcessInfo.processInfo.activeProcessorCount).warnings
        } catch {
            problems.append(error.diagnostic ?? ConfigDiagnostic(file: config, line: 0, column: 0, message: error.description))
        }
        guard problems.isEmpty else {
            let sorted = problems.sorted { ($0.line, $0.column) < ($1.line, $1.column) }
            FileHandle.standardError.write(Data((sorted.map(\.description).joined(separator: "\n") + "\n").utf8))
            throw ExitCode(2)
        }
        for w in warnings { FileHandle.standardError.write(Data("\(config): warning: \(w)\n".utf8)) }
        print("\(config): ok (\(cfg.listeners.count) listener(s), \(cfg.upstreams.count) upstream(s), \(cfg.routes.count) route(s))")
    }
}
