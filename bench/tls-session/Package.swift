// swift-tools-version: 6.0
// tls-bench: TLSSession (GatewayCrypto) against the same loop written in C on raw OpenSSL, one thread,
// both ends in memory. A separate package so that benchmarking code never ships with the gateway.
import PackageDescription

let package = Package(
    name: "attest-gateway-tls-bench",
    platforms: [.macOS(.v14)],
    dependencies: [.package(name: "attest-gateway", path: "../..")],
    targets: [
        .target(name: "CTLSBaseline", linkerSettings: [.linkedLibrary("ssl"), .linkedLibrary("crypto")]),
        .executableTarget(
            name: "tls-bench",
            dependencies: ["CTLSBaseline", .product(name: "GatewayCrypto", package: "attest-gateway")]
        ),
    ]
)
