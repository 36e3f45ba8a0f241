import AppAttestSimulator
import ArgumentParser
import AttestSim
import Dispatch
import Foundation
import Glibc

/// `attest-sim google`: the local stand-in for Google's Android attestation status list (docs/attest-sim.md).
struct Google: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Serve a stand-in for Google's Android attestation status list over HTTPS (the CA's revoked batch listed).",
        discussion: """
            GET /attestation/status as Google's: {"entries":{"<serial hex>":{"status","reason"}}} with a strong ETag \
            that changes with the list, 304 on a matching If-None-Match. The list starts with the serial of the CA \
            directory's revoked batch (android-revoked-batch.pem). Controls under /_sim/ (revoke, suspend or \
            reinstate a serial, scripted answers such as 503 with Retry-After, the request log). Runs until \
            SIGTERM or SIGINT.
            """)

    @Option(help: "Address to listen on, HOST:PORT (IPv4 or localhost; port 0 picks one, printed at start).")
    var listen: String = "127.0.0.1:0"

    @Option(
        help:
            "A CA directory made by `attest-sim ca`: its revoked batch is listed, its intermediate issues the TLS certificate (root.pem is the gateway's android.ca_file)."
    )
    var ca: String

    func run() throws {
        let parts = listen.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let port = UInt16(parts[1]), !parts[0].isEmpty else {
            throw AttestSimError.usage("--listen must be HOST:PORT, e.g. 127.0.0.1:8444 (got \"\(listen)\")")
        }
        let directory = URL(fileURLWithPath: ca)
        let testCA: TestCA
        let batch: TestAndroidCA.RevokedBatch
        do {
            testCA = try TestCA.load(from: directory)
            batch = try TestAndroidCA.load(from: directory).revokedBatch
        } catch {
            throw AttestSimError.file("--ca: \(error)")
        }
        let standIn = try GoogleStandIn(
            host: String(parts[0]), port: port, ca: testCA, listing: [batch.serial], workDirectory: directory)
        // Written straight to the descriptor (not print's buffer): a test or script waits for this line.
        let line =
            "google stand-in listening on \(standIn.url) (android.status_url; android.ca_file: \(directory.appendingPathComponent(TestCA.rootFile).path); revoked batch \(batch.serial))\n"
        FileHandle.standardOutput.write(Data(line.utf8))
        StandInSignals.stopOnTermination { standIn.stop() }
        standIn.wait()
    }
}
