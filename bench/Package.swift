// swift-tools-version: 6.0
// verify-bench: assertion verifications per second on one core, for bench/verify-vs-openssl.
// A separate package so that benchmarking code never ships with the gateway.
import PackageDescription

let package = Package(
    name: "attest-gateway-bench",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(name: "attest-gateway", path: "..")
    ],
    targets: [
        // OpenSSL for the probes only (the gateway's own module map is internal to the root package).
        .systemLibrary(name: "CBenchOpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        // Raw OpenSSL loops, to split the per-request cost into ECDSA and everything around it.
        .target(name: "OpenSSLProbe", dependencies: ["CBenchOpenSSL"]),
        // The memory store at a million keys: bytes per key, snapshot and restore time, ops/s.
        .executableTarget(
            name: "store-bench",
            dependencies: [.product(name: "GatewayStore", package: "attest-gateway")]
        ),
        // What one key costs each store with a real-size receipt (bench/key-memory).
        .executableTarget(
            name: "key-memory",
            dependencies: [
                .product(name: "GatewayStore", package: "attest-gateway"),
                .product(name: "GatewayRedis", package: "attest-gateway"),
            ]
        ),
        .executableTarget(
            name: "verify-bench",
            dependencies: [
                "OpenSSLProbe",
                .product(name: "AppAttest", package: "attest-gateway"),
                .product(name: "AppAttestSimulator", package: "attest-gateway"),
                .product(name: "GatewayCrypto", package: "attest-gateway"),
                .product(name: "GatewayWire", package: "attest-gateway"),
            ]
        ),
        // The signed verdict's cost per forwarded request (bench/verdict-vs-openssl).
        .executableTarget(
            name: "verdict-bench",
            dependencies: [
                .product(name: "GatewayPolicy", package: "attest-gateway"),
                .product(name: "GatewayCrypto", package: "attest-gateway"),
                .product(name: "GatewayWire", package: "attest-gateway"),
            ]
        ),
    ]
)
