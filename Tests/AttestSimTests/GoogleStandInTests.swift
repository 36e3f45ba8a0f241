import AndroidAttest
import AppAttestSimulator
import AttestSim
import Foundation
import GatewayCrypto
import GatewayTestSupport
import Glibc
import Testing

/// `attest-sim google`, in process (`GoogleStandIn`) and as the binary: HTTPS with a certificate the
/// test CA issued (curl verifies it with root.pem and nothing else), Google's list with a strong
/// ETag and 304, the revoked batch listed from the start, revoke/suspend/reinstate, scripted
/// failures in order, the request log; the CA directory's Android files.
@Suite("attest-sim google: the attestation status list stand-in", .serialized, .timeLimit(.minutes(3)))
struct GoogleStandInTests {
    struct Answer {
        var status: Int
        var head: String
        var body: String

        func header(_ name: String) -> String? {
            for line in head.components(separatedBy: "\r\n") {
                let parts = line.split(separator: ":", maxSplits: 1)
                if parts.count == 2, parts[0].lowercased() == name.lowercased() {
                    return parts[1].trimmingCharacters(in: .whitespaces)
                }
            }
            return nil
        }
    }

    static func curl(_ url: String, root: String, method: String = "GET", headers: [String] = [], body: String? = nil) throws -> Answer {
        var args = ["-s", "--max-time", "10", "--cacert", root, "-D", "-", "-X", method]
        for h in headers { args += ["-H", h] }
        if let body { args += ["--data-binary", body] }
        let r = try runProcess(URL(fileURLWithPath: "/usr/bin/curl"), args + [url])
        let parts = r.stdout.components(separatedBy: "\r\n\r\n")
        let status = Int(parts.first?.split(separator: " ").dropFirst().first ?? "") ?? 0
        return Answer(status: status, head: parts.first ?? "", body: parts.dropFirst().joined(separator: "\r\n\r\n"))
    }

