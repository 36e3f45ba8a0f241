// swift-tools-version:5.4
// libFuzzer targets for attest-gateway's parsers and verifiers. A separate package so that the
// sanitizer and entry-point flags never reach the product build. Build and run with ./run.sh.
import PackageDescription

// libFuzzer supplies main(); each target only defines LLVMFuzzerTestOneInput.
let fuzzFlags: [SwiftSetting] = [.unsafeFlags(["-parse-as-library"])]

/// A library product of the gateway's package.
func gateway(_ name: String) -> Target.Dependency { .product(name: name, package: "attest-gateway") }

/// A fuzz target: FuzzSupport and `products` of the gateway's package (and `extra`).
func fuzzTarget(_ name: String, _ products: [String], extra: [Target.Dependency] = []) -> Target {
    .executableTarget(name: name, dependencies: ["FuzzSupport"] + products.map(gateway) + extra, swiftSettings: fuzzFlags)
}

let package = Package(
    name: "attest-gateway-fuzz",
    dependencies: [
        .package(name: "attest-gateway", path: "..")
    ],
    targets: [
        .target(
            name: "FuzzSupport",
            dependencies: ["AppAttest", "GatewayWire", "GatewayHTTP", "GatewayProxy"].map(gateway)
        ),
        // hiredis' reply reader, FuzzRESP's oracle (Debian libhiredis-dev).
        .systemLibrary(name: "CFuzzHiredis", pkgConfig: "hiredis", providers: [.apt(["libhiredis-dev"])]),
        fuzzTarget("FuzzCBOR", ["GatewayWire"]),
        fuzzTarget("FuzzAuthenticatorData", ["AppAttest"]),
        fuzzTarget("FuzzAttestation", ["AppAttest", "GatewayWire"]),
        fuzzTarget("FuzzAssertion", ["AppAttest", "GatewayCrypto", "GatewayWire"]),
        fuzzTarget("FuzzProxyProtocol", ["GatewayIO"]),
        fuzzTarget("FuzzHTTP1", ["GatewayHTTP", "GatewayProxy"]),
        fuzzTarget("FuzzHTTP2", ["GatewayHTTP", "GatewayProxy"]),
        fuzzTarget("FuzzRESP", ["GatewayRedis"], extra: ["CFuzzHiredis"]),
        fuzzTarget("FuzzConfig", ["GatewayConfig"]),
        fuzzTarget("FuzzAttestBody", ["AppAttest", "GatewayPolicy", "GatewayStore"]),
        fuzzTarget("FuzzReceipt", ["AppAttest", "GatewayCrypto", "GatewayWire"]),
        fuzzTarget("FuzzAppleAnswers", ["AppAttest", "GatewayPolicy", "GatewayStore", "GatewayWire"]),
        fuzzTarget("FuzzStoreFiles", ["GatewayStore"]),
    ]
)
