import Dispatch
import Foundation
import GatewayConfig
import GatewayCrypto
import GatewayHTTP
import GatewayIO
import GatewayProxy
import GatewayStore
import Glibc
import Synchronization

/// The running gateway: event loops, one HTTP listener group per configured listener, the admin
/// listener, reload and graceful drain. Built from a validated config; `run` blocks until stopped.
public final class GatewayServer: @unchecked Sendable {
    public let loops: [EventLoop]
    public private(set) var runtime: GatewayRuntime
    private var routers: [GatewayRouter] = []
    private var routerTable: RouterTable?
    /// The configured listeners, in file order. A reload keeps a listener's socket while its address
    /// is unchanged, opens the new ones and drains the ones it removes or moves.
    private var servers: [ListenerSlot] = []
    /// Listeners (and admin listeners) a reload removed or moved: their sockets are closed, their
    /// connections finish until `limits.drain_timeout`. Touched on `signalQueue` only.
    private var retiring: [HTTPServer] = []
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
    /// Where signals are handled: reload, drain, and the end of a retired listener's drain.
    private let signalQueue = DispatchQueue(label: "gateway.signals")
    /// What the process started with, for the keys only a restart applies (`workers`, `store.*`).
    private let started: ReloadChanges.Started
    /// Per TLS listener, the timer rotating its session ticket keys every `tls.ticket_rotation` (the
    /// keys survive reloads; a reload that changes the interval re-arms the timer).
    private var ticketRotations: [String: (every: Duration, timer: any DispatchSourceTimer)] = [:]
    private let ticketQueue = DispatchQueue(label: "gateway.tls-tickets")
    private let stopped = DispatchSemaphore(value: 0)
    /// `$NOTIFY_SOCKET` (systemd `Type=notify`): READY, RELOADING and STOPPING are reported there.
    private let systemd: SystemdNotifier?
    private let refusedAdminLog: RateLimitedLog
    /// With `apple`: the client of Apple's services (on the first loop), and the risk refresher.
    private var appleClient: AppleClient?
    private var riskRefresher: RiskRefresher?
    private var riskMetrics: RiskMetrics?
    /// Google's attestation status list for Android registrations, and what keeps it current.
    private let androidStatus = AndroidStatusList()
    private var statusRefresher: StatusListRefresher?
    /// The operator's page (`GET /` on the admin listener): its sampler (nil without an exposition),
    /// and what it reads of the server, replaced at start and by each reload.
    private let operatorSampler: OperatorSampler?
    private let published = Mutex<Published>(Published())

    /// What the operator's page reads of the running server, from any thread.
    struct Published: Sendable {
        var runtime: GatewayRuntime?
        var listeners: [(name: String, address: String, protocols: String)] = []
        var admin = ""
        var reload: (atMillis: Int64, applied: Bool, detail: String)?
        var riskRefresher: RiskRefresher?
        var deviceCheck: DeviceCheckService?
        /// The runtime's routes and upstreams as the page lists them: made once per start or reload.
        var routes: [OperatorReport.Route] = []
        var upstreams: [String] = []
        var storeSummary = "-"
    }

    enum State { case starting, serving, draining, stopped }

