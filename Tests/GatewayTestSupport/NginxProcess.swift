import Foundation
import Glibc

/// A private nginx on loopback, as a real upstream for integration tests: its own prefix in a temp
/// directory, `daemon off` and `master_process off` (one process: the pid we started is all there is
/// to stop), error log and temp paths inside the prefix, a free loopback port. `stop()` (and deinit)
/// kills it and removes the directory.
///
/// Locations:
/// - `/fixed`: `200 "hello from nginx\n"`; `/nocontent`: 204.
/// - `/echo…`: 200, the request as nginx saw it, one `key=value` per line (method, uri, the forwarding
///   and hop-by-hop fields, nginx's connection number and request count on that connection).
/// - `/static.txt`: a static file (ETag, so `If-None-Match` gets 304).
/// - `/chunked.html`: SSI output, sent chunked (no length known in advance).
/// - `/large.bin`: `NginxProcess.largeBytes` bytes of `largePattern`.
/// - `/zero.bin`: a sparse file of `zeroFileBytes` zero bytes (made with truncate, no disk used).
/// - `/upload`: reads the whole request body (any size, chunked or not), then answers
///   `received=<length>` (nginx proxies it, de-chunked with a Content-Length, to its own `/upload-sink`).
///
/// With `front`, it is instead a reverse proxy in front of another server (the gateway): every
/// request goes to `http://127.0.0.1:<front.upstreamPort>` with `front.directives` (e.g.
/// `proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;`).
public final class NginxProcess: @unchecked Sendable {
    /// nginx as a reverse proxy in front of a server on loopback.
    public struct Front: Sendable {
        public var upstreamPort: UInt16
        public var directives: [String]
        public init(upstreamPort: UInt16, directives: [String]) {
            self.upstreamPort = upstreamPort
            self.directives = directives
        }
    }

    public static let candidates = ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx", "/usr/bin/nginx"]
    public static var binary: String? { candidates.first { FileManager.default.isExecutableFile(atPath: $0) } }
    public static var isInstalled: Bool { binary != nil }
    /// Under CI (`CI=true`) nginx tests never skip: a missing nginx fails them.
    public static var isCI: Bool { ProcessInfo.processInfo.environment["CI"] == "true" }
    /// Whether nginx-backed tests run: nginx is installed, or we are under CI (where its absence must fail).
    public static var testsEnabled: Bool { isInstalled || isCI }

    public static let largeBytes = 8 << 20
    public static func largePattern(_ i: Int) -> UInt8 { UInt8(truncatingIfNeeded: i &* 31 &+ i >> 11) }
    public static let chunkedText = String(repeating: "0123456789abcdef", count: 6000)

    public let prefix: URL
    public private(set) var port: UInt16 = 0
    private var stopped = false
    private let front: Front?
    /// PEM files of the certificate (chain) and key: the static server listens with TLS.
    private let tls: (certificate: String, key: String)?

    /// The directory the static server serves (files a test writes there are served with ETags).
    public var html: URL { prefix.appendingPathComponent("html") }

    /// - Parameters:
    ///   - port: listen there (a server restarted where it was); by default a free one.
    ///   - tls: the static server's certificate and key (PEM files): it then speaks HTTPS only.
    public init(
        zeroFileBytes: Int64 = 0, front: Front? = nil, timeout: TimeInterval = 15, port fixedPort: UInt16? = nil,
        tls: (certificate: String, key: String)? = nil
    ) throws {
        self.front = front
        self.tls = tls
        guard let binary = Self.binary else {
            throw HTTPTestError("nginx not found (looked in \(Self.candidates.joined(separator: ", "))); run scripts/install-deps.sh")
        }
        prefix = FileManager.default.temporaryDirectory.appendingPathComponent("gw-nginx-\(UUID().uuidString)")
        let fm = FileManager.default
        let html = prefix.appendingPathComponent("html")
        for d in ["html", "tmp/body", "tmp/proxy", "tmp/fastcgi", "tmp/uwsgi", "tmp/scgi", "logs"] {
            try fm.createDirectory(at: prefix.appendingPathComponent(d), withIntermediateDirectories: true)
        }
        do {
            var large = [UInt8](repeating: 0, count: Self.largeBytes)
            for i in large.indices { large[i] = Self.largePattern(i) }
            try Data(large).write(to: html.appendingPathComponent("large.bin"))
            try "static file\n".write(to: html.appendingPathComponent("static.txt"), atomically: true, encoding: .utf8)
            try "start <!--# echo var=\"request_method\" -->\n\(Self.chunkedText)\nend\n"
                .write(to: html.appendingPathComponent("chunked.html"), atomically: true, encoding: .utf8)
            let zero = html.appendingPathComponent("zero.bin")
            fm.createFile(atPath: zero.path, contents: nil)
            if zeroFileBytes > 0 {
                let h = try FileHandle(forWritingTo: zero)
                try h.truncate(atOffset: UInt64(zeroFileBytes))  // sparse
                try h.close()
            }
        } catch {
            try? fm.removeItem(at: prefix)
            throw error
        }
        // The port is chosen free just before nginx binds it; another process may take it in between,
        // so a failed start is retried on a new port.
        var lastError = ""
        for _ in 0..<(fixedPort == nil ? 3 : 50) {
            port = try fixedPort ?? freeLoopbackPort()
            try config(port: port).write(to: prefix.appendingPathComponent("nginx.conf"), atomically: true, encoding: .utf8)
            let p = Process()
            p.executableURL = URL(fileURLWithPath: binary)
            p.arguments = [
                "-p", prefix.path + "/", "-c", prefix.appendingPathComponent("nginx.conf").path,
                "-e", prefix.appendingPathComponent("logs/error.log").path,
            ]
            p.standardInput = FileHandle.nullDevice
            p.standardOutput = FileHandle.nullDevice
            p.standardError = FileHandle.nullDevice
            try p.run()
            let deadline = Date().addingTimeInterval(timeout)
            while Date() < deadline && p.isRunning {
                if (try? LoopbackClient(port: port)) != nil {
                    processStarted(p)
                    return
                }
                usleep(20_000)
            }
            if p.isRunning {
                kill(p.processIdentifier, SIGKILL)
            }
            p.waitUntilExit()
            lastError = errorLog
            if fixedPort != nil { usleep(100_000) }  // the port may be in use a moment longer
        }
        try? fm.removeItem(at: prefix)
        throw HTTPTestError("nginx did not start: \(lastError)")
    }

