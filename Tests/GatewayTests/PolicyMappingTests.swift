import GatewayConfig
import GatewayPolicy
import Testing

@testable import Gateway

/// The composition root maps each configuration enum onto the policy's enum of the same name
/// (Sources/Gateway/PolicyMapping.swift) with no default: every case must have its twin, and the
/// two sides must list the same cases.
@Suite("configuration → policy mapping")
struct PolicyMappingTests {
    static func twins<C: CaseIterable & RawRepresentable, P: CaseIterable & RawRepresentable>(_: C.Type, _: P.Type) -> Bool
    where C.RawValue == String, P.RawValue == String {
        Set(C.allCases.map(\.rawValue)) == Set(P.allCases.map(\.rawValue))
    }

    @Test("every configuration enum has a policy enum with exactly the same cases")
    func sameCases() {
        #expect(Self.twins(AssertionPolicy.Mode.self, RoutePolicy.Mode.self))
        #expect(Self.twins(AssertionPolicy.Binding.self, RoutePolicy.Binding.self))
        #expect(Self.twins(AssertionPolicy.Challenge.self, RoutePolicy.Challenge.self))
        #expect(Self.twins(AssertionPolicy.ClientData.self, RoutePolicy.ClientData.self))
        #expect(Self.twins(AssertionPolicy.StoreErrorPolicy.self, RoutePolicy.StoreErrorPolicy.self))
        #expect(Self.twins(AssertionPolicy.RiskAction.self, RoutePolicy.RiskAction.self))
        #expect(Self.twins(DeviceCheckFallback.Bits.self, FallbackPolicy.Bits.self))
        #expect(Self.twins(AppConfig.Environment.self, AppPolicy.KeyEnvironmentName.self))
    }

    @Test("a route's assertion block keeps every choice it makes")
    func routeMapped() {
        for mode in AssertionPolicy.Mode.allCases {
            let config = AssertionPolicy(mode: mode)
            #expect(RoutePolicy(config).mode.rawValue == mode.rawValue)
        }
    }
}