    /// - Parameters:
    ///   - metrics: where the gateway's metrics go (its factory is the backend).
    ///   - exposition: the text served at the admin `/metrics` (Prometheus format); nil: 404.
    public init(
        config: GatewayConfig, configPath: String?, metrics: GatewayMetrics,
        exposition: (@Sendable () -> [UInt8])? = nil
    ) throws {
        ProcessSignals.prepare()
        GatewayEvents.setLevel(config.logging.level)
        let rt = try GatewayRuntime(config, coreCount: ProcessInfo.processInfo.activeProcessorCount)
        runtime = rt
        published.withLock { $0.runtime = rt }
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
        started = ReloadChanges.Started(config: config, workers: rt.workers, storePassword: rt.storeSecurity?.password)
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
        refusedAdminLog = RateLimitedLog(interval: 30)
        let sampler = exposition.map { OperatorSampler(exposition: $0) }
        operatorSampler = sampler
        let adminRouter = AdminRouter(server: self, exposition: exposition, explain: explain, access: rt.adminAccess, sampler: sampler)
        self.adminRouter = adminRouter
        adminRouter.adopt(verdict: rt.verdict)
        admin = try openAdmin(at: adminAddress)
        Self.warnAboutExtraRoots(rt)
        Self.logWarnings(rt)
        let store = try ManagedStore.open(config.store, security: rt.storeSecurity, metrics: attestMetrics)
        self.store = store
        store.serve(on: loops)
        // The one client of Apple's services (the risk refresh, DeviceCheck), on the first loop.
        let client = AppleClient(loop: loops[0])
        appleClient = client
        let deviceCheck = DeviceCheckService(client: client, metrics: attestMetrics)
        published.withLock { $0.deviceCheck = deviceCheck }
        let attest = AttestContext(
            store: store.attestStore, requiresKeyID: store.requiresKeyBoundChallenges, explain: explain, metrics: attestMetrics,
            limitEvents: store.limitEvents, deviceCheck: deviceCheck, androidStatus: androidStatus)
        for loop in loops {
            routers.append(loop.queue.sync { GatewayRouter(loop: loop, runtime: rt, events: events, metrics: metrics, attest: attest) })
        }
        let routerByLoop = Dictionary(uniqueKeysWithValues: zip(loops.map { ObjectIdentifier($0) }, routers))
        routerTable = RouterTable(routerByLoop)
        for l in config.listeners {
            servers.append(try openListener(l, at: Self.resolve(l.address), rt))
        }
        metrics.pendingRestart(false)
        store.startMaintenance()
        armTicketRotation(rt)
        adoptRiskRefresh(rt)
        adoptStatusRefresh(rt)
        publish(rt)
        sampler?.start()
        state.withLock { $0 = .serving }
    }

    /// Makes `rt`, the listeners' bound addresses and the admin address what the operator's page
    /// shows. At start and on `signalQueue` (reload).
    private func publish(_ rt: GatewayRuntime) {
        let listeners = servers.map { slot in
            (
                name: slot.config.name, address: slot.server.address.description,
                protocols: slot.config.protocols.map(\.rawValue).sorted().joined(separator: ", ")
                    + (slot.config.tls != nil ? " (TLS)" : "")
            )
        }
        let admin = self.admin?.address.description ?? "-"
        let refresher = riskRefresher
        let routes = rt.routes.map { r in
            let a = r.assertion
            let rollout = Percentage(basisPoints: a.rolloutBasisPoints)
            return OperatorReport.Route(
                name: r.name, mode: a.mode == .enforce && rollout < .hundred ? "enforce \(rollout) (rollout)" : a.mode.rawValue,
                protected: a.mode != .off, upstream: r.upstream,
                fallbackMaxShare: r.fallback.map { Double($0.config.maxShareBasisPoints) / 10_000 })
        }
        let upstreams = rt.config.upstreams.filter { !rt.demoUpstreams.contains($0.name) }.map(\.name)
        let storeSummary = store?.summary ?? "-"
        published.withLock {
            $0.riskRefresher = refresher
            $0.runtime = rt
            $0.listeners = listeners
            $0.admin = admin
            $0.routes = routes
            $0.upstreams = upstreams
            $0.storeSummary = storeSummary
        }
    }

    /// A reload's outcome, for the operator's page.
    private func publishReload(applied: Bool, detail: String) {
        let at = AttestContext.nowMillis()
        published.withLock { $0.reload = (at, applied, detail) }
    }

