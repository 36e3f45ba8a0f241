// tls-bench: TLSSession against the same work in C on raw OpenSSL (CTLSBaseline), one thread, both
// ends of each connection in this process over memory buffers (no sockets): so the numbers are the
// cost of TLS itself plus our wrapper, for a client and a server together.
//
//   full handshakes/s     TLS 1.3, X25519, ECDSA P-256 certificate, client verifies chain and name
//   resumed handshakes/s  the same with a ticket from the previous connection
//   bulk MiB/s            server → client in 16 KiB writes, encrypt + decrypt (AES-128-GCM)
//
// Time is the thread's CPU time (CLOCK_THREAD_CPUTIME_ID) on both sides, so that other processes on a
// shared machine change the numbers less than wall-clock time would. Each measurement alternates Swift and C `--rounds` times (default 3) and reports medians and the
// ratio Swift ÷ C (1.0 = no overhead from the wrapper).
import CTLSBaseline
import Foundation
import GatewayCrypto

enum Bench {
    static func main() throws {
        var seconds = 2.0
        var rounds = 3
        var bulkMiB = 256
        var args = CommandLine.arguments.dropFirst()
        while let a = args.popFirst() {
            switch a {
            case "--seconds": seconds = Double(args.popFirst() ?? "") ?? seconds
            case "--rounds": rounds = Int(args.popFirst() ?? "") ?? rounds
            case "--bulk-mib": bulkMiB = Int(args.popFirst() ?? "") ?? bulkMiB
            default:
                FileHandle.standardError.write(Data("usage: tls-bench [--seconds S] [--rounds N] [--bulk-mib M]\n".utf8))
                exit(2)
            }
        }
        let files = try Files()
        defer { try? FileManager.default.removeItem(atPath: files.dir) }
        let server = try TLSServerContext(
            configuration: TLSServerConfiguration(
                certificates: [.init(certificatePath: files.cert, privateKeyPath: files.key, serverNames: ["gateway.test"])]))
        let client = try TLSClientContext(configuration: TLSClientConfiguration(caFile: files.ca))

        var rows: [(String, Double, Double)] = []
        func measure(_ name: String, _ swift: () throws -> Double, _ c: () -> Double) throws {
            var s: [Double] = []
            var b: [Double] = []
            for _ in 0..<rounds {
                s.append(try swift())
                let v = c()
                guard v > 0 else { throw BenchError("C baseline failed for \(name)") }
                b.append(v)
            }
            rows.append((name, median(s), median(b)))
        }
        try measure("full handshakes/s", { try handshakes(server, client, resume: false, seconds: seconds) }) {
            tls_baseline_handshakes(files.cert, files.key, files.ca, 0, seconds)
        }
        try measure("resumed handshakes/s", { try handshakes(server, client, resume: true, seconds: seconds) }) {
            tls_baseline_handshakes(files.cert, files.key, files.ca, 1, seconds)
        }
        try measure("bulk MiB/s", { try bulk(server, client, mib: bulkMiB) }) {
            tls_baseline_bulk(files.cert, files.key, files.ca, Int32(bulkMiB))
        }
        print("| workload (one thread, client + server, per CPU second) | TLSSession | raw OpenSSL (C) | ratio |")
        print("| --- | ---: | ---: | ---: |")
        for (name, s, c) in rows {
            print("| \(name) | \(fmt(s)) | \(fmt(c)) | \(String(format: "%.2f", s / c)) |")
        }
    }

    static func handshakes(_ server: TLSServerContext, _ client: TLSClientContext, resume: Bool, seconds: Double) throws -> Double {
        var ticket: TLSResumableSession? = nil
        var count = 0
        let start = cpuSeconds()
        while cpuSeconds() < start + seconds {
            let c = try client.makeSession(serverName: "gateway.test", resuming: resume ? ticket : nil)
            let s = server.makeSession()
            pump(c, s)
            guard let info = s.connectionInfo, c.connectionInfo != nil else {
                throw BenchError("handshake failed: \(s.handshakeState) / \(c.handshakeState)")
            }
            if resume {
                if ticket != nil && !info.resumed { throw BenchError("not resumed") }
                ticket = c.resumableSession()
            }
            count += 1
        }
        return Double(count) / (cpuSeconds() - start)
    }

