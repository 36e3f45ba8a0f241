import AppAttestSimulator
import Foundation
import GatewayCrypto
import Glibc

/// The HTTPS listener of the stand-ins (`attest-sim apple`, `attest-sim google`): a TLS certificate the test CA's
/// intermediate issues for the listen host (a gateway whose service CA file is the CA's `root.pem`
/// trusts it, nothing else does), blocking sockets, a thread per connection, HTTP/1.1 keep-alive,
/// `Content-Length` bodies (none on a 304). A test tool, not the gateway.
final class BlockingTLSServer: @unchecked Sendable {
    struct Response {
        var status: Int
        var headers: [(String, String)] = []
        var body: [UInt8] = []

        static func text(_ status: Int, _ text: String, headers: [(String, String)] = []) -> Response {
            Response(status: status, headers: [("Content-Type", "text/plain")] + headers, body: Array(text.utf8))
        }

        static func json(_ status: Int, _ object: Any) -> Response {
            let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
            return Response(status: status, headers: [("Content-Type", "application/json")], body: [UInt8](data))
        }
    }

    let host: String
    let port: UInt16
    /// The PEM chain served (leaf and the CA's intermediate).
    let certificateChain: String
    private let tls: TLSServerContext
    private let listenFD: Int32
    private let handler: @Sendable (HTTPMessage) -> Response
    private let lock = NSLock()
    private var stopped = false
    private var open: Set<Int32> = []
    private let group = DispatchGroup()

    /// - Parameter workDirectory: where the TLS certificate and key are written for a moment (removed
    ///   once loaded).
    init(
        host: String, port: UInt16, ca: TestCA, workDirectory: URL, name: String,
        handler: @escaping @Sendable (HTTPMessage) -> Response
    ) throws {
        self.host = host
        self.handler = handler
        let key = ECPrivateKey(curve: .p256)
        let now = Date()
        let leaf = try ca.issueTLSServerCertificate(
            for: host == "localhost" ? ["localhost", "127.0.0.1"] : [host], key: key,
            validity: TestCA.Validity(notBefore: now.addingTimeInterval(-3600), notAfter: now.addingTimeInterval(30 * 86_400)))
        certificateChain = X509Certificate.pem([leaf, ca.intermediate])
        let tag = UUID().uuidString.prefix(8)
        let certPath = workDirectory.appendingPathComponent("\(name)-\(tag).pem").path
        let keyPath = workDirectory.appendingPathComponent("\(name)-\(tag)-key.pem").path
        defer {
            try? FileManager.default.removeItem(atPath: keyPath)
            try? FileManager.default.removeItem(atPath: certPath)
        }
        guard FileManager.default.createFile(atPath: certPath, contents: Data(certificateChain.utf8)),
            FileManager.default.createFile(atPath: keyPath, contents: Data(key.pkcs8PEM.utf8), attributes: [.posixPermissions: 0o600])
        else { throw AttestSimError.file("cannot write the stand-in's TLS certificate in \(workDirectory.path)") }
        tls = try TLSServerContext(
            configuration: TLSServerConfiguration(
                certificates: [.init(certificatePath: certPath, privateKeyPath: keyPath)], alpnProtocols: ["http/1.1"]))

        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw AttestSimError.listen("socket: \(String(cString: strerror(errno)))") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host, &addr.sin_addr) == 1 else {
            Glibc.close(fd)
            throw AttestSimError.usage("--listen: \(host) is not an IPv4 address or localhost")
        }
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sp in
                bind(fd, sp, len) == 0 && listen(fd, 64) == 0 && getsockname(fd, sp, &len) == 0
            }
        }
        guard bound else {
            let why = String(cString: strerror(errno))
            Glibc.close(fd)
            throw AttestSimError.listen("cannot listen on \(host):\(port): \(why)")
        }
        listenFD = fd
        self.port = UInt16(bigEndian: addr.sin_port)
        group.enter()
        Thread { [self] in
            defer { group.leave() }
            acceptLoop()
        }.start()
    }

    deinit { stop() }

    func stop() {
        let fds: [Int32]? = lock.withLock {
            guard !stopped else { return nil }
            stopped = true
            return Array(open)
        }
        guard let fds else { return }
        shutdown(listenFD, Int32(SHUT_RDWR))
        Glibc.close(listenFD)
        for fd in fds { shutdown(fd, Int32(SHUT_RDWR)) }
        _ = group.wait(timeout: .now() + 10)
    }

    /// Blocks until `stop()`.
    func wait() { group.wait() }

    private func acceptLoop() {
        while true {
            let c = accept(listenFD, nil, nil)
            if c < 0 {
                if errno == EINTR { continue }
                return
            }
            let admitted = lock.withLock { () -> Bool in
                guard !stopped else { return false }
                open.insert(c)
                return true
            }
            guard admitted else {
                Glibc.close(c)
                return
            }
            var tv = timeval(tv_sec: 60, tv_usec: 0)
            setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
            group.enter()
            Thread { [self] in
                defer {
                    lock.withLock { _ = open.remove(c) }
                    Glibc.close(c)
                    group.leave()
                }
                serve(TLSSocket(fd: c, session: tls.makeSession()))
            }.start()
        }
    }

    /// HTTP/1.1 requests on one connection, kept alive, until the peer closes or asks to.
    private func serve(_ socket: TLSSocket) {
        var buffer: [UInt8] = []
        while let request = HTTPMessage.readRequest(socket, &buffer) {
            let response = handler(request)
            var head = "HTTP/1.1 \(response.status) \(AppleStandIn.reason(response.status))\r\n"
            for (name, value) in response.headers { head += "\(name): \(value)\r\n" }
            // A 304 has no body (RFC 9110 15.4.5); its Content-Length would be the 200's.
            let body = response.status == 304 ? [] : response.body
            if response.status != 304 { head += "Content-Length: \(body.count)\r\n" }
            head += "\r\n"
            guard socket.write(Array(head.utf8) + body) else { return }
            if request.header("Connection")?.lowercased() == "close" { return }
        }
    }
}

/// A stand-in as its server's handler sees it (no cycle between the two).
final class StandInBox<Target: AnyObject>: @unchecked Sendable {
    weak var target: Target?
}