    /// What the operator's page shows besides the metrics (the sampler calls it on its queue).
    func operatorInputs() -> OperatorSampler.Inputs {
        let p = published.withLock { $0 }
        let build = BuildInfo.current
        // Published before the admin listener opens.
        let rt = p.runtime!
        var facts = OperatorReport.Facts(
            version: build.version, commit: build.commit, nowMillis: 0, startedMillis: 0, reload: p.reload, listeners: p.listeners,
            admin: p.admin, tokenRequired: rt.adminAccess.requiresToken, storeKind: p.storeSummary, ready: isReady,
            notReadyReasons: readinessReasons, apple: rt.apple != nil, refreshPausedMillis: p.riskRefresher?.pausedForMillis ?? 0,
            deviceCheckPausedMillis: rt.routes.contains { $0.fallback != nil } ? (p.deviceCheck?.pausedForMillis ?? 0) : 0)
        facts.versionLines = build.text.split(separator: "\n").map(String.init)
        let refusals = explain.recent(200).map { e in
            OperatorReport.Refusal(
                id: e.id, atMillis: e.atMillis, route: e.route, verdict: e.verdict.rawValue, reason: e.explanation.error.code,
                status: e.status ?? e.refusalStatus)
        }
        return OperatorSampler.Inputs(facts: facts, routes: p.routes, upstreams: p.upstreams, refusals: refusals)
    }

    /// A listener's address as written, resolved (`:PORT` is every IPv4 interface).
    private static func resolve(_ a: SocketAddressSpec) throws(SocketAddress.ParseError) -> SocketAddress {
        try SocketAddress.resolve(host: a.host.isEmpty ? "0.0.0.0" : a.host, port: a.port)
    }

    /// How listener `l` serves new connections under `rt`: protocols, TLS, limits, SETTINGS.
    private static func profile(_ l: ListenerConfig, _ rt: GatewayRuntime) -> HTTPServer.Profile {
        var served: ServedProtocols = []
        if l.protocols.contains(.http1) { served.insert(.http1) }
        if l.protocols.contains(.h2c) { served.insert(.h2c) }
        if l.protocols.contains(.h2) { served.insert(.h2) }
        let tls = rt.listenerTLS[l.name]
        return HTTPServer.Profile(
            limits: rt.downstreamLimits(for: l), maxConnections: rt.config.limits.maxConnections, scheme: tls == nil ? "http" : "https",
            protocols: served, http2Settings: rt.http2Settings[l.name] ?? HTTP2Settings(), tls: tls)
    }

    /// Opens listener `l`'s socket(s) at `address`, accepting at once with the loops' routers.
    private func openListener(_ l: ListenerConfig, at address: SocketAddress, _ rt: GatewayRuntime) throws(Socket.Error) -> ListenerSlot {
        let routerTable = routerTable!
        let metrics = metrics
        let label = ListenerLabel(l.name)
        let server = try HTTPServer(
            address: address, loops: loops, profile: Self.profile(l, rt),
            prepare: { server in
                server.onHTTP2StreamReset = { reason in metrics.http2StreamReset(reason: reason) }
                server.onHTTP2Goaway = { reason in metrics.http2Goaway(reason: reason) }
                // Set on every listener: a reload may turn TLS on without a new socket.
                server.onTLSHandshake = { _, info in
                    metrics.tlsHandshake(listener: label.name, version: info.version.rawValue, resumed: info.resumed)
                }
                server.onTLSFailure = { _, reason in metrics.tlsHandshakeFailed(listener: label.name, reason: reason) }
                server.onAccept = { _ in metrics.connectionOpened() }
                server.onClose = { _ in metrics.connectionClosed() }
                server.onRefuse = { _ in metrics.connectionRefused() }
                // Set on every listener: a reload may turn proxy_protocol on without a new socket.
                let refusedLog = RateLimitedLog(interval: 30)
                server.onProxyProtocolFailure = { _, reason, peer in
                    metrics.proxyProtocolFailed(listener: label.name, reason: reason)
                    refusedLog.log("proxy_protocol|" + label.name) { suppressed in
                        GatewayEvents.log(
                            "warning", "connection closed: no valid PROXY protocol header",
                            [
                                ("listener", label.name), ("reason", reason), ("peer", peer.host), ("suppressed", String(suppressed)),
                            ])
                    }
                }
            }
        ) { loop in routerTable.router(for: loop) }
        return ListenerSlot(config: l, requested: address, server: server, label: label)
    }