    /// A CA directory with the App Attest and Android CAs, as `attest-sim ca` writes it.
    static func directory() throws -> (URL, TestCA, TestAndroidCA, TestAndroidCA.RevokedBatch) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("google-sim-\(UUID().uuidString)")
        let ca = try TestCA()
        try ca.write(to: dir)
        let android = try TestAndroidCA()
        let batch = try android.issueRevokedBatch()
        try android.write(to: dir, revokedBatch: batch)
        return (dir, ca, android, batch)
    }

    @Test("200 with the list and a strong ETag; 304 on If-None-Match; a change changes the ETag; scripted failures in order; the log")
    func inProcess() throws {
        let (dir, ca, _, batch) = try Self.directory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let google = try GoogleStandIn(ca: ca, listing: [batch.serial], workDirectory: dir)
        defer { google.stop() }
        let root = dir.appendingPathComponent("root.pem").path
        #expect(google.url.hasSuffix("/attestation/status"))

        let first = try Self.curl(google.url, root: root)
        #expect(first.status == 200, "\(first.head)")
        #expect(first.header("Content-Type") == "application/json")
        let etag = try #require(first.header("ETag"))
        #expect(etag.hasPrefix("\"") && etag.hasSuffix("\"") && !etag.hasPrefix("W/") && etag == google.etag)
        // The gateway's parser reads it, and the batch's certificate is listed (as REVOKED).
        let list = try AttestationStatusList.parse(json: Array(first.body.utf8))
        #expect(list.entry(serial: batch.certificate.serialNumber)?.entry.status == "REVOKED")
        #expect(list.entries.count == 1)
        // No temporary TLS files are left in the CA directory.
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).allSatisfy { !$0.hasPrefix("google-standin") })

        // Revalidation: the same ETag is 304 without a body; a list of tags and W/ match too; another tag is 200.
        let same = try Self.curl(google.url, root: root, headers: ["If-None-Match: \(etag)"])
        #expect(same.status == 304 && same.header("ETag") == etag && same.body.isEmpty)
        #expect(try Self.curl(google.url, root: root, headers: ["If-None-Match: \"x\", W/\(etag)"]).status == 304)
        #expect(try Self.curl(google.url, root: root, headers: ["If-None-Match: \"0000\""]).status == 200)

        // Revoking (in process) and suspending (the control) change the list and its ETag.
        let other = try TestAndroidCA().issueRevokedBatch()
        try google.revoke(serial: other.serial.uppercased())
        let revoked = try Self.curl(google.url, root: root, headers: ["If-None-Match: \(etag)"])
        #expect(revoked.status == 200)
        let etag2 = try #require(revoked.header("ETag"))
        #expect(etag2 != etag)
        #expect(try AttestationStatusList.parse(json: Array(revoked.body.utf8)).entry(serial: other.certificate.serialNumber) != nil)
        let suspended = try Self.curl(
            google.url.replacingOccurrences(of: "/attestation/status", with: "/_sim/suspend"), root: root, method: "POST",
            body: "{\"serial\":\"00ABC\"}")
        #expect(suspended.status == 200 && suspended.body.contains("etag"))
        #expect(google.listed["abc"] == GoogleStandIn.Entry(status: "SUSPENDED", reason: "SOFTWARE_FLAW"))
        #expect(google.etag != etag2)
        let reinstated = try Self.curl(
            google.url.replacingOccurrences(of: "/attestation/status", with: "/_sim/reinstate"), root: root, method: "POST",
            body: "{\"serial\":\"abc\"}")
        #expect(reinstated.status == 200 && google.listed["abc"] == nil)
        // Back to the same list: the same bytes, the same ETag.
        #expect(google.etag == etag2)
        let bad = try Self.curl(
            google.url.replacingOccurrences(of: "/attestation/status", with: "/_sim/revoke"), root: root, method: "POST",
            body: "{\"serial\":\"not hex\"}")
        #expect(bad.status == 400)
        #expect(throws: AttestSimError.self) { try google.revoke(serial: "") }

        // Scripted failures come first, in order, each as many times as asked.
        google.script(.init(status: 503, retryAfter: 7, count: 2))
        google.script(.init(status: 429))
        let a = try Self.curl(google.url, root: root)
        #expect(a.status == 503 && a.header("Retry-After") == "7")
        #expect(try Self.curl(google.url, root: root).status == 503)
        let c = try Self.curl(google.url, root: root)
        #expect(c.status == 429 && c.header("Retry-After") == nil)
        #expect(try Self.curl(google.url, root: root, headers: ["If-None-Match: \(etag2)"]).status == 304)
        let scripted = try Self.curl(
            google.url.replacingOccurrences(of: "/attestation/status", with: "/_sim/answer"), root: root, method: "POST",
            body: "{\"status\":500,\"retryAfter\":3}")
        #expect(scripted.status == 200)
        #expect(try Self.curl(google.url, root: root).status == 500)
        #expect(try Self.curl(google.url, root: root).status == 200)

        // Only GET of the list's path.
        #expect(try Self.curl(google.url, root: root, method: "POST", body: "{}").status == 405)
        #expect(try Self.curl(google.url, root: root, method: "DELETE").status == 405)
        #expect(try Self.curl(google.url + "x", root: root).status == 404)

        let statuses = google.requests.map(\.status)
        #expect(statuses == [200, 304, 304, 200, 200, 503, 503, 429, 304, 500, 200])
        #expect(google.requests[1].ifNoneMatch == etag && google.requests[1].etag == etag)
        let log = try Self.curl(google.url.replacingOccurrences(of: "/attestation/status", with: "/_sim/requests"), root: root)
        let logged = ((try JSONSerialization.jsonObject(with: Data(log.body.utf8))) as? [String: Any])?["requests"] as? [[String: Any]]
        #expect(logged?.map { $0["status"] as? Int ?? 0 } == statuses)
    }

    @Test("the binary lists the CA directory's revoked batch, names its URL and CA file, and ends with 0 on SIGTERM")
    func binary() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("google-bin-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let made = try runProcess(attestSimBinary, ["ca", "--out", dir.path])
        try #require(made.status == 0, "\(made.stderr)")
        let (_, batch) = try TestAndroidCA.load(from: dir)
        let process = Process()
        let out = Pipe()
        process.executableURL = attestSimBinary
        process.arguments = ["google", "--listen", "127.0.0.1:0", "--ca", dir.path]
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        var text = ""
        let deadline = Date().addingTimeInterval(15)
        while !text.contains("\n"), Date() < deadline {
            let d = out.fileHandleForReading.availableData
            if d.isEmpty { break }
            text += String(decoding: d, as: UTF8.self)
        }
        let url = String(try #require(text.firstMatch(of: /https:\/\/127\.0\.0\.1:\d+\/attestation\/status/)).output)
        #expect(text.contains("android.ca_file: \(dir.appendingPathComponent("root.pem").path)") && text.contains(batch.serial), "\(text)")
        let root = dir.appendingPathComponent("root.pem").path
        let answer = try Self.curl(url, root: root)
        #expect(answer.status == 200)
        let list = try AttestationStatusList.parse(json: Array(answer.body.utf8))
        #expect(list.entry(serial: batch.certificate.serialNumber) != nil && list.entries.count == 1)
        // Trusted through the CA's root only: the Android root does not verify it.
        let wrongRoot = try runProcess(
            URL(fileURLWithPath: "/usr/bin/curl"),
            ["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", dir.appendingPathComponent("android-root.pem").path, url])
        #expect(wrongRoot.stdout == "000")
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)

        let noAndroid = try runProcess(attestSimBinary, ["google", "--ca", dir.path + "-missing"])
        #expect(noAndroid.status == 2 && noAndroid.stderr.contains("--ca: "), "\(noAndroid.stderr)")
        let listen = try runProcess(attestSimBinary, ["google", "--listen", "8444", "--ca", dir.path])
        #expect(listen.status == 2 && listen.stderr.contains("--listen must be HOST:PORT"))
    }

    @Test("the Android CA files: round trip, refused overwrite, another CA's key refused, a device of the revoked batch chains")
    func files() throws {
        let (dir, _, android, batch) = try Self.directory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let (loaded, loadedBatch) = try TestAndroidCA.load(from: dir)
        #expect(loaded.root.der == android.root.der && loaded.intermediate.der == android.intermediate.der)
        #expect(loadedBatch.serial == batch.serial && loadedBatch.certificate.der == batch.certificate.der)
        for (file, mode) in [
            (TestAndroidCA.rootKeyFile, 0o600), (TestAndroidCA.revokedBatchKeyFile, 0o600), (TestAndroidCA.rootFile, 0o644),
        ] {
            let attributes = try FileManager.default.attributesOfItem(atPath: dir.appendingPathComponent(file).path)
            #expect(attributes[.posixPermissions] as? Int == mode, "\(file)")
        }
        #expect(throws: TestCA.FileError.self) { try android.write(to: dir, revokedBatch: batch) }
        // A device of the batch: its chain (leaf, batch certificate, intermediate, root) verifies under the loaded root.
        let device = loadedBatch.device(ca: loaded)
        let chain = try device.makeChain(
            challenge: Array("c".utf8),
            keyDescription: device.keyDescription(packageName: "com.example.shop", signingCertificateSHA256: Array(repeating: 1, count: 32))
        )
        #expect(chain[1].der == batch.certificate.der)
        try X509ChainVerifier(roots: [loaded.root]).verify(
            leaf: chain[0], intermediates: [chain[1], chain[2]], at: Date().timeIntervalSince1970)
        // Another CA's root key in place of this one's.
        try TestAndroidCA().rootKey.pkcs8PEM.write(
            to: dir.appendingPathComponent(TestAndroidCA.rootKeyFile), atomically: true, encoding: .utf8)
        #expect { _ = try TestAndroidCA.load(from: dir) } throws: {
            ($0 as? TestCA.FileError)?.reason.contains("is not the key of") == true
        }
        try FileManager.default.removeItem(at: dir.appendingPathComponent(TestAndroidCA.metadataFile))
        #expect { _ = try TestAndroidCA.load(from: dir) } throws: { ($0 as? TestCA.FileError)?.reason.contains("--reuse") == true }
    }
}
