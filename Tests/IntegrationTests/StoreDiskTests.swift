import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Testing

/// A tmpfs of a given size mounted on a fresh directory under /tmp (root only). `unmount()` stops
/// nothing itself: stop every process using it first.
final class TmpfsMount {
    let path: String

    init(size: String) throws {
        var template = Array("/tmp/attest-tmpfs-XXXXXX".utf8CString)
        guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else { throw POSIXError(.EIO) }
        path = String(decoding: template.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let r = try runProcess(URL(fileURLWithPath: "/bin/mount"), ["-t", "tmpfs", "-o", "size=\(size),mode=0700", "tmpfs", path])
        guard r.status == 0 else {
            rmdir(path)
            throw HTTPCallError("mount -t tmpfs on \(path) failed: \(r.stderr)")
        }
    }

    /// Unmounts (lazily if still busy) and removes the mount point.
    func unmount() {
        if (try? runProcess(URL(fileURLWithPath: "/bin/umount"), [path]))?.status != 0 {
            _ = try? runProcess(URL(fileURLWithPath: "/bin/umount"), ["-l", path])
        }
        rmdir(path)
    }

    /// Root, and a tmpfs can be mounted here (CI runs as root; elsewhere the test is skipped).
    static let available: Bool = {
        guard getuid() == 0, let probe = try? TmpfsMount(size: "64k") else { return false }
        probe.unmount()
        return true
    }()

    /// Writes a file of `chunk`-byte writes until the file system refuses one (ENOSPC); returns its size.
    func fill(_ name: String, chunk: Int = 4096) -> Int {
        let fd = open("\(path)/\(name)", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        let bytes = [UInt8](repeating: 0xA5, count: chunk)
        var total = 0
        while true {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress, chunk) }
            if n <= 0 { break }
            total += n
        }
        // Then single bytes, so that no partly used page is left behind.
        while bytes.withUnsafeBytes({ write(fd, $0.baseAddress, 1) }) == 1 { total += 1 }
        return total
    }
}

@Suite("Memory store on disk: a full data_dir, journal damage (real gatewayd)", .serialized, .timeLimit(.minutes(5)))
struct StoreDiskTests {
    static let appID = "ABCDE12345.com.example.shop"
    let ca: TestCA
    let dir: URL

    init() throws {
        (ca, dir) = try makeTrustedTestCADirectory("gw-storedisk")
    }

    func config(dataDir: String, snapshotInterval: String) -> String {
        """
        \(TestGatewayYAML.base(caDir: dir))
        store: {kind: memory, shards: 8, data_dir: \(dataDir), snapshot_interval: \(snapshotInterval)}
        routes:
          - name: signed-body
            match: {path_prefix: /api/signed}
            upstream: demo
            assertion: {mode: enforce, bind: body, challenge: "off"}
          - name: open-body
            match: {path_prefix: /api/open}
            upstream: demo
            assertion: {mode: enforce, bind: body, challenge: "off", on_store_error: fail_open}
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """
    }

    /// A body-bound request (challenge off: the counter alone stops a replay), signed now.
    func signed(_ d: ContractDevice, _ n: Int) -> (headers: [(String, String)], body: [UInt8]) {
        let body = Array("{\"n\":\(n)}".utf8)
        let a = d.device.assert(clientDataHash: SHA256.hash(body))
        return ([("X-App-Attest-Key-Id", d.keyID), ("X-App-Assertion", Base64.encode(a))], body)
    }

    func send(_ port: UInt16, _ r: (headers: [(String, String)], body: [UInt8]), path: String = "/api/signed") throws -> HTTPCall {
        try HTTPCall.send(port: port, method: "POST", target: path, headers: r.headers, body: r.body)
    }

    func readyz(_ gw: GatewayProcess) -> (Int, String) { (try? curl([gw.url("admin", "/readyz")])) ?? (0, "") }