    /// The admin listener at `address`, on the first loop; connections from outside `admin.allow`
    /// are closed at accept.
    private func openAdmin(at address: SocketAddress) throws(Socket.Error) -> HTTPServer {
        let adminRouter = adminRouter!
        let refusedAdminLog = refusedAdminLog
        return try HTTPServer(
            address: address, loops: [loops[0]], limits: DownstreamLimits(),
            admit: { peer in
                guard adminRouter.admits(peer) else {
                    refusedAdminLog.log("admin.allow") { suppressed in
                        GatewayEvents.log(
                            "warning", "admin connection closed: the client is not in admin.allow",
                            [
                                ("client", peer.host), ("suppressed", String(suppressed)),
                            ])
                    }
                    return false
                }
                return true
            }
        ) { _ in adminRouter }
    }

    /// The Android status list's refresh runs while an app has `android` and `android.status_url` is
    /// set (docs/android.md, "Revocation"); a reload changes or pauses it.
    private func adoptStatusRefresh(_ rt: GatewayRuntime) {
        let c = rt.config.android
        guard let url = c.statusURL, let tls = rt.androidStatusTLS else {
            statusRefresher?.adopt(nil)
            return
        }
        if statusRefresher == nil {
            statusRefresher = StatusListRefresher(
                loop: loops[0], shared: store?.attestStore as? any SharedDocumentStore,
                metrics: AndroidStatusMetrics(factory: metrics.factory), list: androidStatus)
        }
        statusRefresher?.adopt(
            StatusListRefresher.Settings(
                url: .init(host: url.host, port: url.port, path: url.path), refreshMillis: c.refresh.millis,
                connectTimeoutMillis: c.connectTimeout.millis, responseTimeoutMillis: c.responseTimeout.millis, tls: tls))
    }

    /// The risk refresher follows the configuration: started with `apple` (and `risk.refresh` on),
    /// given the new settings on reload, paused when they go. Its metrics exist from the first
    /// configuration with `apple`.
    private func adoptRiskRefresh(_ rt: GatewayRuntime) {
        let settings = RiskRefresher.Settings(rt)
        if settings != nil || rt.apple != nil, riskMetrics == nil { riskMetrics = RiskMetrics(factory: metrics.factory) }
        guard let settings else {
            riskRefresher?.adopt(nil)
            return
        }
        if riskRefresher == nil, let riskStore = store?.attestStore as? any RiskRefreshStore, let riskMetrics, let client = appleClient {
            riskRefresher = RiskRefresher(store: riskStore, client: client, metrics: riskMetrics)
        }
        riskRefresher?.adopt(settings)
        GatewayEvents.log(
            "info", "risk refresh on",
            [
                ("refresh_ms", String(settings.schedule.refreshMillis)), ("concurrency", String(settings.concurrency)),
                ("rate_per_second", String(settings.ratePerSecond)),
                ("development", settings.services.development.authority), ("production", settings.services.production.authority),
            ])
    }

    /// Starts (or, when its interval changed, restarts) each TLS listener's ticket key rotation timer,
    /// and stops those of listeners that are gone or no longer TLS.
    /// Each rotation is logged with the listener's rotation count.
    private func armTicketRotation(_ rt: GatewayRuntime) {
        for name in ticketRotations.keys where rt.ticketKeys[name] == nil {
            ticketRotations[name]?.timer.cancel()
            ticketRotations[name] = nil
        }
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
        GatewayEvents.log(
            "debug", "configuration loaded",
            [
                ("file", configPath ?? "-"), ("listeners", String(c.listeners.count)), ("upstreams", String(c.upstreams.count)),
                ("routes", String(c.routes.count)), ("workers", String(rt.workers)),
            ])
        for r in rt.routes {
            GatewayEvents.log(
                "debug", "route",
                [
                    ("route", r.name), ("order", String(r.index)), ("upstream", r.upstream), ("assertion", r.assertion.mode.rawValue),
                    ("max_body", String(r.maxBody)),
                ])
        }
    }

