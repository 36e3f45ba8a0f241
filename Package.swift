// swift-tools-version: 6.0
// attest-gateway: a reverse proxy that lets through only requests proven to come from a genuine
// Apple device running the genuine app (App Attest). See README.md and docs/architecture.md.
import PackageDescription

let strict: [SwiftSetting] = [.enableUpcomingFeature("ExistentialAny")]

// gatewayd's allocator is jemalloc (CGatewayJemalloc), except in the sanitizer builds of
// scripts/sanitize.sh: ThreadSanitizer and AddressSanitizer bring their own malloc, and jemalloc's
// exported C++ operators would hand them memory they did not allocate.
// (gatewayd is Linux-only: the condition names Linux to link it, and macOS alone to leave it out.)
let jemallocPlatforms: [Platform] = Context.environment["ATTEST_GATEWAY_NO_JEMALLOC"] == nil ? [.linux] : [.macOS]

let package = Package(
    name: "attest-gateway",
    // One list for the whole package. The gateway's own targets are Linux-only (epoll, Synchronization's Mutex), so
    // these minimums are the client library's: AppAttestClient runs where DCAppAttestService exists (iOS 14, macOS 11).
    platforms: [.macOS(.v11), .iOS(.v14)],
    products: [
        .executable(name: "gatewayd", targets: ["gatewayd"]),
        .library(name: "GatewayWire", targets: ["GatewayWire"]),
        .library(name: "GatewayCrypto", targets: ["GatewayCrypto"]),
        .library(name: "AppAttest", targets: ["AppAttest"]),
        .library(name: "AndroidAttest", targets: ["AndroidAttest"]),
        .library(name: "AppAttestSimulator", targets: ["AppAttestSimulator"]),
        .executable(name: "attest-sim", targets: ["attest-sim"]),
        .library(name: "GatewayStore", targets: ["GatewayStore"]),
        .library(name: "GatewayRedis", targets: ["GatewayRedis"]),
        .library(name: "AppAttestClient", targets: ["AppAttestClient"]),
        .library(name: "AppAttestClientSimulator", targets: ["AppAttestClientSimulator"]),
        // For fuzz/ (a separate package, which can only depend on products): the parsers of outside bytes.
        .library(name: "GatewayHTTP", targets: ["GatewayHTTP"]),
        .library(name: "GatewayIO", targets: ["GatewayIO"]),
        .library(name: "GatewayProxy", targets: ["GatewayProxy"]),
        .library(name: "GatewayConfig", targets: ["GatewayConfig"]),
        .library(name: "GatewayPolicy", targets: ["GatewayPolicy"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/jpsim/Yams", from: "5.0.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.0.0"),
    ],
    targets: [
        // Layer 1: C libraries through module maps (Debian -dev packages, found with pkg-config).
        .systemLibrary(name: "CGatewayOpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CGatewayNGHTTP2", pkgConfig: "libnghttp2", providers: [.apt(["libnghttp2-dev"])]),
        .systemLibrary(name: "CGatewayHiredis", pkgConfig: "hiredis", providers: [.apt(["libhiredis-dev"])]),
        // gatewayd's allocator (the executable only: tests and tools keep the C library's).
        .systemLibrary(name: "CGatewayJemalloc", pkgConfig: "jemalloc", providers: [.apt(["libjemalloc-dev"])]),

        // Linux system calls (epoll, accept4, eventfd) for the event loop; imported only by GatewayIO.
        .target(name: "CGatewaySystem"),

        // Layer 2: pure wire formats (no I/O, no C), and the only Swift user of OpenSSL.
        .target(name: "GatewayWire", swiftSettings: strict),
        .target(name: "GatewayCrypto", dependencies: ["CGatewayOpenSSL", "GatewayWire"], swiftSettings: strict),
        // Certificate and CMS issuance for the test CAs (App Attest, Android, TLS test PKI): never linked by gatewayd.
        .target(name: "SimulatorPKI", dependencies: ["CGatewayOpenSSL", "GatewayCrypto", "GatewayWire"], swiftSettings: strict),

        // HTTP/1.1 codecs (and, with the HTTP/2 issue, the nghttp2 session): bytes in, events out, no sockets.
        .target(name: "GatewayHTTP", dependencies: ["CGatewayNGHTTP2"], swiftSettings: strict),

        // Event loops (epoll under one Dispatch source each), sockets, timers, TLS sessions (GatewayCrypto) under
        // connections. The only target that touches descriptors.
        .target(name: "GatewayIO", dependencies: ["CGatewaySystem", "GatewayCrypto"], swiftSettings: strict),

        // gateway.yaml to a strictly validated, typed GatewayConfig (the only target that knows YAML keys).
        .target(name: "GatewayConfig", dependencies: ["GatewayWire", .product(name: "Yams", package: "Yams")], swiftSettings: strict),

        // Reverse proxying: routes, upstream pools, the HTTP/1.1 exchange between downstream and upstream.
        .target(name: "GatewayProxy", dependencies: ["GatewayIO", "GatewayHTTP", "GatewayWire", "GatewayCrypto"], swiftSettings: strict),

        // The composition root: config compiled into loops, listeners, routers and pools; admin, reload, drain.
        .target(
            name: "Gateway",
            dependencies: [
                "GatewayConfig", "GatewayProxy", "GatewayIO", "GatewayHTTP", "GatewayWire",
                "GatewayPolicy", "GatewayStore", "GatewayRedis", "AppAttest", "AndroidAttest", "GatewayCrypto",
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ],
            swiftSettings: strict
        ),

        // Attested keys and one-time challenges: sharded in memory, journal and snapshots on disk. No sockets.
        .target(name: "GatewayStore", dependencies: ["GatewayWire", "GatewayCrypto"], swiftSettings: strict),

        // The same store contract on Redis: a connection per event loop (and threaded ones over GatewayIO's
        // blocking stream), TCP or TLS, replies parsed by its own RESP reader.
        .target(
            name: "GatewayRedis", dependencies: ["GatewayIO", "GatewayStore", "GatewayWire", "GatewayCrypto"],
            swiftSettings: strict),

        // Registration, challenge and assertion decisions over the store contract: no sockets, no clock.
        .target(
            name: "GatewayPolicy",
            dependencies: ["AppAttest", "AndroidAttest", "GatewayCrypto", "GatewayIO", "GatewayStore", "GatewayWire"],
            swiftSettings: strict
        ),

        // Layer 3: Apple's App Attest algorithms; time and trust roots are parameters.
        .target(name: "AppAttest", dependencies: ["GatewayWire", "GatewayCrypto"], swiftSettings: strict),
        // Android hardware key attestation and Android assertions (issue 29); roots, instant and status list are parameters.
        .target(name: "AndroidAttest", dependencies: ["GatewayWire", "GatewayCrypto"], swiftSettings: strict),

        // Test CA and software device: library code for tests, benchmarks and attest-sim; never linked by gatewayd.
        .target(
            name: "AppAttestSimulator",
            dependencies: ["AppAttest", "AndroidAttest", "GatewayCrypto", "GatewayWire", "SimulatorPKI"],
            swiftSettings: strict
        ),

        // The device simulator and load generator: HTTP/1.1 client, devices, load runs, attacks, reports.
        .target(
            name: "AttestSim",
            dependencies: ["AppAttestSimulator", "AppAttest", "GatewayCrypto", "GatewayWire", "AndroidAttest"],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "attest-sim",
            dependencies: [
                "AttestSim", "AppAttest", "AppAttestSimulator", "GatewayCrypto",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strict
        ),

        // The app's side of the client contract (docs/client-library.md): Foundation, and SHA-256 from CryptoKit on
        // Apple platforms or from GatewayCrypto (OpenSSL) on Linux only; nothing of the server.
        .target(
            name: "AppAttestClient",
            dependencies: [.target(name: "GatewayCrypto", condition: .when(platforms: [.linux]))],
            swiftSettings: strict
        ),
        // The simulator's software device as the client's App Attest service (tests, Linux callers).
        .target(
            name: "AppAttestClientSimulator",
            dependencies: ["AppAttestClient", "AppAttestSimulator", "AppAttest", "GatewayWire"],
            swiftSettings: strict
        ),

        .executableTarget(
            name: "gatewayd",
            dependencies: [
                "Gateway", "GatewayConfig", "AppAttest", "AndroidAttest", "GatewayWire", "GatewayCrypto",
                .product(name: "Prometheus", package: "swift-prometheus"),
                .byName(name: "CGatewayJemalloc", condition: .when(platforms: jemallocPlatforms)),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strict
        ),

        // Shared by the test targets: the real-device vectors, the built binary, processes.
        .target(name: "GatewayTestSupport", dependencies: ["AppAttest", "GatewayWire", "GatewayStore"], path: "Tests/GatewayTestSupport"),
        .testTarget(name: "GatewayWireTests", dependencies: ["GatewayWire", "GatewayTestSupport"]),
        .testTarget(name: "GatewayIOTests", dependencies: ["GatewayIO", "GatewayCrypto", "GatewayTestSupport"]),
        .testTarget(name: "GatewayProxyTests", dependencies: ["GatewayProxy", "GatewayIO", "GatewayHTTP", "GatewayTestSupport"]),
        .testTarget(
            name: "GatewayHTTPTests", dependencies: ["GatewayHTTP", "CGatewayNGHTTP2", "GatewayTestSupport"], exclude: ["Resources"]
        ),
        .testTarget(name: "GatewayConfigTests", dependencies: ["GatewayConfig", "GatewayWire"]),
        .testTarget(name: "GatewayStoreTests", dependencies: ["GatewayStore", "GatewayTestSupport"]),
        // hiredis' reader (CGatewayHiredis) is the oracle the RESP reader is tested against.
        .testTarget(
            name: "GatewayRedisTests",
            dependencies: [
                "CGatewayHiredis", "GatewayCrypto", "GatewayWire", "GatewayRedis", "GatewayStore", "GatewayTestSupport", "GatewayIO",
            ]),
        .testTarget(name: "GatewayCryptoTests", dependencies: ["GatewayCrypto", "SimulatorPKI", "CGatewayNGHTTP2"]),
        .testTarget(
            name: "AppAttestTests",
            dependencies: ["AppAttest", "AppAttestSimulator", "GatewayCrypto", "GatewayWire", "SimulatorPKI", "GatewayTestSupport"],
            exclude: ["Vectors"]
        ),
        .testTarget(
            name: "AndroidAttestTests",
            dependencies: ["AndroidAttest", "AppAttestSimulator", "GatewayCrypto", "GatewayWire", "SimulatorPKI"],
            exclude: ["Vectors"]
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "GatewayTestSupport", "AppAttestSimulator", "AppAttest", "AndroidAttest", "GatewayCrypto", "GatewayWire", "AttestSim",
            ]
        ),
        .testTarget(
            name: "GatewayPolicyTests",
            dependencies: [
                "GatewayPolicy", "GatewayStore", "GatewayConfig", "AppAttest", "AndroidAttest", "AppAttestSimulator", "GatewayCrypto",
                "GatewayWire",
                "GatewayIO", "GatewayTestSupport",
            ]),
        .testTarget(
            name: "GatewayTests",
            dependencies: [
                "Gateway", "GatewayPolicy", "GatewayProxy", "GatewayHTTP", "GatewayWire", "GatewayStore", "GatewayConfig",
                // The route verdict's wiring (AttestEndpointsWiringTests): a loop, a signing device, recorded metrics.
                "GatewayIO", "AppAttest", "AppAttestSimulator", "GatewayCrypto", .product(name: "MetricsTestKit", package: "swift-metrics"),
            ]
        ),
        .testTarget(name: "DeployTests", dependencies: ["GatewayTestSupport", "GatewayConfig", .product(name: "Yams", package: "Yams")]),
        .testTarget(
            name: "AttestSimTests",
            dependencies: [
                "AttestSim", "AppAttestSimulator", "AppAttest", "GatewayCrypto", "GatewayWire", "GatewayTestSupport", "AndroidAttest",
            ]
        ),
        .testTarget(
            name: "AppAttestClientTests",
            dependencies: [
                "AppAttestClient", "AppAttestClientSimulator", "AppAttestSimulator", "AppAttest", "GatewayCrypto", "GatewayWire",
                "GatewayTestSupport",
            ]
        ),
        .testTarget(
            name: "CLITests",
            dependencies: ["AppAttestSimulator", "AppAttest", "AndroidAttest", "GatewayCrypto", "GatewayWire", "GatewayTestSupport"]
        ),
    ]
)
