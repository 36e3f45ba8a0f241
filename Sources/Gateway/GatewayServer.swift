import Dispatch
import Foundation
import GatewayConfig
import GatewayCrypto
import GatewayHTTP
import GatewayIO
import GatewayProxy
import Glibc
import Synchronization

/// The running gateway: event loops, one HTTP listener group per configured listener, the admin
/// listener, reload and graceful drain. Built from a validated config; `run` blocks until stopped.
public final class GatewayServer: @unchecked Sendable {
    public let loops: [EventLoop]
    public private(set) var runtime: GatewayRuntime
    private var routers: [GatewayRouter] = []
    private var servers: [(name: String, server: HTTPServer)] = []
    private var admin: HTTPServer?
    private var adminRouter: AdminRouter?
    /// Set once the state is restored (after the admin listener opened).
    private var store: ManagedStore?
    let explain: ExplainLog
    private let events: GatewayEvents
    private let metrics: GatewayMetrics
    private let attestMetrics: AttestMetrics
    private let configPath: String?
    private let state = Mutex<State>(.starting)
    private var signalSources: [any DispatchSourceSignal] = []
    /// Per TLS listener, the timer rotating its session ticket keys every `tls.ticket_rotation` (the
    /// keys survive reloads; a reload that changes the interval re-arms the timer).
    private var ticketRotations: [String: (every: Duration, timer: any DispatchSourceTimer)] = [:]
    private let ticketQueue = DispatchQueue(label: "gateway.tls-tickets")
    private let stopped = DispatchSemaphore(value: 0)
    /// `$NOTIFY_SOCKET` (systemd `Type=notify`): READY, RELOADING and STOPPING are reported there.
    private let systemd: SystemdNotifier?

    enum State { case starting, serving, draining, stopped }

    /// - Parameters:
    ///   - metrics: where the gateway's metrics go (its factory is the backend).
    ///   - exposition: the text served at the admin `/metrics` (Prometheus format); nil: 404.
    public init(config: GatewayConfig, configPath: String?, metrics: GatewayMetrics,
                exposition: (@Sendable () -> [UInt8])? = nil) throws
    {
        ProcessSignals.prepare()
        GatewayEvents.setLevel(config.logging.level)
        let rt = try GatewayRuntime(config, coreCount: ProcessInfo.processInfo.activeProcessorCount)
        runtime = rt
        Self.logRoutes(rt, configPath: configPath)
        self.configPath = configPath
        do {
            systemd = try SystemdNotifier.fromEnvironment()
        } catch {
            systemd = nil
            GatewayEvents.log("warning", "systemd notifications off: \(error)")
        }
        events = try GatewayEvents(logging: config.logging)
        self.metrics = metrics
        var persistent = false
        if case .memory(let m) = config.store.backend { persistent = m.dataDirectory != nil }
        let attestMetrics = AttestMetrics(factory: metrics.factory, persistent: persistent)
        self.attestMetrics = attestMetrics
        metrics.declare(rt)
        attestMetrics.declare(routes: rt.routes)
        explain = ExplainLog()
        Socket.ignoreSIGPIPE()
        loops = (0..<rt.workers).map { EventLoop(index: $0) }
        // The admin listener comes first, so that /healthz answers and /readyz says "not ready" while
        // the store restores its state.
        let adminAddress = try SocketAddress.resolve(host: config.admin.address.host, port: config.admin.address.port)
        let adminRouter = AdminRouter(server: self, exposition: exposition, explain: explain, access: rt.adminAccess)
        self.adminRouter = adminRouter
        let refusedAdminLog = RateLimitedLog(interval: 30)
        admin = try HTTPServer(
            address: adminAddress, loops: [loops[0]], limits: DownstreamLimits(),
            admit: { peer in
                guard adminRouter.admits(peer) else {
                    refusedAdminLog.log("admin.allow") { suppressed in
                        GatewayEvents.log("warning", "admin connection closed: the client is not in admin.allow", [
                            ("client", peer.host), ("suppressed", String(suppressed)),
                        ])
                    }
                    return false
                }
                return true
            }
        ) { _ in adminRouter }
        Self.warnAboutExtraRoots(rt)
        Self.logWarnings(rt)
        let store = try ManagedStore.open(config.store, security: rt.storeSecurity, metrics: attestMetrics)
        self.store = store
        let attest = AttestContext(
            store: store.attestStore, requiresKeyID: store.requiresKeyBoundChallenges, explain: explain, metrics: attestMetrics,
            limitEvents: store.limitEvents)
        for loop in loops {
            routers.append(loop.queue.sync { GatewayRouter(loop: loop, runtime: rt, events: events, metrics: metrics, attest: attest) })
        }
        let routerByLoop = Dictionary(uniqueKeysWithValues: zip(loops.map { ObjectIdentifier($0) }, routers))
        let routerTable = RouterTable(routerByLoop)
        for l in config.listeners {
            let address = try SocketAddress.resolve(host: l.address.host.isEmpty ? "0.0.0.0" : l.address.host, port: l.address.port)
            var served: ServedProtocols = []
            if l.protocols.contains(.http1) { served.insert(.http1) }
            if l.protocols.contains(.h2c) { served.insert(.h2c) }
            let tls = rt.listenerTLS[l.name]
            let server = try HTTPServer(
                address: address, loops: loops, limits: rt.downstreamLimits(for: l), maxConnections: config.limits.maxConnections,
                scheme: tls == nil ? "http" : "https", protocols: served,
                http2Settings: rt.http2Settings[l.name] ?? HTTP2Settings(), tls: tls
            ) { loop in routerTable.router(for: loop) }
            server.onHTTP2StreamReset = { reason in metrics.http2StreamReset(reason: reason) }
            server.onHTTP2Goaway = { reason in metrics.http2Goaway(reason: reason) }
            if tls != nil {
                let name = l.name
                server.onTLSHandshake = { _, info in
                    metrics.tlsHandshake(listener: name, version: info.version.rawValue, resumed: info.resumed)
                }
                server.onTLSFailure = { _, reason in metrics.tlsHandshakeFailed(listener: name, reason: reason) }
            }
            server.onAccept = { _ in metrics.connectionOpened() }
            server.onClose = { _ in metrics.connectionClosed() }
            server.onRefuse = { _ in metrics.connectionRefused() }
            servers.append((l.name, server))
        }
        store.startMaintenance()
        armTicketRotation(rt)
        state.withLock { $0 = .serving }
    }