    private static func logWarnings(_ rt: GatewayRuntime) {
        for w in rt.warnings { GatewayEvents.log("warning", w) }
    }

    private static func warnAboutExtraRoots(_ rt: GatewayRuntime) {
        for (subjects, trusted) in [
            (rt.extraRootSubjects, "attestations besides Apple's App Attestation Root CA"),
            (rt.extraReceiptRootSubjects, "receipts besides Apple Root CA - G3"),
            (rt.extraAndroidRootSubjects, "Android attestations besides Google's"),
        ] where !subjects.isEmpty {
            GatewayEvents.log(
                "warning", "TRUSTING EXTRA ROOTS for \(trusted): for tests only", [("roots", subjects.joined(separator: " | "))])
        }
    }

    /// Bound addresses (port 0 resolved), by listener name; "admin" for the admin listener.
    public var addresses: [String: SocketAddress] {
        var out = Dictionary(uniqueKeysWithValues: servers.map { ($0.config.name, $0.server.address) })
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

    /// A key as the store has it (the admin's `/explain/key/<id>`); unavailable while restoring.
    func deviceKey(_ id: KeyID, completion: @escaping @Sendable (Result<DeviceKeyRecord?, StoreError>) -> Void) {
        guard let store else { return completion(.failure(StoreError(.unavailable, "the store is being restored"))) }
        store.attestStore.deviceKey(id, completion: completion)
    }

    /// Keys per account: the account's distinct keys within `accounts.window` now (`/explain/key/<id>`).
    func accountKeyCount(_ account: KeyAccount, completion: @escaping @Sendable (Result<Int, StoreError>) -> Void) {
        guard let store, let accounts = store.attestStore as? any AccountStore else {
            return completion(.failure(StoreError(.unavailable, "the store is being restored")))
        }
        accounts.accountKeyCount(
            account: account.digest, nowMillis: AttestContext.nowMillis(), windowMillis: runtime.accountWindowMillis,
            completion: completion)
    }

    /// Installs the signal handlers (`ProcessSignals`: SIGTERM, SIGINT and SIGQUIT drain and exit,
    /// SIGHUP reloads, SIGUSR1 reopens the log files, SIGUSR2 is logged and ignored), then blocks
    /// until stopped.
    public func run() {
        let q = signalQueue
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

    /// Reads the configuration file again and applies it, or refuses it as a whole (logged, the
    /// running configuration kept): an invalid file, a file it names that cannot be read, or a new
    /// listener address that cannot be bound. Applied: routes, upstreams, apps, trust, attest, limits
    /// (new connections), admin access, logging, and listeners: one whose address is unchanged keeps
    /// its socket and serves new connections with its new protocols, TLS and limits; a new address
    /// is bound first, then the listener it replaces (or a removed one) stops accepting and drains.
    /// The admin listener moves likewise. `workers` and `store.*` need a restart: each key that
    /// differs is logged as a warning, and `attest_gateway_config_reload_pending_restart` is 1 until
    /// the file matches the process again. "configuration reloaded" is logged once all is applied.
    public func reload() {
        guard let path = configPath else { return }
        systemd?.reloading()
        defer { systemd?.ready(status: statusLine()) }
        let next: GatewayRuntime
        let plan: ListenerPlan
        let accessLog: PreparedAccessLog
        do {
            let config = try GatewayConfig.load(path: path)
            next = try GatewayRuntime(config, coreCount: ProcessInfo.processInfo.activeProcessorCount, previous: runtime)
            // The step that can fail last before the listeners: a new access log file that cannot be
            // opened refuses the reload.
            accessLog = try prepareAccessLog(config.logging)
            plan = try openListeners(next)
        } catch {
            metrics.reloaded(success: false)
            publishReload(applied: false, detail: "\(error)")
            GatewayEvents.log("error", "reload refused; the running configuration is kept", [("error", "\(error)")])
            return
        }
        // Nothing fails from here on: all of it is applied.
        let previous = runtime
        GatewayEvents.setLevel(next.config.logging.level)
        if accessLog.changed { switchAccessLog(to: accessLog.target) }
        Self.logRoutes(next, configPath: configPath)
        runtime = next
        metrics.declare(next)
        attestMetrics.declare(routes: next.routes)
        adoptRiskRefresh(next)
        adoptStatusRefresh(next)
        adminRouter?.adopt(next.adminAccess)
        adminRouter?.adopt(verdict: next.verdict)
        Self.logVerdictKey(previous: previous.verdict, next.verdict)
        Self.warnAboutExtraRoots(next)
        Self.logWarnings(next)
        for (loop, router) in zip(loops, routers) { loop.queue.sync { router.adopt(next) } }
        // A listener on an unchanged address keeps its socket: new connections get its new profile
        // (protocols, TLS and the certificates just read, limits, HTTP/2 SETTINGS); open ones keep theirs.
        var updated: [String] = []
        for (slot, l) in plan.kept {
            if slot.config != l { updated.append(l.name) }
            slot.adopt(l, profile: Self.profile(l, next))
        }
        servers = plan.slots
        for slot in plan.opened {
            GatewayEvents.log("info", "listener opened", [("listener", slot.config.name), ("address", slot.server.address.description)])
        }
        for slot in plan.closed {
            GatewayEvents.log(
                "info", "listener closed; draining",
                [
                    ("listener", slot.config.name), ("address", slot.server.address.description),
                    ("connections", String(slot.server.connectionCount)),
                ])
            retire(slot.server, name: slot.config.name)
        }
        if let moved = plan.admin, let old = admin {
            admin = moved
            retire(old, name: "admin")
            GatewayEvents.log("info", "admin listener moved", [("from", old.address.description), ("address", moved.address.description)])
        }
        armTicketRotation(next)
        // HTTP/2 clients finish their streams, then reconnect onto the new configuration (its
        // SETTINGS and certificates). HTTP/1.1 connections read the new routes already and are left alone.
        var goaways = 0
        for slot in servers { goaways += slot.server.goawayHTTP2(reason: "reload") }
        let pending = ReloadChanges.pendingRestart(
            started: started, file: next.config,
            fileWorkers: next.config.workers.resolved(coreCount: ProcessInfo.processInfo.activeProcessorCount),
            filePassword: next.storeSecurity?.password)
        for key in pending { GatewayEvents.log("warning", key.description, [("key", key.key)]) }
        metrics.pendingRestart(!pending.isEmpty)
        metrics.reloaded(success: true)
        publish(next)
        publishReload(applied: true, detail: "")
        var changed = ReloadChanges.applied(previous.config, next.config)
        if !plan.opened.isEmpty || !plan.closed.isEmpty || !updated.isEmpty { changed.insert("listeners", at: 0) }
        var fields = [
            ("routes", String(next.routes.count)), ("h2_goaways", String(goaways)),
            ("changed", changed.isEmpty ? "none" : changed.joined(separator: ", ")),
        ]
        if !plan.opened.isEmpty { fields.append(("listeners_opened", plan.opened.map(\.config.name).joined(separator: ", "))) }
        if !plan.closed.isEmpty { fields.append(("listeners_closed", plan.closed.map(\.config.name).joined(separator: ", "))) }
        if !updated.isEmpty { fields.append(("listeners_updated", updated.joined(separator: ", "))) }
        if !pending.isEmpty { fields.append(("pending_restart", pending.map(\.key).joined(separator: ", "))) }
        GatewayEvents.log("info", "configuration reloaded", fields)
    }

    /// The listeners of `rt`'s configuration against the running ones: a running listener whose
    /// resolved address is unchanged (port 0: and whose name is) is kept with its socket; the
    /// others are opened now, and so is the admin listener when `admin.address` changed (all of
    /// them accept at once, with the running routes until the reload is applied). When a socket
    /// cannot be opened, those opened before it are closed again and the reload fails.
    private func openListeners(_ rt: GatewayRuntime) throws(GatewayRuntime.CompileError) -> ListenerPlan {
        let config = rt.config
        var plan = ListenerPlan()
        var running = servers
        var slots: [ListenerSlot?] = []
        var toOpen: [(index: Int, config: ListenerConfig, address: SocketAddress)] = []
        for (i, l) in config.listeners.enumerated() {
            let address: SocketAddress
            do {
                address = try Self.resolve(l.address)
            } catch {
                throw GatewayRuntime.CompileError(
                    config, at: "listeners[\(i)].address", "listeners[\(i)].address (listener \(l.name)): \(error)")
            }
            let same = running.indices.filter {
                running[$0].requested == address && (address.port != 0 || running[$0].config.name == l.name)
            }
            if let j = same.first(where: { running[$0].config.name == l.name }) ?? same.first {
                let slot = running.remove(at: j)
                plan.kept.append((slot, l))
                slots.append(slot)
            } else {
                toOpen.append((i, l, address))
                slots.append(nil)
            }
        }
        func abandon() {
            for slot in plan.opened { retire(slot.server, name: slot.config.name) }
            if let a = plan.admin { retire(a, name: "admin") }
        }
        for (i, l, address) in toOpen {
            do {
                let slot = try openListener(l, at: address, rt)
                plan.opened.append(slot)
                slots[i] = slot
            } catch {
                abandon()
                let holder =
                    running.first { $0.config.address.conflicts(with: l.address) }.map { "listener \($0.config.name)" }
                    ?? (runtime.config.admin.address.conflicts(with: l.address) ? "the admin listener" : nil)
                throw GatewayRuntime.CompileError(
                    config, at: "listeners[\(i)].address",
                    "listeners[\(i)].address (listener \(l.name)): cannot listen: \(error)\(Self.heldHint(holder))")
            }
        }
        if config.admin.address != runtime.config.admin.address {
            do {
                plan.admin = try openAdmin(at: SocketAddress.resolve(host: config.admin.address.host, port: config.admin.address.port))
            } catch {
                abandon()
                let holder = running.first { $0.config.address.conflicts(with: config.admin.address) }.map { "listener \($0.config.name)" }
                throw GatewayRuntime.CompileError(
                    config, at: "admin.address", "admin.address: cannot listen: \(error)\(Self.heldHint(holder))")
            }
        }
        plan.closed = running
        plan.slots = slots.map { $0! }
        return plan
    }

    /// When an address cannot be bound because a listener this reload would close holds it (a new
    /// host on the same port, or an address moved between a listener and the admin listener).
    private static func heldHint(_ holder: String?) -> String {
        guard let holder else { return "" }
        return " (\(holder) holds it until this reload would close it: restart, or move it through another address in two reloads)"
    }

    /// Stops `server` accepting now and drains it in the background: idle connections close, busy
    /// ones finish their exchange, until `limits.drain_timeout`; then the rest are cut. On
    /// `signalQueue` (reload).
    private func retire(_ server: HTTPServer, name: String) {
        server.beginDrain()
        retiring.append(server)
        let until = EventLoop.monotonicMillis() + runtime.config.limits.drainTimeout.millis
        DispatchQueue.global().async { [self] in
            let cut = server.finishDrain(until: until)
            signalQueue.async { [self] in
                retiring.removeAll { $0 === server }
                guard state.withLock({ $0 == .serving }) else { return }
                GatewayEvents.log("info", "listener drained", [("listener", name), ("connections_cut", String(cut))])
            }
        }
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
            GatewayEvents.log(
                "error", "log files not reopened: the access log goes on to the file already open",
                [
                    ("error", error.description)
                ])
        }
    }

    /// The access log a `logging` section asks for: `changed` false when it is the current one;
    /// else the target to switch to (nil: off), its file opened (the same descriptor goes on when only
    /// the format or buffering changed). Throws, changing nothing, when the new file cannot be opened.
    struct PreparedAccessLog {
        let changed: Bool
        let target: AccessLogTarget?
    }

    func prepareAccessLog(_ logging: LoggingConfig) throws -> PreparedAccessLog {
        let current = events.accessLog
        let wanted: AccessLogConfig? = logging.accessLog ? logging.accessLogOptions : nil
        guard wanted != current?.options else { return PreparedAccessLog(changed: false, target: current) }
        let next = try wanted.map { options throws(AccessLogError) in
            if let current, current.options.destination == options.destination {
                return AccessLogTarget(options: options, file: current.file)
            }
            return try AccessLogTarget.open(options)
        }
        return PreparedAccessLog(changed: true, target: next)
    }

    /// Applies `logging`: the event log's level at once, and a changed access log (turned on or off,
    /// another path, format, buffer or flush) on every loop, each loop's buffered lines written to the
    /// old destination first. Throws, changing nothing, when the new file cannot be opened.
    public func applyLogging(_ logging: LoggingConfig) throws {
        let prepared = try prepareAccessLog(logging)
        if prepared.changed { switchAccessLog(to: prepared.target) }
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
        for slot in servers { slot.server.beginDrain() }
        let until = EventLoop.monotonicMillis() + deadline
        var cut = 0
        // Listeners a reload retired are draining already: they end by the same deadline.
        for s in servers.map(\.server) + retiring { cut += s.finishDrain(until: until) }
        admin?.drain(deadlineMillis: 0)
        operatorSampler?.stop()
        riskRefresher?.stop()
        statusRefresher?.stop()
        appleClient?.close()
        // Every exchange has ended (or was cut): its access line is written now, and any later one at once.
        for (loop, router) in zip(loops, routers) {
            loop.queue.sync {
                router.closeIdle()
                router.accessLog.finish()
            }
        }
        for (_, r) in ticketRotations { r.timer.cancel() }
        for loop in loops { loop.shutdownAndWait() }
        // Nothing can change the store any more: the final snapshot marks a clean stop.
        store?.close()
        state.withLock { $0 = .stopped }
        GatewayEvents.log("info", "stopped", [("connections_cut", String(cut))])
        stopped.signal()
    }
}

/// A listener's name in metric labels (TLS handshakes): a reload may rename a listener that keeps
/// its socket. Read once per handshake.
final class ListenerLabel: Sendable {
    private let value: Mutex<String>
    init(_ name: String) { value = Mutex(name) }
    var name: String { value.withLock { $0 } }
    func rename(_ name: String) { value.withLock { $0 = name } }
}

/// A configured listener: its configuration and its server (sockets). Touched on the signal queue.
final class ListenerSlot {
    private(set) var config: ListenerConfig
    /// The configured address, resolved (port 0 as written): what a reload compares.
    let requested: SocketAddress
    let server: HTTPServer
    let label: ListenerLabel