    private var started: Process?
    private func processStarted(_ p: Process) { started = p }

    public var pid: Int32 { started?.processIdentifier ?? 0 }

    deinit { stop() }

    public var errorLog: String {
        (try? String(contentsOf: prefix.appendingPathComponent("logs/error.log"), encoding: .utf8)) ?? ""
    }

    public func stop() {
        guard !stopped else { return }
        stopped = true
        if let p = started, p.isRunning {
            kill(p.processIdentifier, SIGKILL)
            p.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: prefix)
    }

    private func config(port: UInt16) -> String {
        let p = prefix.path
        // Both configurations: one foreground process, logs and temporary files under the prefix.
        let preamble = """
            daemon off;
            master_process off;
            worker_processes 1;
            error_log \(p)/logs/error.log warn;
            pid \(p)/logs/nginx.pid;
            events { worker_connections 1024; }
            http {
                access_log off;
                client_body_temp_path \(p)/tmp/body;
                proxy_temp_path \(p)/tmp/proxy;
                fastcgi_temp_path \(p)/tmp/fastcgi;
                uwsgi_temp_path \(p)/tmp/uwsgi;
                scgi_temp_path \(p)/tmp/scgi;
            """
        if let front {
            return preamble + """

                    server {
                        listen 127.0.0.1:\(port);
                        location / {
                            proxy_pass http://127.0.0.1:\(front.upstreamPort);
                            proxy_http_version 1.1;
                            proxy_set_header Connection "";
                            \(front.directives.joined(separator: "\n                        "))
                        }
                    }
                }
                """
        }
        let echo =
            [
                "method=$request_method", "uri=$request_uri", "host=$http_host", "xff=$http_x_forwarded_for",
                "xfproto=$http_x_forwarded_proto", "xfhost=$http_x_forwarded_host", "via=$http_via",
                "connection=$http_connection", "keepalive=$http_keep_alive", "te=$http_te", "upgrade=$http_upgrade",
                "proxyauth=$http_proxy_authorization", "secret=$http_x_secret", "custom=$http_x_custom",
                "conn=$connection", "conn_requests=$connection_requests", "protocol=$server_protocol", "port=$server_port",
            ].joined(separator: "\\n") + "\\n"
        return preamble + """

                default_type application/octet-stream;
                types { text/html html; text/plain txt; }
                keepalive_timeout 60s 60s;
                keepalive_requests 100000;
                server {
                    listen 127.0.0.1:\(port)\(tls == nil ? "" : " ssl");
                    \(tls.map { "ssl_certificate \($0.certificate); ssl_certificate_key \($0.key);" } ?? "")
                    root \(p)/html;
                    location = /fixed { return 200 "hello from nginx\\n"; }
                    location = /nocontent { return 204; }
                    location /echo {
                        add_header Proxy-Connection "keep-alive";
                        add_header X-Upstream "nginx";
                        return 200 "\(echo)";
                    }
                    location = /chunked.html { ssi on; }
                    location = /upload {
                        client_max_body_size 0;
                        proxy_pass http://127.0.0.1:\(port)/upload-sink;
                    }
                    location = /upload-sink { return 200 "received=$content_length\\n"; }
                }
            }
            """
    }
}

/// `key=value` lines (nginx's `/echo` answer) as a dictionary.
public func echoFields(_ text: String) -> [String: String] {
    var out: [String: String] = [:]
    for line in text.split(separator: "\n") {
        guard let eq = line.firstIndex(of: "=") else { continue }
        out[String(line[..<eq])] = String(line[line.index(after: eq)...])
    }
    return out
}