    @Test(
        "data_dir full: 503 store_unavailable, /readyz 503 with the reason, an error line, the metric; space freed: recovers without a restart, nothing acknowledged lost",
        .enabled(if: TmpfsMount.available, "needs root and mount(8) to mount a 512 KiB tmpfs (CI runs as root); skipped"))
    func fullDiskRecoversWithoutRestart() throws {
        let mount = try TmpfsMount(size: "512k")
        defer { mount.unmount() }
        let data = "\(mount.path)/data"
        let gw = try GatewayProcess(config: config(dataDir: data, snapshotInterval: "1s"))
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        #expect(try phone.register().status == 201)
        var accepted: [(headers: [(String, String)], body: [UInt8])] = []
        for n in 0..<3 {
            let r = signed(phone, n)
            #expect(try send(port, r).status == 200)
            accepted.append(r)
        }
        #expect(readyz(gw).0 == 200)

        // Fill the file system, then send until the journal's page runs out.
        #expect(mount.fill("filler") > 0)
        var refused: (headers: [(String, String)], body: [UInt8])?
        for n in 3..<400 {
            let r = signed(phone, n)
            let answer = try send(port, r)
            if answer.status == 200 {
                accepted.append(r)
                continue
            }
            #expect(answer.status == 503)
            #expect(answer.error == "store_unavailable")
            refused = r
            break
        }
        let refusedRequest = try #require(refused, "no request was refused on a full data_dir")
        let (status, body) = readyz(gw)
        #expect(status == 503)
        let reasons = (try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any])?["reasons"] as? [String]
        #expect(reasons?.contains { $0.hasPrefix("store: journal write failed: ENOSPC (\(data)/journal-") } == true, "\(body)")
        // Meanwhile: every protected request of every key refused, registrations too; fail_open forwards.
        #expect(try send(port, signed(phone, 1000)).error == "store_unavailable")
        let tablet = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        let registration = try tablet.register()
        #expect(registration.status == 503 && registration.error == "store_unavailable")
        let open = try send(port, signed(phone, 1001), path: "/api/open")
        #expect(open.status == 200)
        #expect((open.json?["headers"] as? [String: String])?["X-App-Attest-Verified-Key-Id"] == nil)
        let errorLine = gw.stderrLines.first { $0.contains("\"level\":\"error\"") && $0.contains("\"msg\":\"store write failed\"") }
        #expect(errorLine?.contains("\"file\":\"journal\"") == true && errorLine?.contains("\"errno\":\"ENOSPC\"") == true, "\(gw.stderr)")
        #expect(gw.stderrLines.contains { $0.contains("\"level\":\"error\"") && $0.contains("store refuses writes") })
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("attest_gateway_store_write_errors_total{file=\"journal\",errno=\"ENOSPC\"}"), "\(metrics)")
        #expect(
            metrics.contains(
                "attest_gateway_assertion_verdicts_total{route=\"open-body\",mode=\"enforce\",verdict=\"fail_open\",reason=\"store_unavailable\"} 1"
            ))
        // Retries are logged once per interval, not once per attempt.
        usleep(1_500_000)
        #expect(gw.stderrLines.filter { $0.contains("\"msg\":\"store write failed\"") }.count <= 4, "\(gw.stderr)")

        // Space freed: back by itself.
        try FileManager.default.removeItem(atPath: "\(mount.path)/filler")
        var ready = false
        for _ in 0..<100 where !ready {
            ready = readyz(gw).0 == 200
            if !ready { usleep(200_000) }
        }
        #expect(ready, "/readyz did not recover: \(readyz(gw).1)")
        #expect(gw.stderrLines.contains { $0.contains("\"msg\":\"store writes recovered\"") })
        // The refused request was not applied: it is accepted now; the accepted ones stay refused.
        #expect(try send(port, refusedRequest).status == 200)
        for r in accepted { #expect(try send(port, r).error == "counter_replay") }
        #expect(try send(port, signed(phone, 2000)).status == 200)
        #expect(try tablet.register().status == 201)

        // And after a crash: nothing acknowledged lost.
        gw.signal(SIGKILL)
        gw.waitForExit()
        let again = try GatewayProcess(config: config(dataDir: data, snapshotInterval: "1s"))
        defer { again.stop() }
        let port2 = HTTPCall.port(again, "public")
        for r in accepted + [refusedRequest] { #expect(try send(port2, r).error == "counter_replay") }
        tablet.rebind(port: port2)
        #expect(try send(port2, signed(tablet, 1)).status == 200)
    }

    @Test("a damaged last journal record is reported at restart (segment, offset, length), counted, and its request stays a replay")
    func damagedLastRecordIsLoudAndKeepsTheCounter() throws {
        let data = dir.appendingPathComponent("data-damage").path
        defer { try? FileManager.default.removeItem(atPath: data) }
        let gw = try GatewayProcess(config: config(dataDir: data, snapshotInterval: "1h"))
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        #expect(try phone.register().status == 201)
        let first = signed(phone, 1)
        let last = signed(phone, 2)
        #expect(try send(port, first).status == 200)
        #expect(try send(port, last).status == 200)
        gw.signal(SIGKILL)
        gw.waitForExit()

        // The newest segment's last record is the advance of `last`: flip a bit of its last-seen time.
        let names = try FileManager.default.contentsOfDirectory(atPath: data).filter { $0.hasPrefix("journal-") }.sorted()
        let segment = "\(data)/\(try #require(names.last))"
        var bytes = [UInt8](try #require(FileManager.default.contents(atPath: segment)))
        let offset = bytes.count - 49
        bytes[bytes.count - 1] ^= 0x01
        #expect(FileManager.default.createFile(atPath: segment, contents: Data(bytes)))

        let again = try GatewayProcess(config: config(dataDir: data, snapshotInterval: "1h"))
        defer { again.stop() }
        let port2 = HTTPCall.port(again, "public")
        #expect(try send(port2, last).error == "counter_replay")
        #expect(try send(port2, first).error == "counter_replay")
        let line = again.stderrLines.first { $0.contains("\"msg\":\"journal damage") }
        #expect(line?.contains("\"level\":\"error\"") == true, "\(again.stderr)")
        #expect(line?.contains("\"segment\":\"\(segment)\"") == true)
        #expect(line?.contains("\"offset\":\"\(offset)\"") == true)
        #expect(line?.contains("\"length\":\"49\"") == true)
        #expect(line?.contains("\"kind\":\"checksum\"") == true)
        #expect(line?.contains("\"key_id\":\"\(phone.keyID)\"") == true)
        let metrics = try curl([again.url("admin", "/metrics")]).1
        #expect(metrics.contains("attest_gateway_store_journal_corrupt_records_total 1"), "\(metrics)")
        phone.rebind(port: port2)
        #expect(try send(port2, signed(phone, 3)).status == 200)
    }
}
