import AppAttestSimulator
import ArgumentParser
import AttestSim
import Dispatch
import Foundation
import GatewayCrypto
import Glibc

/// `attest-sim apple`: the local stand-in for Apple's App Attest data service (docs/attest-sim.md).
struct Apple: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Serve a stand-in for Apple's App Attest data service over HTTPS (receipts signed by the test CA).",
        discussion: """
            POST /v1/attestationData as Apple's: the base64 receipt in, the bare ES256 token in Authorization \
            (checked against the team key: alg, kid, iss, iat within an hour), a new RECEIPT with the key's risk \
            metric out (304 before its not-before, 400, 401, 404 for a key without data). Controls under /_sim/ \
            (metric per key, no data, scripted answers such as 429 with Retry-After, the request log). Runs \
            until SIGTERM or SIGINT.
            """)

    @Option(help: "Address to listen on, HOST:PORT (IPv4 or localhost; port 0 picks one, printed at start).")
    var listen: String = "127.0.0.1:0"

    @Option(
        help:
            "A CA directory made by `attest-sim ca`: its receipt chain signs the answers, its intermediate the TLS certificate (root.pem is the gateway's apple.ca_file)."
    )
    var ca: String

    @Option(name: .customLong("team-id"), help: "The team id tokens must carry as iss (the gateway's apple.team_id).")
    var teamID: String

    @Option(name: .customLong("key-id"), help: "The key id tokens must carry as kid (the gateway's apple.key_id).")
    var keyID: String

    @Option(
        name: .customLong("team-key"),
        help:
            "The team's .p8 key (PKCS#8 P-256). Created (mode 0600) when missing, as Apple hands one out: give the same file to the gateway's apple.private_key."
    )
    var teamKey: String

    @Option(
        name: .customLong("receipt-not-before"),
        help: "Seconds from a returned receipt's creation to its not-before (field 19); Apple's is a day.")
    var receiptNotBefore: Int64 = 86_400

    @Option(help: "The risk metric of keys without their own (POST /_sim/metric sets one).")
    var metric: Int64 = 1

    func run() throws {
        let parts = listen.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let port = UInt16(parts[1]), !parts[0].isEmpty else {
            throw AttestSimError.usage("--listen must be HOST:PORT, e.g. 127.0.0.1:8443 (got \"\(listen)\")")
        }
        guard receiptNotBefore >= 0, metric >= 0 else {
            throw AttestSimError.usage("--receipt-not-before and --metric must not be negative")
        }
        let directory = URL(fileURLWithPath: ca)
        let testCA: TestCA
        do {
            testCA = try TestCA.load(from: directory)
        } catch {
            throw AttestSimError.file("--ca: \(error)")
        }
        let key = try Self.teamKey(at: teamKey)
        guard let publicKey = key.p256PublicKey else { throw AttestSimError.file("--team-key \(teamKey): not a P-256 key") }
        let standIn = try AppleStandIn(
            options: .init(
                host: String(parts[0]), port: port, teamID: teamID, keyID: keyID, teamKey: publicKey,
                receiptNotBeforeSeconds: receiptNotBefore, defaultMetric: metric),
            ca: testCA, workDirectory: directory)
        // Written straight to the descriptor (not print's buffer): a test or script waits for this line.
        let line =
            "apple stand-in listening on \(standIn.url) (apple.attest_data_url; apple.ca_file: \(directory.appendingPathComponent(TestCA.rootFile).path))\n"
        FileHandle.standardOutput.write(Data(line.utf8))
        StandInSignals.stopOnTermination { standIn.stop() }
        standIn.wait()
    }

    /// The team key at `path`, made (mode 0600) when the file does not exist.
    static func teamKey(at path: String) throws -> ECPrivateKey {
        if let data = FileManager.default.contents(atPath: path) {
            do {
                return try ECPrivateKey(pem: String(decoding: data, as: UTF8.self))
            } catch {
                throw AttestSimError.file("--team-key \(path): \(error)")
            }
        }
        let key = ECPrivateKey(curve: .p256)
        guard FileManager.default.createFile(atPath: path, contents: Data(key.pkcs8PEM.utf8), attributes: [.posixPermissions: 0o600]) else {
            throw AttestSimError.file("--team-key \(path): cannot create the file")
        }
        return key
    }
}
