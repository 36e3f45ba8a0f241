// swift-tools-version:5.4
// libFuzzer targets for attest-gateway's parsers and verifiers. A separate package so that the
// sanitizer and entry-point flags never reach the product build. Build and run with ./run.sh.
import PackageDescription

// libFuzzer supplies main(); each target only defines LLVMFuzzerTestOneInput.
let fuzzFlags: [SwiftSetting] = [.unsafeFlags(["-parse-as-library"])]

let package = Package(
    name: "attest-gateway-fuzz",
    dependencies: [
        .package(name: "attest-gateway", path: ".."),
    ],
    targets: [
        .target(name: "FuzzSupport", dependencies: [.product(name: "AppAttest", package: "attest-gateway")]),
        .executableTarget(
            name: "FuzzCBOR",
            dependencies: [.product(name: "GatewayWire", package: "attest-gateway")],
            swiftSettings: fuzzFlags
        ),
        .executableTarget(
            name: "FuzzAuthenticatorData",
            dependencies: [.product(name: "AppAttest", package: "attest-gateway")],
            swiftSettings: fuzzFlags
        ),
        .executableTarget(
            name: "FuzzAttestation",
            dependencies: [
                "FuzzSupport",
                .product(name: "AppAttest", package: "attest-gateway"),
                .product(name: "GatewayWire", package: "attest-gateway"),
            ],
            swiftSettings: fuzzFlags
        ),
        .executableTarget(
            name: "FuzzAssertion",
            dependencies: [
                "FuzzSupport",
                .product(name: "AppAttest", package: "attest-gateway"),
                .product(name: "GatewayCrypto", package: "attest-gateway"),
                .product(name: "GatewayWire", package: "attest-gateway"),
            ],
            swiftSettings: fuzzFlags
        ),
    ]
)