    /// Starts (or, when its interval changed, restarts) each TLS listener's ticket key rotation timer.
    /// Each rotation is logged with the listener's rotation count.
    private func armTicketRotation(_ rt: GatewayRuntime) {
        for l in rt.config.listeners {
            guard let tls = l.tls, let keys = rt.ticketKeys[l.name] else { continue }
            if let running = ticketRotations[l.name], running.every == tls.ticketRotation { continue }
            ticketRotations[l.name]?.timer.cancel()
            let millis = max(1, Int(tls.ticketRotation.millis))
            let t = DispatchSource.makeTimerSource(queue: ticketQueue)
            t.schedule(
                deadline: .now() + .milliseconds(millis), repeating: .milliseconds(millis),
                leeway: .milliseconds(min(1000, millis / 20)))
            let name = l.name
            t.setEventHandler {
                keys.rotate()
                GatewayEvents.log("info", "tls ticket keys rotated", [("listener", name), ("rotations", String(keys.rotations))])
            }
            t.resume()
            ticketRotations[l.name] = (tls.ticketRotation, t)
        }
    }

    /// At `logging.level: debug`: the configuration read and each route as compiled, in match order.
    private static func logRoutes(_ rt: GatewayRuntime, configPath: String?) {
        guard GatewayEvents.logs("debug") else { return }
        let c = rt.config
        GatewayEvents.log("debug", "configuration loaded", [
            ("file", configPath ?? "-"), ("listeners", String(c.listeners.count)), ("upstreams", String(c.upstreams.count)),
            ("routes", String(c.routes.count)), ("workers", String(rt.workers)),
        ])
        for r in rt.routes {
            GatewayEvents.log("debug", "route", [
                ("route", r.name), ("order", String(r.index)), ("upstream", r.upstream), ("assertion", r.assertion.mode.rawValue),
                ("max_body", String(r.maxBody)),
            ])
        }
    }

    private static func logWarnings(_ rt: GatewayRuntime) {
        for w in rt.warnings { GatewayEvents.log("warning", w) }
    }

    private static func warnAboutExtraRoots(_ rt: GatewayRuntime) {
        if !rt.extraRootSubjects.isEmpty {
            GatewayEvents.log(
                "warning", "TRUSTING EXTRA ROOTS for attestations besides Apple's App Attestation Root CA: for tests only",
                [("roots", rt.extraRootSubjects.joined(separator: " | "))])
        }
        if !rt.extraReceiptRootSubjects.isEmpty {
            GatewayEvents.log(
                "warning", "TRUSTING EXTRA ROOTS for receipts besides Apple Root CA - G3: for tests only",
                [("roots", rt.extraReceiptRootSubjects.joined(separator: " | "))])
        }
    }