    static func bulk(_ server: TLSServerContext, _ client: TLSClientContext, mib: Int) throws -> Double {
        let c = try client.makeSession(serverName: "gateway.test")
        let s = server.makeSession()
        pump(c, s)
        guard s.connectionInfo != nil else { throw BenchError("handshake failed") }
        let chunk = [UInt8](repeating: 0x5a, count: 16 * 1024)
        let total = mib << 20
        var received = 0
        let sink = UnsafeMutableRawBufferPointer.allocate(byteCount: 16 * 1024, alignment: 16)
        defer { sink.deallocate() }
        let start = cpuSeconds()
        try chunk.withUnsafeBytes { raw in
            while received < total {
                guard try s.writePlaintext(raw) == raw.count else { throw BenchError("short write") }
                s.sendCiphertext { bytes in
                    c.feed(bytes)
                    return bytes.count
                }
                while case .bytes(let n) = c.readPlaintext(into: sink) { received += n }
            }
        }
        return Double(total) / Double(1 << 20) / (cpuSeconds() - start)
    }

    /// Client out → server; server reads; server out → client; client reads (as the tests do).
    static func pump(_ client: TLSSession, _ server: TLSSession) {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 16 * 1024, alignment: 16)
        defer { buffer.deallocate() }
        for _ in 0..<64 {
            let a = client.sendCiphertext {
                server.feed($0); return $0.count
            }
            while case .bytes = server.readPlaintext(into: buffer) {}
            let b = server.sendCiphertext {
                client.feed($0); return $0.count
            }
            while case .bytes = client.readPlaintext(into: buffer) {}
            if a == 0 && b == 0 && client.pendingCiphertextCount == 0 && server.pendingCiphertextCount == 0 { break }
        }
    }

    static func cpuSeconds() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }

    static func median(_ v: [Double]) -> Double { v.sorted()[v.count / 2] }
    static func fmt(_ v: Double) -> String { v >= 100 ? String(format: "%.0f", v) : String(format: "%.1f", v) }
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

/// A CA and a P-256 leaf for gateway.test, written to a temporary directory (key 0600).
struct Files {
    let dir: String
    let cert: String
    let key: String
    let ca: String

    init() throws {
        dir = NSTemporaryDirectory() + "tls-bench-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let now = Int64(Date().timeIntervalSince1970)
        let caKey = ECPrivateKey(curve: .p256)
        let caName = CertificateBuilder.Name(commonName: "tls-bench CA")
        let caCert = try CertificateBuilder(
            subject: caName, issuer: caName, serialNumber: CertificateBuilder.randomSerialNumber(), notBefore: now - 60,
            notAfter: now + 86400, subjectKey: caKey, basicConstraints: .certificateAuthority(pathLength: nil),
            keyUsage: [.keyCertSign]
        ).sign(with: caKey)
        let leafKey = ECPrivateKey(curve: .p256)
        let san = CertificateBuilder.Extension(
            oid: "2.5.29.17", critical: false,
            value: CertificateBuilder.DER.sequence([CertificateBuilder.DER.element(tag: 0x82, Array("gateway.test".utf8))]))
        let leaf = try CertificateBuilder(
            subject: .init(commonName: "gateway.test"), issuer: caName, serialNumber: CertificateBuilder.randomSerialNumber(),
            notBefore: now - 60, notAfter: now + 86400, subjectKey: leafKey, basicConstraints: .endEntity,
            keyUsage: [.digitalSignature], extensions: [san]
        ).sign(with: caKey)
        cert = dir + "/leaf.pem"
        key = dir + "/leaf.key"
        ca = dir + "/ca.pem"
        try X509Certificate.pem([leaf, caCert]).write(toFile: cert, atomically: true, encoding: .utf8)
        try caCert.pem.write(toFile: ca, atomically: true, encoding: .utf8)
        _ = FileManager.default.createFile(atPath: key, contents: Data(leafKey.pkcs8PEM.utf8), attributes: [.posixPermissions: 0o600])
    }
}

try Bench.main()
