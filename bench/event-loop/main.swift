// A minimal HTTP/1.1 keep-alive "200" responder in two event-loop designs, for bench/event-loop-designs:
//
//   per-source  one DispatchSourceRead per connection (and one for the listener), all on one serial queue:
//               libdispatch's own epoll thread wakes the queue for every ready descriptor.
//   epoll       one DispatchSourceRead on an epoll descriptor; its handler drains every ready socket with
//               epoll_wait(…, 0) (edge-triggered connections, level-triggered listener), like
//               Sources/GatewayIO/EventLoop.swift.
//
// The request handling is identical: read until EAGAIN, answer one fixed response per complete head
// ("\r\n\r\n"), close on EOF. No parsing beyond that: the bench isolates the cost of the wake-ups.
//
//   swiftc -O -import-objc-header bench/event-loop/shim.h bench/event-loop/main.swift -o /tmp/loop-bench
//   /tmp/loop-bench per-source 18101     # or: epoll 18102
import Dispatch
import Glibc

let response: [UInt8] = Array(
    "HTTP/1.1 200 OK\r\nServer: loop-bench\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: keep-alive\r\n\r\nok\n".utf8)

func listenSocket(port: UInt16) -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    var one: Int32 = 1
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = port.bigEndian
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    let r = withUnsafePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    precondition(r == 0 && listen(fd, 4096) == 0, "bind/listen 127.0.0.1:\(port) failed (errno \(errno))")
    return fd
}

/// Per-connection state: how far a partial "\r\n\r\n" has been matched across reads.
final class Conn {
    let fd: Int32
    var matched = 0
    var source: (any DispatchSourceRead)?
    init(fd: Int32) { self.fd = fd }

    /// Reads until EAGAIN and answers each complete head; false when the connection is finished.
    func service(_ buf: UnsafeMutableRawBufferPointer) -> Bool {
        while true {
            let n = read(fd, buf.baseAddress, buf.count)
            if n > 0 {
                var answers = 0
                let p = buf.baseAddress!.assumingMemoryBound(to: UInt8.self)
                let pattern: [UInt8] = [13, 10, 13, 10]
                for i in 0..<n {
                    if p[i] == pattern[matched] {
                        matched += 1
                        if matched == 4 {
                            answers += 1
                            matched = 0
                        }
                    } else {
                        matched = p[i] == 13 ? 1 : 0
                    }
                }
                if answers > 0 {
                    var out: [UInt8] = []
                    out.reserveCapacity(response.count * answers)
                    for _ in 0..<answers { out += response }
                    // Small answers to a client that waits for each: the socket buffer always takes them.
                    let w = out.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    if w < 0 { return false }
                }
                continue
            }
            if n == 0 { return false }
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
        }
    }
}

/// Design (a): a DispatchSourceRead per connection.
final class PerSourceServer: @unchecked Sendable {
    let queue = DispatchQueue(label: "per-source")
    let listenFD: Int32
    var listenSource: (any DispatchSourceRead)?
    let buf = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)

    init(port: UInt16) {
        listenFD = listenSocket(port: port)
        let s = DispatchSource.makeReadSource(fileDescriptor: listenFD, queue: queue)
        s.setEventHandler { [unowned self] in self.acceptAll() }
        s.resume()
        listenSource = s
    }

    func acceptAll() {
        while true {
            let fd = eb_accept(listenFD)
            if fd < 0 { return }
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let c = Conn(fd: fd)
            let s = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
            s.setEventHandler { [unowned self, c] in
                if !c.service(self.buf) {
                    c.source?.cancel()
                    c.source = nil
                }
            }
            s.setCancelHandler { close(fd) }
            c.source = s
            s.resume()
        }
    }
}

/// Design (b): one DispatchSourceRead on an epoll descriptor, drained with epoll_wait(…, 0).
final class EpollServer: @unchecked Sendable {
    let queue = DispatchQueue(label: "epoll")
    let ep = epoll_create1(Int32(EPOLL_CLOEXEC))
    let listenFD: Int32
    var conns: [Conn?] = Array(repeating: nil, count: 65536)
    var source: (any DispatchSourceRead)?
    let buf = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    let fds = UnsafeMutablePointer<Int32>.allocate(capacity: 512)
    let masks = UnsafeMutablePointer<UInt32>.allocate(capacity: 512)

    init(port: UInt16) {
        listenFD = listenSocket(port: port)
        precondition(eb_epoll_add(ep, listenFD, eb_EPOLLIN()) == 0)
        let s = DispatchSource.makeReadSource(fileDescriptor: ep, queue: queue)
        s.setEventHandler { [unowned self] in self.drain() }
        s.resume()
        source = s
    }

    func drain() {
        while true {
            let n = Int(eb_epoll_poll(ep, fds, masks, 512))
            if n <= 0 { return }
            for i in 0..<n {
                let fd = fds[i]
                if fd == listenFD {
                    acceptAll()
                    continue
                }
                guard let c = conns[Int(fd)] else { continue }
                if !c.service(buf) {
                    conns[Int(fd)] = nil
                    close(fd)  // also removes it from the epoll set
                }
            }
            if n < 512 { continue }
        }
    }

    func acceptAll() {
        while true {
            let fd = eb_accept(listenFD)
            if fd < 0 { return }
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            guard Int(fd) < conns.count else {
                close(fd)
                continue
            }
            conns[Int(fd)] = Conn(fd: fd)
            _ = eb_epoll_add(ep, fd, eb_EPOLLIN() | eb_EPOLLRDHUP() | eb_EPOLLET())
        }
    }
}

let args = CommandLine.arguments
guard args.count == 3, let port = UInt16(args[2]), ["per-source", "epoll"].contains(args[1]) else {
    print("usage: \(args[0]) per-source|epoll PORT")
    exit(2)
}
signal(SIGPIPE, SIG_IGN)
let server: AnyObject = args[1] == "epoll" ? EpollServer(port: port) : PerSourceServer(port: port)
withExtendedLifetime(server) { dispatchMain() }