    init(config: ListenerConfig, requested: SocketAddress, server: HTTPServer, label: ListenerLabel) {
        self.config = config
        self.requested = requested
        self.server = server
        self.label = label
    }

    /// The listener's configuration as reloaded, on the same socket: connections accepted from now
    /// on are served with `profile`.
    func adopt(_ l: ListenerConfig, profile: HTTPServer.Profile) {
        config = l
        label.rename(l.name)
        server.adopt(profile)
    }
}

/// What a reload does to the listeners, sockets already opened.
private struct ListenerPlan {
    /// The reloaded configuration's listeners, in file order.
    var slots: [ListenerSlot] = []
    /// Running listeners that keep their socket, with their new configuration.
    var kept: [(ListenerSlot, ListenerConfig)] = []
    /// Listeners opened for this reload (new, or moved to another address).
    var opened: [ListenerSlot] = []
    /// Running listeners the reloaded configuration no longer has at their address.
    var closed: [ListenerSlot] = []
    /// The admin listener at its new address (`admin.address` changed).
    var admin: HTTPServer?
}

/// Hands each loop its router (built on that loop).
final class RouterTable: Sendable {
    private let routers: [ObjectIdentifier: GatewayRouter]
    init(_ routers: [ObjectIdentifier: GatewayRouter]) { self.routers = routers }
    func router(for loop: EventLoop) -> GatewayRouter { routers[ObjectIdentifier(loop)]! }
}

extension GatewayRouter: @unchecked Sendable {}
