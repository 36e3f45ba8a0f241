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
        let seconds = factory.defaultDurationHistogramBuckets.map { Double($0.components.seconds) + Double($0.components.attoseconds) / 1e18 }
        factory.valueHistogramBuckets[GatewayMetrics.requestDuration] = seconds
        factory.valueHistogramBuckets[GatewayMetrics.upstreamDuration] = seconds
        let server: GatewayServer
        do {
            server = try GatewayServer(
                config: cfg, configPath: config, metrics: GatewayMetrics(factory: factory),
                exposition: { registry.emitToBuffer() })
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
        do {
            let cfg = try GatewayConfig.load(path: config)
            let rt = try GatewayRuntime(cfg, coreCount: ProcessInfo.processInfo.activeProcessorCount)
            for w in rt.warnings { FileHandle.standardError.write(Data("\(config): warning: \(w)\n".utf8)) }
            print("\(config): ok (\(cfg.listeners.count) listener(s), \(cfg.upstreams.count) upstream(s), \(cfg.routes.count) route(s))")
        } catch {
            FileHandle.standardError.write(Data("\(error)\n".utf8))
            throw ExitCode(2)
        }
    }
}
