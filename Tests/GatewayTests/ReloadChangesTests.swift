import GatewayConfig
import Testing

@testable import Gateway

/// What a reload says it applied, and which keys it says wait for a restart (`ReloadChanges`).
@Suite("reload: applied sections and pending-restart keys")
struct ReloadChangesTests {
    static func config(
        workers: String = "2", store: String = "{kind: memory}", logging: String = "{level: info}",
        routes: String = "/", admin: String = "127.0.0.1:9090", extra: String = ""
    ) throws -> GatewayConfig {
        try GatewayConfig.parse(
            yaml: """
                workers: \(workers)
                listeners: [{name: public, address: 127.0.0.1:8080}]
                admin: {address: \(admin)}
                upstreams: [{name: demo, url: demo}]
                routes: [{name: all, match: {path_prefix: \(routes)}, upstream: demo}]
                store: \(store)
                logging: \(logging)
                \(extra)
                """, baseDirectory: "/", environment: [:])
    }

    static func started(_ c: GatewayConfig, workers: Int = 2, password: [UInt8]? = nil) -> ReloadChanges.Started {
        ReloadChanges.Started(config: c, workers: workers, storePassword: password)
    }

    @Test("the same file: nothing pending, nothing applied")
    func unchanged() throws {
        let c = try Self.config()
        #expect(ReloadChanges.pendingRestart(started: Self.started(c), file: c, fileWorkers: 2, filePassword: nil).isEmpty)
        #expect(ReloadChanges.applied(c, c).isEmpty)
    }

    @Test("workers: compared as resolved; auto that resolves to the running count is not a change")
    func workers() throws {
        let running = try Self.config(workers: "2")
        let four = ReloadChanges.pendingRestart(
            started: Self.started(running), file: try Self.config(workers: "4"), fileWorkers: 4,
            filePassword: nil)
        #expect(four.map(\.description) == ["reload: workers changed 2 → 4; takes effect after a restart"])
        let auto = try Self.config(workers: "auto")
        #expect(ReloadChanges.pendingRestart(started: Self.started(running), file: auto, fileWorkers: 2, filePassword: nil).isEmpty)
        #expect(
            ReloadChanges.pendingRestart(started: Self.started(running), file: auto, fileWorkers: 8, filePassword: nil)
                .map(\.description) == ["reload: workers changed 2 → auto (8); takes effect after a restart"])
    }

    @Test("store: each key with both values; another kind is one key; a rotated password file is named, never shown")
    func store() throws {
        let running = try Self.config(store: "{kind: memory, shards: 64}")
        let file = try Self.config(store: "{kind: memory, shards: 32, max_keys: 1000, reregistration_window: 1500ms}")
        #expect(
            ReloadChanges.pendingRestart(started: Self.started(running), file: file, fileWorkers: 2, filePassword: nil)
                .map(\.description) == [
                    "reload: store.shards changed 64 → 32; takes effect after a restart",
                    "reload: store.max_keys changed (default) → 1000; takes effect after a restart",
                    "reload: store.reregistration_window changed 3600s → 1500ms; takes effect after a restart",
                ])
        let redis = try Self.config(store: "{kind: redis, url: 'redis://gw:secret@10.0.0.1:6379/0'}")
        #expect(
            ReloadChanges.pendingRestart(started: Self.started(running), file: redis, fileWorkers: 2, filePassword: nil)
                .map(\.key) == ["store.kind"])
        let moved = try Self.config(store: "{kind: redis, url: 'redis://gw:other@10.0.0.2:6379/0'}")
        let keys = ReloadChanges.pendingRestart(
            started: Self.started(redis, password: Array("secret".utf8)), file: moved, fileWorkers: 2, filePassword: Array("other".utf8))
        #expect(keys.map(\.key) == ["store.url"])
        #expect(
            keys[0].description == "reload: store.url changed redis://gw:***@10.0.0.1:6379/0 → redis://gw:***@10.0.0.2:6379/0; "
                + "takes effect after a restart")
        #expect(!keys.map(\.description).joined().contains("secret") && !keys.map(\.description).joined().contains("other@"))
        let rotated = ReloadChanges.pendingRestart(
            started: Self.started(redis, password: Array("secret".utf8)), file: redis, fileWorkers: 2, filePassword: Array("new".utf8))
        #expect(
            rotated.map(\.description)
                == ["reload: store.password_file holds another password than the one read at start; takes effect after a restart"])
    }

    @Test("applied: the sections that differ, in file order; workers and store never")
    func applied() throws {
        let a = try Self.config()
        let b = try Self.config(
            workers: "4", store: "{kind: memory, shards: 8}", logging: "{level: debug, access_log: false}",
            routes: "/api", admin: "127.0.0.1:9091")
        #expect(ReloadChanges.applied(a, b) == ["admin.address", "routes", "logging.level", "logging.access_log"])
        let c = try Self.config(extra: "accounts: {window: 48h}\nandroid: {refresh: 10m}")
        #expect(ReloadChanges.applied(a, c) == ["accounts", "android"])
    }
}
