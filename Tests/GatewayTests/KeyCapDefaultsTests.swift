import GatewayConfig
import GatewayStore
import Testing

@testable import Gateway

/// The default `store.max_keys` (issue 19 §2): derived from a stated memory budget. For Redis the
/// budget is large enough that a fleet upgrading without setting `max_keys` does not find new
/// registrations refused at a cap far below what its Redis already holds.
@Suite("store.max_keys defaults")
struct KeyCapDefaultsTests {
    static let redis = StoreConfig(backend: .redis(StoreConfig.Redis(url: RedisURL(host: "127.0.0.1"))))

    @Test func theRedisDefaultComesFrom64GiBAtTheSizeOfRealReceipts() {
        #expect(KeyLimits.redisBytesPerKey(receipt: KeyLimits.typicalReceiptBytes) == 6_400)
        #expect(KeyLimits.defaultRedisMaxKeys == (64 << 30) / 6_400)
        #expect(KeyLimits.defaultRedisMaxKeys == 10_737_418)
        #expect(ManagedStore.keyLimits(Self.redis).maxKeys == 10_737_418)
    }

    @Test func theMemoryDefaultIsUnchanged() {
        #expect(ManagedStore.keyLimits(StoreConfig()).maxKeys == KeyLimits.defaultMaxKeys)
        #expect(KeyLimits.defaultMaxKeys == (1 << 30) / KeyLimits.memoryBytesPerKey)
    }

    @Test func anExplicitCapWins() {
        var config = Self.redis
        config.keys.maxKeys = 250_000
        #expect(ManagedStore.keyLimits(config).maxKeys == 250_000)
        var memory = StoreConfig()
        memory.keys.maxKeys = 7
        #expect(ManagedStore.keyLimits(memory).maxKeys == 7)
    }
}
