import Testing

@testable import GatewayConfig

@Suite("store: Redis Cluster keys")
struct RedisClusterConfigTests {
    @Test("cluster and seeds are read; cluster defaults to false, seeds to none")
    func clusterAndSeeds() throws {
        let config = try ConfigFixture.parse(
            minimalPlus: "store: {kind: redis, cluster: true, url: redis://10.0.0.1:7000, seeds: [redis://10.0.0.2:7000, redis://node-3/0]}"
        )
        #expect(
            config.store.backend
                == .redis(
                    StoreConfig.Redis(
                        url: RedisURL(host: "10.0.0.1", port: 7000), cluster: true,
                        seeds: [RedisURL(host: "10.0.0.2", port: 7000), RedisURL(host: "node-3", port: 6379)])))
        let single = try ConfigFixture.parse(minimalPlus: "store: {kind: redis, url: redis://cache/2}")
        guard case .redis(let redis) = single.store.backend else {
            Issue.record("not a redis store")
            return
        }
        #expect(!redis.cluster)
        #expect(redis.seeds.isEmpty)
    }

    @Test("a database other than 0, seeds without cluster, bad seeds and cluster on memory are errors")
    func refusals() {
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nstore: {kind: redis, cluster: true, url: redis://c/1}") == [
                "gateway.yaml:7:42: store.url names database 1: Redis Cluster has only database 0 (use /0 or no path)"
            ])
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nstore: {kind: redis, url: redis://c, seeds: [redis://d]}") == [
                "gateway.yaml:7:38: store.seeds needs cluster: true (a single Redis server has one url)"
            ])
        #expect(
            ConfigFixture.errors(
                ConfigFixture.minimal + "\nstore: {kind: redis, cluster: true, url: redis://c, seeds: [redis://d/4, 7, x]}") == [
                    "gateway.yaml:7:61: store.seeds[0] names database 4: Redis Cluster has only database 0",
                    "gateway.yaml:7:74: store.seeds[1] must be a url redis://[USER:PASSWORD@]HOST[:PORT][/DB] or rediss://… for TLS (e.g. redis://127.0.0.1:6379/0), got \"7\"",
                    "gateway.yaml:7:77: store.seeds[2] must be a url redis://[USER:PASSWORD@]HOST[:PORT][/DB] or rediss://… for TLS (e.g. redis://127.0.0.1:6379/0), got \"x\"",
                ])
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nstore: {kind: redis, cluster: yes, url: redis://c}") == [
                "gateway.yaml:7:31: store.cluster must be true or false, got \"yes\""
            ])
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nstore: {cluster: true, seeds: []}") == [
                "gateway.yaml:7:9: store.cluster applies only to kind \"redis\"; this store is \"memory\"",
                "gateway.yaml:7:24: store.seeds applies only to kind \"redis\"; this store is \"memory\"",
            ])
    }
}