    /// Bound addresses (port 0 resolved), by listener name; "admin" for the admin listener.
    public var addresses: [String: SocketAddress] {
        var out = Dictionary(uniqueKeysWithValues: servers.map { ($0.name, $0.server.address) })
        if let a = admin { out["admin"] = a.address }
        return out
    }

    /// Ready once the store is restored and the listeners are open, until draining starts; and,
    /// on Redis, only while the store has a live connection.
    var isReady: Bool { state.withLock { $0 == .serving } && (store?.isHealthy ?? false) }

    /// Why `/readyz` answers 503 (empty when ready).
    var readinessReasons: [String] {
        var reasons: [String] = []
        switch state.withLock({ $0 }) {
        case .starting: reasons.append("starting: the store is being restored")
        case .serving: break
        case .draining, .stopped: reasons.append("draining")
        }
        if let store { reasons += store.unhealthyReasons } else if reasons.isEmpty { reasons.append("starting") }
        return reasons
    }
    /// `STATUS=` for systemd: serving, or what keeps `/readyz` at 503.
    private func statusLine() -> String {
        let reasons = readinessReasons
        return reasons.isEmpty ? "serving" : "serving; not ready: " + reasons.joined(separator: "; ")
    }

    var connectionCount: Int { servers.reduce(0) { $0 + $1.server.connectionCount } }

    /// Installs the signal handlers (`ProcessSignals`: SIGTERM, SIGINT and SIGQUIT drain and exit,
    /// SIGHUP reloads, SIGUSR1 reopens the log files, SIGUSR2 is logged and ignored), then blocks
    /// until stopped.
    public func run() {
        let q = DispatchQueue(label: "gateway.signals")
        for (sig, action) in ProcessSignals.handled {
            signal(sig, SIG_IGN)
            let s = DispatchSource.makeSignalSource(signal: sig, queue: q)
            s.setEventHandler { [unowned self] in
                switch action {
                case .drain: drainAndStop()
                case .reload: reload()
                case .reopenLogs: reopenLogs()
                case .logAndIgnore: GatewayEvents.log("info", "signal ignored", [("signal", ProcessSignals.name(sig))])
                }
            }
            s.resume()
            signalSources.append(s)
        }
        var fields: [(String, String)] = addresses.sorted { $0.key < $1.key }.map { ($0.key, $0.value.description) }
        fields.append(("workers", String(loops.count)))
        GatewayEvents.log("info", "serving", fields)
        systemd?.ready(status: statusLine())
        stopped.wait()
    }

    /// Reads the configuration file again; an invalid one is logged and the running one kept.
    /// Routes, upstreams and limits of routes change in place; listeners need a restart.
    public func reload() {
        guard let path = configPath else { return }
        systemd?.reloading()
        defer { systemd?.ready(status: statusLine()) }
        let next: GatewayRuntime
        do {
            let config = try GatewayConfig.load(path: path)
            next = try GatewayRuntime(config, coreCount: ProcessInfo.processInfo.activeProcessorCount, previous: runtime)
            // HTTP/2 settings, certificates and ticket rotation apply at once (below: new connections get
            // them); the rest of a listener needs a restart.
            func restartOnly(_ l: ListenerConfig) -> ListenerConfig {
                var l = l
                l.http2 = HTTP2ListenerConfig()
                l.tls?.ticketRotation = .zero
                l.tls?.certificates = []
                return l
            }
            // The admin token (admin.token_file, read again just now) and protect_metrics apply at once.
            if config.listeners.map(restartOnly) != runtime.config.listeners.map(restartOnly)
                || config.admin.address != runtime.config.admin.address
            {
                GatewayEvents.log("warning", "listener changes take effect after a restart")
            }
            // A password rotated in store.password_file is a store change too (the file was just read again).
            if config.store != runtime.config.store || next.storeSecurity?.password != runtime.storeSecurity?.password {
                GatewayEvents.log("warning", "store changes take effect after a restart")
            }
            // The last step that can fail (a new access log file that cannot be opened refuses the reload).
            try applyLogging(config.logging)
        } catch {
            metrics.reloaded(success: false)
            GatewayEvents.log("error", "reload refused; the running configuration is kept", [("error", "\(error)")])
            return
        }
        runtime = next
        metrics.declare(next)
        attestMetrics.declare(routes: next.routes)
        // New TLS handshakes use the certificates just read; open connections keep their sessions.
        for (name, server) in servers {
            if let context = next.listenerTLS[name], server.tls != nil { server.replaceTLSContext(context) }
            if let settings = next.http2Settings[name] { server.replaceHTTP2Settings(settings) }
        }
        armTicketRotation(next)
        adminRouter?.adopt(next.adminAccess)
        Self.warnAboutExtraRoots(next)
        Self.logWarnings(next)
        for (loop, router) in zip(loops, routers) { loop.queue.sync { router.adopt(next) } }
        // HTTP/2 clients finish their streams, then reconnect onto the new configuration (its
        // SETTINGS and certificates). HTTP/1.1 connections read the new routes already and are left alone.
        var goaways = 0
        for (_, server) in servers where server.protocols.contains(.h2c) { goaways += server.goawayHTTP2(reason: "reload") }
        metrics.reloaded(success: true)
        GatewayEvents.log(
            "info", "configuration reloaded", [("routes", String(next.routes.count)), ("h2_goaways", String(goaways))])
    }

