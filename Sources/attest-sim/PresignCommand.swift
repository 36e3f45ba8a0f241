import ArgumentParser
import AttestSim
import Foundation

/// `attest-sim presign`: requests signed ahead of time for a replay client that signs nothing.
struct Presign: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Register N devices and write M pre-signed protected requests per device, for a replay client (bench/enforce-vs-openssl).",
        discussion: """
            Each output line is one request, tab-separated: method, request-target, key id, challenge ("-" \
            when none), assertion, body. Each key's requests carry counters 1…M; the lines go round-robin over \
            the keys, so sending them in order with fewer connections than keys keeps each key's counters in \
            order. With --bind request every request has its own challenge, fetched bound to its key: M must \
            not exceed the gateway's store.max_challenges_per_key. Exits 0 on success, 1 when the gateway \
            refused a registration or a challenge, 2 on usage errors.
            """)

    @OptionGroup var common: GatewayOptions

    @Option(help: "Number of simulated devices (each registers one key).")
    var devices: Int = 512

    @Option(name: .customLong("per-device"), help: "Pre-signed requests per device.")
    var perDevice: Int = 8

    @Option(help: "Threads registering devices and fetching challenges, each with its own connection.")
    var concurrency: Int = 2

    @Option(help: "Method of the protected requests.")
    var method: String = "POST"

    @Option(help: "Request-target of the protected requests (a route with an assertion block).")
    var path: String = "/api/purchase"

    @Option(help: "Body bytes of each protected request.")
    var bodySize: Int = 64

    @Option(help: "request or body: what the assertion covers (the route's assertion.bind).")
    var bind: String = "body"

    @Option(help: "The file to write (replaced).")
    var out: String

    func run() throws {
        guard let binding = Binding(rawValue: bind) else {
            throw AttestSimError.usage("--bind must be request or body (got \"\(bind)\")")
        }
        guard devices >= 1, perDevice >= 1, concurrency >= 1, bodySize >= 0 else {
            throw AttestSimError.usage("--devices, --per-device and --concurrency must be at least 1, --body-size at least 0")
        }
        guard !method.contains("\t"), !path.contains("\t") else { throw AttestSimError.usage("--method and --path must not contain tabs") }
        var options = PresignOptions(
            endpoint: try common.endpoint(), paths: common.paths, appID: try common.app(), environment: try common.env(),
            keys: devices, perKey: perDevice, method: method, path: path, bodyBytes: bodySize, binding: binding,
            clientData: try common.clientDataVersion(), host: try common.requestHost(), threads: concurrency,
            timeout: common.timeout)
        options.platforms = try common.platforms()
        options.androidApp = try common.androidApp()
        let androidCA = try common.loadAndroidCA()?.ca
        let lines: [String]
        do {
            lines = try PresignRunner(options: options, ca: try common.loadCA(), androidCA: androidCA).run()
        } catch {
            FileHandle.standardError.write(Data("attest-sim presign: \(error)\n".utf8))
            throw ExitCode(1)
        }
        let text = lines.joined(separator: "\n") + "\n"
        guard FileManager.default.createFile(atPath: out, contents: Data(text.utf8)) else {
            throw AttestSimError.file("--out: cannot write \(out)")
        }
        print("wrote \(lines.count) pre-signed requests (\(devices) devices × \(perDevice)) to \(out)")
    }
}