    /// SIGUSR1 (logrotate's `postrotate`, as for nginx): the access log file is opened again by its
    /// path. Each loop writes what it buffered to the old file, then switches; the old descriptor
    /// closes once no loop uses it. A file that cannot be opened is logged and the old one kept.
    public func reopenLogs() {
        guard let current = events.accessLog, current.file.path != nil else {
            GatewayEvents.log("info", "log files reopened", [("access_log", events.accessLog == nil ? "off" : "stdout")])
            return
        }
        do {
            let reopened = try current.reopened()
            switchAccessLog(to: reopened)
            GatewayEvents.log("info", "log files reopened", [("access_log", reopened.file.path ?? "stdout")])
        } catch {
            GatewayEvents.log("error", "log files not reopened: the access log goes on to the file already open", [
                ("error", error.description),
            ])
        }
    }

    /// Applies `logging` (a reload's): the event log's level at once, and a changed access log
    /// (turned on or off, another path, format, buffer or flush) on every loop, each loop's buffered
    /// lines written to the old destination first. Throws, changing nothing, when the new file
    /// cannot be opened.
    public func applyLogging(_ logging: LoggingConfig) throws {
        let current = events.accessLog
        let wanted: AccessLogConfig? = logging.accessLog ? logging.accessLogOptions : nil
        if wanted != current?.options {
            let next = try wanted.map { options throws(AccessLogError) in
                // The same file goes on with its descriptor when only the format or buffering changed.
                if let current, current.options.destination == options.destination {
                    return AccessLogTarget(options: options, file: current.file)
                }
                return try AccessLogTarget.open(options)
            }
            switchAccessLog(to: next)
        }
        GatewayEvents.setLevel(logging.level)
    }

    /// Makes `target` current and has every loop switch to it (after writing what it buffered).
    private func switchAccessLog(to target: AccessLogTarget?) {
        events.replace(with: target)
        for (loop, router) in zip(loops, routers) { loop.queue.sync { router.accessLog.use(target) } }
    }

    /// Stops accepting, lets in-flight requests finish up to the drain deadline, then stops.
    public func drainAndStop() {
        let first = state.withLock { s -> Bool in
            guard s == .serving else { return false }
            s = .draining
            return true
        }
        guard first else { return }
        systemd?.stopping()
        let deadline = runtime.config.limits.drainTimeout.millis
        GatewayEvents.log("info", "draining", [("deadline_ms", String(deadline))])
        var cut = 0
        for (_, s) in servers { cut += s.drain(deadlineMillis: deadline) }
        admin?.drain(deadlineMillis: 0)
        // Every exchange has ended (or was cut): its access line is written now, and any later one at once.
        for (loop, router) in zip(loops, routers) {
            loop.queue.sync {
                router.closeIdle()
                router.accessLog.finish()
            }
        }
        for (_, r) in ticketRotations { r.timer.cancel() }
        for loop in loops { loop.shutdown() }
        // Nothing can change the store any more: the final snapshot marks a clean stop.
        store?.close()
        state.withLock { $0 = .stopped }
        GatewayEvents.log("info", "stopped", [("connections_cut", String(cut))])
        stopped.signal()
    }
}

/// Hands each loop its router (built on that loop).
final class RouterTable: Sendable {
    private let routers: [ObjectIdentifier: GatewayRouter]
    init(_ routers: [ObjectIdentifier: GatewayRouter]) { self.routers = routers }
    func router(for loop: EventLoop) -> GatewayRouter { routers[ObjectIdentifier(loop)]! }
}

extension GatewayRouter: @unchecked Sendable {}
